//! Azure Blob Storage destinations (`backend: azure`, SPEC §21): the [`Dialect`] that
//! builds an Azure client for the object-store backend ([`crate::backend::s3`]), which
//! keeps every promise of SPEC §14 the same way on both stores: the lease, the decision
//! record, the state committed with `If-Match`, conditional puts (`If-None-Match: *`,
//! `If-Match` on ETags, as Azure spells them too), the staging records and the log.
//!
//! What differs here:
//! - a bundle path is `az://<container>/<prefix>`; the account comes from `azure.account`
//!   (else `AZURE_STORAGE_ACCOUNT_NAME`), the endpoint from `azure.endpoint` (else Azure's
//!   `https://<account>.blob.core.windows.net`; the emulator's
//!   `http://127.0.0.1:10000/devstoreaccount1` with `use_emulator`);
//! - credentials come only from the standard Azure environment variables (account key,
//!   SAS, bearer token, workload identity, client secret, managed identity endpoint), never
//!   from the config; with none, the destination is refused before any request, and the
//!   emulator uses its well-known key;
//! - moved-aside copies go through this host ([`Dialect::copies_in_store`]): Azure's Copy
//!   Blob may still be pending when it returns;
//! - accounts with a hierarchical namespace (Data Lake Storage Gen2) are refused: there a
//!   key's `/` makes directories, and a delete or a listing does not behave as on a flat
//!   namespace of keys.

use crate::backend::s3::clock::{DateConnector, Prepare, StoreClock};
use crate::backend::s3::{Clients, Dialect, S3Location, chain_text};
use crate::error::{Error, Result};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64_STANDARD;
use bytes::Bytes;
use http::Method;
use http::header::{AUTHORIZATION, HeaderName, HeaderValue};
use md5::{Digest, Md5};
use object_store::azure::{
    AzureAccessKey, AzureAuthorizer, AzureConfigKey, AzureCredential, MicrosoftAzureBuilder,
};
use object_store::client::{HttpError, HttpErrorKind, HttpRequest};
use object_store::path::Path as Key;
use object_store::{Attribute, GetOptions, ObjectStore};
use std::sync::Arc;

/// The header that carries a body's MD5, which Azure checks (not in `http`'s list).
const CONTENT_MD5: HeaderName = HeaderName::from_static("content-md5");

/// The emulator's account (Azurite's `devstoreaccount1`).
pub const EMULATOR_ACCOUNT: &str = "devstoreaccount1";

/// The emulator's well-known account key (public: Azurite's documented default).
const EMULATOR_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// Where to read how to set credentials up.
const CREDENTIALS: &str = "distributor reads Azure credentials only from the environment: AZURE_STORAGE_ACCOUNT_KEY (the account key), AZURE_STORAGE_SAS_TOKEN (a SAS with read, add, create, write, delete and list on the container), AZURE_STORAGE_TOKEN (a bearer token), workload identity (AZURE_FEDERATED_TOKEN_FILE with AZURE_CLIENT_ID and AZURE_TENANT_ID, as AKS sets them), AZURE_CLIENT_SECRET with AZURE_CLIENT_ID and AZURE_TENANT_ID, or a managed identity endpoint (IDENTITY_ENDPOINT, MSI_ENDPOINT); set one of them (docs/operations.md#azure-blob-storage)";

/// Azure Blob Storage, and its emulator Azurite.
#[derive(Debug)]
pub struct Azure;

/// The credential settings taken from the environment, as object_store names them: the
/// variables it reads itself (`AZURE_*`), limited to credentials, so nothing else of a
/// destination's store (endpoint, emulator, container) comes from the environment.
fn credentials_from_env() -> Vec<(AzureConfigKey, String)> {
    let credential = |k: &AzureConfigKey| {
        matches!(
            k,
            AzureConfigKey::AccessKey
                | AzureConfigKey::SasKey
                | AzureConfigKey::Token
                | AzureConfigKey::ClientId
                | AzureConfigKey::ClientSecret
                | AzureConfigKey::AuthorityId
                | AzureConfigKey::AuthorityHost
                | AzureConfigKey::FederatedTokenFile
                | AzureConfigKey::MsiEndpoint
                | AzureConfigKey::ObjectId
                | AzureConfigKey::MsiResourceId
                | AzureConfigKey::UseAzureCli
        )
    };
    let mut found: Vec<(AzureConfigKey, String)> = std::env::vars()
        .filter(|(k, v)| k.starts_with("AZURE_") && !v.is_empty())
        .filter_map(|(k, v)| Some((k.to_ascii_lowercase().parse().ok()?, v)))
        .filter(|(k, _)| credential(k))
        .collect();
    for k in ["IDENTITY_ENDPOINT", "MSI_ENDPOINT"] {
        if let Ok(v) = std::env::var(k)
            && !v.is_empty()
        {
            found.push((AzureConfigKey::MsiEndpoint, v));
        }
    }
    found
}

/// Whether the settings found name a way to sign requests: an ID alone does not.
fn names_a_credential(found: &[(AzureConfigKey, String)]) -> bool {
    found.iter().any(|(k, v)| match k {
        AzureConfigKey::AccessKey
        | AzureConfigKey::SasKey
        | AzureConfigKey::Token
        | AzureConfigKey::ClientSecret
        | AzureConfigKey::FederatedTokenFile
        | AzureConfigKey::MsiEndpoint => true,
        AzureConfigKey::UseAzureCli => v.eq_ignore_ascii_case("true"),
        _ => false,
    })
}

impl Dialect for Azure {
    fn name(&self) -> &'static str {
        "azure"
    }

    fn scheme(&self) -> &'static str {
        "az://"
    }

    fn capabilities(&self) -> crate::backend::Capabilities {
        crate::backend::Capabilities {
            drops_trailing_dots: true,
            ..crate::backend::Capabilities::OBJECT_STORE
        }
    }

    fn connect(
        &self,
        container: &str,
        mut location: S3Location,
        clock: &StoreClock,
    ) -> Result<Clients> {
        let shown = format!("az://{container}");
        let (account, endpoint) = account_and_endpoint(&shown, &location)?;
        location.account = Some(account.clone());
        let fix = if endpoint.is_some() {
            "azure.endpoint (the account's blob endpoint)"
        } else {
            "azure.account (this is Azure: https://<account>.blob.core.windows.net, as no azure.endpoint is set)"
        };
        let mut builder = MicrosoftAzureBuilder::new()
            .with_account(&account)
            .with_container_name(container)
            .with_allow_http(location.allow_http);
        if let Some(ep) = endpoint {
            builder = builder.with_endpoint(ep);
        }
        let found = credentials_from_env();
        let mut key = found
            .iter()
            .find(|(k, _)| *k == AzureConfigKey::AccessKey)
            .map(|(_, v)| v.clone());
        if !names_a_credential(&found) {
            if !location.use_emulator {
                return Err(Error::Failed(format!(
                    "azure destination {shown}: no Azure credentials found; {CREDENTIALS}"
                )));
            }
            builder = builder.with_access_key(EMULATOR_KEY);
            key = Some(EMULATOR_KEY.to_string());
        }
        // A key object_store refuses is reported by its build below.
        let key = key.and_then(|k| AzureAccessKey::try_new(&k).ok());
        let md5 = ContentMd5 {
            account: account.clone(),
            key: key.map(AzureCredential::AccessKey),
        };
        builder = builder
            .with_http_connector(DateConnector::new(clock.clone(), fix).preparing(Arc::new(md5)));
        for (k, v) in found {
            builder = builder.with_config(k, v);
        }
        let client = Arc::new(builder.build().map_err(|e| {
            Error::setting(format!("azure destination {shown}: {}", chain_text(&e)))
        })?);
        Ok(Clients {
            client: client.clone(),
            multipart: client,
            location,
        })
    }

    fn copies_in_store(&self) -> bool {
        // Copy Blob may return while the copy is still pending (SPEC §21).
        false
    }

    fn etags_follow_content(&self) -> bool {
        // Every write makes a new ETag, the same bytes restored by an undo included.
        false
    }

    fn records_uploads(&self) -> bool {
        // Uncommitted blocks are dropped by the store; there is nothing to abort.
        false
    }

    fn explain(&self, action: &str, what: &str, e: &object_store::Error) -> Option<String> {
        let text = chain_text(e);
        if text.contains("ContainerNotFound") {
            let container = (what.strip_prefix("az://"))
                .and_then(|w| w.split('/').next())
                .unwrap_or(what);
            return Some(format!(
                "azure: {action} {what}: container {container} does not exist (the store says ContainerNotFound; or it is in another account than this endpoint's): create it first (e.g. `az storage container create --name {container}`), or correct the container in the destination's path; distributor never creates containers"
            ));
        }
        let denied = [
            "AuthenticationFailed",
            "AuthorizationFailure",
            "NoAuthenticationInformation",
        ]
        .iter()
        .find(|c| text.contains(*c));
        if let Some(code) = denied {
            return Some(format!(
                "azure: {action} {what}: the store refused these credentials ({code}): check that they belong to this account and allow reading and writing the container; {CREDENTIALS}"
            ));
        }
        None
    }

    /// The Blob service's XML error body as its code and the first line of its message.
    fn clean(&self, text: &str) -> String {
        without_xml(text)
    }

    fn missing_container(&self, e: &object_store::Error) -> bool {
        chain_text(e).contains("ContainerNotFound")
    }

    /// A hierarchical namespace shows the prefix, once the probe object stands below it,
    /// as a directory: a blob at the prefix's own key with the metadata `hdi_isfolder`.
    fn check_store(&self, client: &dyn ObjectStore, prefix: &str, shown: &str) -> Result<()> {
        let head = GetOptions {
            head: true,
            ..Default::default()
        };
        let got = crate::backend::s3::block_on(client.get_opts(&Key::from(prefix), head));
        let Ok(got) = got else {
            return Ok(());
        };
        if is_directory(&got.attributes) {
            return Err(Error::Failed(format!(
                "azure: {shown} is in an account with a hierarchical namespace (Data Lake Storage Gen2: the store shows the prefix as a directory); distributor refuses it, since its keys there are paths in a tree, not names. Use a container in an account without a hierarchical namespace"
            )));
        }
        Ok(())
    }

    fn default_store(&self) -> &'static str {
        "Azure Blob Storage"
    }

    fn honouring(&self) -> &'static str {
        "Azure Blob Storage, Azurite"
    }
}

/// The storage account and blob endpoint of an azure destination (`shown`): the account
/// from `azure.account`, else `AZURE_STORAGE_ACCOUNT_NAME`, else the emulator's; the
/// endpoint from `azure.endpoint`, else the emulator's, else none (Azure's own). Refuses
/// plain http unless `azure.allow_http`.
fn account_and_endpoint(shown: &str, location: &S3Location) -> Result<(String, Option<String>)> {
    if location.use_emulator && !location.allow_http {
        return Err(Error::setting(format!(
            "azure destination {shown}: azure.use_emulator requires azure.allow_http: true (the emulator speaks plain http)"
        )));
    }
    let account = (location.account.clone())
        .or_else(|| {
            std::env::var("AZURE_STORAGE_ACCOUNT_NAME")
                .ok()
                .filter(|a| !a.is_empty())
        })
        .or_else(|| location.use_emulator.then(|| EMULATOR_ACCOUNT.to_string()))
        .ok_or_else(|| {
            Error::setting(format!(
                "azure destination {shown}: no storage account named: set azure.account (or AZURE_STORAGE_ACCOUNT_NAME in the environment)"
            ))
        })?;
    let endpoint = (location.endpoint.clone()).or_else(|| {
        location
            .use_emulator
            .then(|| format!("http://127.0.0.1:10000/{account}"))
    });
    if let Some(ep) = &endpoint
        && ep
            .get(..7)
            .is_some_and(|s| s.eq_ignore_ascii_case("http://"))
        && !location.allow_http
    {
        return Err(Error::setting(format!(
            "azure endpoint {ep} is plain http: set azure.allow_http: true to use it (accepted otherwise: an https:// endpoint)"
        )));
    }
    Ok((account, endpoint))
}

/// `Content-MD5` on every PUT that has a body (Put Blob, Put Block, Put Block List), so
/// the store refuses bytes that changed on the way (SPEC §21; object_store sends none).
/// object_store has signed the request by then: a Shared Key signature covers the
/// header, so such a request is signed again with it, with the same key.
#[derive(Debug)]
struct ContentMd5 {
    account: String,
    /// The account key, when requests are signed with one.
    key: Option<AzureCredential>,
}

impl Prepare for ContentMd5 {
    fn wants(&self, req: &HttpRequest) -> bool {
        req.method() == Method::PUT
            && req.body().content_length() > 0
            && !req.headers().contains_key(CONTENT_MD5)
    }

    fn prepare(&self, req: &mut HttpRequest, body: &Bytes) -> std::result::Result<(), HttpError> {
        let shared_key = (req.headers().get(AUTHORIZATION))
            .is_some_and(|v| v.as_bytes().starts_with(b"SharedKey "));
        if shared_key && self.key.is_none() {
            // Cannot happen (a Shared Key signature needs the key): sent as signed.
            return Ok(());
        }
        let md5 = BASE64_STANDARD.encode(Md5::digest(body));
        let value =
            HeaderValue::from_str(&md5).map_err(|e| HttpError::new(HttpErrorKind::Unknown, e))?;
        req.headers_mut().insert(CONTENT_MD5, value);
        if let (true, Some(key)) = (shared_key, &self.key) {
            req.headers_mut().remove(AUTHORIZATION);
            AzureAuthorizer::new(key, &self.account)
                .try_authorize(req)
                .map_err(|e| HttpError::new(HttpErrorKind::Unknown, e))?;
        }
        Ok(())
    }
}

/// `text` with an XML error body (`<?xml …><Error><Code>C</Code><Message>M…</Message>…
/// </Error>`) replaced by `C: M` (the message's first line: the rest is a request id and
/// a time); text without one as it is.
fn without_xml(text: &str) -> String {
    let Some(start) = text.find("<?xml").or_else(|| text.find("<Error>")) else {
        return text.to_string();
    };
    let end = text[start..]
        .find("</Error>")
        .map_or(text.len(), |i| start + i + "</Error>".len());
    let body = &text[start..end];
    let element = |tag: &str| {
        let open = format!("<{tag}>");
        let from = body.find(&open)? + open.len();
        let to = body[from..].find(&format!("</{tag}>"))? + from;
        Some(
            body[from..to]
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
                .to_string(),
        )
    };
    let said = match (element("Code"), element("Message")) {
        (Some(c), Some(m)) => format!("{c}: {m}"),
        (Some(c), None) => c,
        (None, Some(m)) => m,
        (None, None) => "the store's error body could not be read".to_string(),
    };
    format!("{}{said}{}", &text[..start], &text[end..])
}

/// Whether a blob's attributes mark it a directory of a hierarchical namespace.
fn is_directory(a: &object_store::Attributes) -> bool {
    a.iter().any(|(k, v)| {
        matches!(k, Attribute::Metadata(name) if name.eq_ignore_ascii_case("hdi_isfolder"))
            && v.as_ref().eq_ignore_ascii_case("true")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_of_a_hierarchical_namespace_is_recognised() {
        let mut a = object_store::Attributes::new();
        assert!(!is_directory(&a));
        a.insert(Attribute::Metadata("hdi_isfolder".into()), "true".into());
        assert!(is_directory(&a));
    }

    #[test]
    fn an_id_alone_is_not_a_credential() {
        let id = vec![(AzureConfigKey::ClientId, "x".to_string())];
        assert!(!names_a_credential(&id));
        let key = vec![(AzureConfigKey::AccessKey, "k".to_string())];
        assert!(names_a_credential(&key));
        let cli = vec![(AzureConfigKey::UseAzureCli, "false".to_string())];
        assert!(!names_a_credential(&cli));
    }

    #[test]
    fn an_error_body_is_said_by_its_code_and_message() {
        let raw = "400 Bad Request: <?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error>\n  <Code>Md5Mismatch</Code>\n  <Message>The MD5 value specified in the request did not match.\nRequestId:be7e\nTime:2026</Message>\n  <UserSpecifiedMd5>l/f=</UserSpecifiedMd5>\n</Error>";
        assert_eq!(
            without_xml(raw),
            "400 Bad Request: Md5Mismatch: The MD5 value specified in the request did not match."
        );
        assert_eq!(without_xml("no body"), "no body");
    }

    #[test]
    fn a_missing_container_is_said_without_xml() {
        let e = object_store::Error::NotFound {
            path: "p".into(),
            source: Box::new(std::io::Error::other(
                "Client error with status 404: <?xml?><Error><Code>ContainerNotFound</Code></Error>",
            )),
        };
        let m = crate::backend::s3::store_error("read", "az://nope/site/.distributor.json", e)
            .to_string();
        assert!(m.contains("container nope does not exist"), "{m}");
        assert!(!m.contains('<'), "{m}");
    }
}
