//! Bearer-token authentication (SPEC §12). The configured value is the sha256 of the
//! token; a request's token is hashed and compared with every configured hash in constant
//! time, so neither the comparison nor the position of a match leaks through timing. Only
//! token *names* leave this module; the secret is dropped as soon as it is hashed.

use super::error::ApiError;
use axum::http::{HeaderMap, StatusCode, header};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// One configured token.
#[derive(Debug, Clone)]
struct TokenEntry {
    pipeline_id: String,
    name: String,
    sha256: [u8; 32],
}

/// Every token of every served pipeline.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tokens {
    entries: Vec<TokenEntry>,
}

/// Who a request is, once authorized for a pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Caller {
    /// Token name, or None for an unauthenticated server.
    pub token_name: Option<String>,
}

impl Caller {
    /// The actor the journal records: `token:<name>`, or `unauthenticated`.
    pub(crate) fn actor(&self) -> String {
        match &self.token_name {
            Some(n) => format!("token:{n}"),
            None => "unauthenticated".to_string(),
        }
    }
}

/// A (pipeline, token name) pair a bearer token matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Match {
    /// Pipeline the token is configured for.
    pub pipeline_id: String,
    /// The token's name.
    pub name: String,
}

impl Tokens {
    /// Adds a pipeline's tokens; `sha256` was validated as 64 lowercase hex by the config.
    pub(crate) fn add(
        &mut self,
        pipeline_id: &str,
        name: &str,
        sha256_hex: &str,
    ) -> Result<(), String> {
        let sha256 = decode_hex32(sha256_hex)
            .ok_or_else(|| format!("token '{name}': sha256 is not 64 hex characters"))?;
        self.entries.push(TokenEntry {
            pipeline_id: pipeline_id.to_string(),
            name: name.to_string(),
            sha256,
        });
        Ok(())
    }

    /// True when no token is configured at all.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every configured token the bearer secret matches. All entries are compared, match
    /// or not, each in constant time.
    pub(crate) fn matches(&self, secret: &str) -> Vec<Match> {
        let hash: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        let mut out = Vec::new();
        for e in &self.entries {
            if bool::from(e.sha256.ct_eq(&hash)) {
                out.push(Match {
                    pipeline_id: e.pipeline_id.clone(),
                    name: e.name.clone(),
                });
            }
        }
        out
    }
}

fn decode_hex32(s: &str) -> Option<[u8; 32]> {
    let bytes = s.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in bytes.chunks(2).enumerate() {
        let hi = (pair[0] as char).to_digit(16)?;
        let lo = (pair[1] as char).to_digit(16)?;
        out[i] = (hi * 16 + lo) as u8;
    }
    Some(out)
}

/// The bearer secret of a request: None without an Authorization header, an error for a
/// header that is not `Bearer <token>`.
pub(crate) fn bearer(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let malformed = || {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the Authorization header must be 'Bearer <token>'",
        )
    };
    let text = value.to_str().map_err(|_| malformed())?;
    let (scheme, token) = text.split_once(' ').ok_or_else(malformed)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(malformed());
    }
    Ok(Some(token.to_string()))
}

/// The outcome of authenticating a request before its pipeline is looked at.
#[derive(Debug, Clone)]
pub(crate) struct Credentials {
    /// Whether the request carried a bearer token.
    pub presented: bool,
    /// What the token matched (empty: no token, or a wrong one).
    pub matches: Vec<Match>,
}

impl Credentials {
    /// Reads and checks the Authorization header against every configured token.
    pub(crate) fn from_headers(
        headers: &HeaderMap,
        tokens: &Tokens,
    ) -> Result<Credentials, ApiError> {
        Ok(match bearer(headers)? {
            None => Credentials {
                presented: false,
                matches: vec![],
            },
            Some(secret) => Credentials {
                presented: true,
                matches: tokens.matches(&secret),
            },
        })
    }

    /// Whether the token is valid for some pipeline served here.
    pub(crate) fn authenticated(&self) -> bool {
        !self.matches.is_empty()
    }

    /// Authorizes the request for `pipeline_id`: 401 without a valid token, 403 for a token
    /// of another pipeline. `open` is true for a pipeline without tokens on a server
    /// started with `--allow-unauthenticated`.
    pub(crate) fn authorize(&self, pipeline_id: &str, open: bool) -> Result<Caller, ApiError> {
        if let Some(m) = self.matches.iter().find(|m| m.pipeline_id == pipeline_id) {
            return Ok(Caller {
                token_name: Some(m.name.clone()),
            });
        }
        if self.presented && self.matches.is_empty() {
            return Err(unauthorized("the bearer token is not valid"));
        }
        if !self.matches.is_empty() {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!(
                    "token '{}' is not valid for pipeline '{pipeline_id}'",
                    self.matches[0].name
                ),
            ));
        }
        if open {
            return Ok(Caller { token_name: None });
        }
        Err(unauthorized(
            "this pipeline requires 'Authorization: Bearer <token>'",
        ))
    }

    /// Names of the matched tokens, for the log (never the secret).
    pub(crate) fn token_names(&self) -> Option<String> {
        let names: Vec<&str> = self.matches.iter().map(|m| m.name.as_str()).collect();
        (!names.is_empty()).then(|| names.join(","))
    }
}

/// A 401 reply.
pub(crate) fn unauthorized(message: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> Tokens {
        let mut t = Tokens::default();
        let h = |s: &str| crate::hash::sha256_hex(s.as_bytes());
        t.add("weather", "forecast-job", &h("s3cret")).unwrap();
        t.add("traffic", "traffic-job", &h("other")).unwrap();
        t
    }

    fn creds(secret: Option<&str>) -> Credentials {
        let mut h = HeaderMap::new();
        if let Some(s) = secret {
            h.insert(
                header::AUTHORIZATION,
                format!("Bearer {s}").parse().unwrap(),
            );
        }
        Credentials::from_headers(&h, &tokens()).unwrap()
    }

    #[test]
    fn token_of_the_pipeline_is_authorized_by_name() {
        let c = creds(Some("s3cret")).authorize("weather", false).unwrap();
        assert_eq!(c.actor(), "token:forecast-job");
    }

    #[test]
    fn token_of_another_pipeline_is_forbidden() {
        let e = creds(Some("other"))
            .authorize("weather", false)
            .unwrap_err();
        assert_eq!(e.status, StatusCode::FORBIDDEN);
        assert!(e.message.contains("traffic-job"), "{}", e.message);
        assert!(!e.message.contains("other"), "no secret in {}", e.message);
    }

    #[test]
    fn missing_or_wrong_token_is_unauthorized_even_when_open() {
        for (secret, open) in [(None, false), (Some("nope"), false), (Some("nope"), true)] {
            let e = creds(secret).authorize("weather", open).unwrap_err();
            assert_eq!(e.status, StatusCode::UNAUTHORIZED);
        }
        assert!(creds(None).authorize("weather", true).is_ok());
    }

    #[test]
    fn malformed_header_is_unauthorized() {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        let e = Credentials::from_headers(&h, &tokens()).unwrap_err();
        assert_eq!(e.status, StatusCode::UNAUTHORIZED);
    }

    #[test]
    fn hex_decoding_rejects_bad_input() {
        assert!(decode_hex32(&"ab".repeat(32)).is_some());
        assert!(decode_hex32(&"zz".repeat(32)).is_none());
        assert!(decode_hex32("ab").is_none());
    }
}
