//! What the test harness's [`super::s3::S3Server`] does differently when it is Azurite,
//! the Azure Storage emulator (npm `azurite`, its blob service `azurite-blob`): requests
//! signed with the emulator account's Shared Key (Azurite checks signatures), and the
//! Blob service's spelling of the same operations (create a container, list blobs, put a
//! block blob). Everything else about starting, waiting for and stopping the server is
//! the harness's.
//!
//! Found through `$DISTRIBUTOR_AZURITE`, else `target/azurite/node_modules/.bin/azurite-blob`
//! (where `.ci/run` installs it with npm), else `azurite-blob` on `PATH`.

use sha2::{Digest, Sha256};

/// The emulator's account.
pub const ACCOUNT: &str = "devstoreaccount1";
/// The emulator's well-known key (Azurite's documented default, not a secret).
pub const KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
/// The Blob service version the harness speaks (Azurite runs with `--skipApiVersionCheck`).
const VERSION: &str = "2021-08-06";

/// The arguments of `azurite-blob` on `port`: loopback only, in memory, any API version,
/// unsupported headers ignored, no telemetry.
pub fn args(port: u16) -> Vec<String> {
    [
        "--blobHost",
        "127.0.0.1",
        "--blobPort",
        &port.to_string(),
        "--skipApiVersionCheck",
        "--loose",
        "--inMemoryPersistence",
        "--extentMemoryLimit",
        "2048",
        "--disableTelemetry",
    ]
    .map(String::from)
    .to_vec()
}

/// The headers a request needs besides its own (`x-ms-date`, `x-ms-version`, and the
/// Shared Key `Authorization` over all of them), for `method` on `url`
/// (`http://host:port/devstoreaccount1/...`), given its headers (names any case).
pub fn sign(
    method: &str,
    url: &str,
    headers: &[(String, String)],
    body_len: usize,
) -> Vec<(String, String)> {
    let date = chrono::Utc::now()
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    let mut all: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
        .collect();
    all.push(("x-ms-date".into(), date.clone()));
    all.push(("x-ms-version".into(), VERSION.into()));
    let get = |name: &str| {
        all.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    };
    let length = if body_len == 0 {
        String::new()
    } else {
        body_len.to_string()
    };
    let mut to_sign = format!(
        "{method}\n{}\n{}\n{length}\n{}\n{}\n\n{}\n{}\n{}\n{}\n{}\n",
        get("content-encoding"),
        get("content-language"),
        get("content-md5"),
        get("content-type"),
        get("if-modified-since"),
        get("if-match"),
        get("if-none-match"),
        get("if-unmodified-since"),
        get("range"),
    );
    let mut ms: Vec<&(String, String)> =
        all.iter().filter(|(k, _)| k.starts_with("x-ms-")).collect();
    ms.sort();
    for (k, v) in ms {
        to_sign.push_str(&format!("{k}:{}\n", v.trim()));
    }
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let path_and_query = rest.find('/').map_or("/", |i| &rest[i..]);
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    to_sign.push_str(&format!("/{ACCOUNT}{path}"));
    let mut params: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.to_ascii_lowercase(), percent_decode(v))
        })
        .collect();
    params.sort();
    for (k, v) in params {
        to_sign.push_str(&format!("\n{k}:{v}"));
    }
    let key = base64_decode(KEY);
    let signature = base64_encode(&hmac_sha256(&key, to_sign.as_bytes()));
    vec![
        ("x-ms-date".into(), date),
        ("x-ms-version".into(), VERSION.into()),
        (
            "Authorization".into(),
            format!("SharedKey {ACCOUNT}:{signature}"),
        ),
    ]
}

fn hmac_sha256(key: &[u8], msg: &[u8]) -> Vec<u8> {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(msg);
    let inner = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner);
    outer.finalize().to_vec()
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (*b as u32) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn base64_decode(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes().filter(|c| *c != b'=') {
        let v = B64.iter().position(|b| *b == c).expect("base64") as u32;
        acc = acc << 6 | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits & 0xff) as u8);
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An ETag as headers send it, quotes included (listings send it bare).
pub fn quoted(etag: &str) -> String {
    if etag.starts_with('"') {
        etag.to_string()
    } else {
        format!("\"{etag}\"")
    }
}
