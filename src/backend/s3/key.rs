//! Where an object-store bundle path is, as a type rather than a `std::path::Path`
//! holding `s3://…`: which kind of store (its [`Dialect`]), the bucket (an azure
//! container) and the key prefix. The one place a bundle path's scheme is recognised;
//! configs, journals and staging records keep spelling it as text, and
//! [`ObjectKey::parse`] reads that text back.

use super::dialect::{self, Dialect};
use std::fmt;
use std::path::Path;

/// An object-store bundle path: `s3://<bucket>/<prefix>`, `az://<container>/<prefix>`.
#[derive(Clone)]
pub struct ObjectKey {
    dialect: &'static dyn Dialect,
    bucket: String,
    prefix: String,
}

impl ObjectKey {
    /// The object-store bundle path `bundle` names, `None` when it names none (a local
    /// path, or a scheme without a bucket or a prefix). A trailing `/` is not part of
    /// the prefix.
    pub fn parse(bundle: &Path) -> Option<ObjectKey> {
        let s = bundle.to_str()?;
        let (dialect, rest) = dialect::ALL
            .iter()
            .find_map(|d| Some((*d, s.strip_prefix(d.scheme())?)))?;
        let (bucket, prefix) = rest.split_once('/')?;
        let prefix = prefix.trim_end_matches('/');
        (!bucket.is_empty() && !prefix.is_empty()).then(|| ObjectKey {
            dialect,
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
        })
    }

    /// Whether `bundle` is spelled as an object-store bundle path (it starts with a
    /// store's scheme), even one [`ObjectKey::parse`] refuses.
    pub fn is_spelled(bundle: &Path) -> bool {
        (bundle.to_str()).is_some_and(|s| dialect::ALL.iter().any(|d| s.starts_with(d.scheme())))
    }

    /// The name of its kind of store (`s3`, `azure`), as a record's `store.backend`
    /// names it.
    pub fn store_kind(&self) -> &'static str {
        self.dialect.name()
    }

    /// The bucket (container).
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The key prefix, without a leading or trailing `/`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}/{}",
            self.dialect.scheme(),
            self.bucket,
            self.prefix
        )
    }
}

impl fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectKey({self})")
    }
}

impl PartialEq for ObjectKey {
    fn eq(&self, other: &ObjectKey) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for ObjectKey {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_path_is_parsed_once_into_its_store_bucket_and_prefix() {
        let k = ObjectKey::parse(Path::new("s3://b/some/prefix/")).unwrap();
        assert_eq!(
            (k.store_kind(), k.bucket(), k.prefix()),
            ("s3", "b", "some/prefix")
        );
        assert_eq!(k.to_string(), "s3://b/some/prefix");
        let k = ObjectKey::parse(Path::new("az://c/p")).unwrap();
        assert_eq!(
            (k.store_kind(), k.bucket(), k.prefix()),
            ("azure", "c", "p")
        );
        for not in [
            "/srv/www",
            "s3://bucket-only",
            "s3:///prefix",
            "s3://b/",
            "S3://b/p",
        ] {
            assert!(ObjectKey::parse(Path::new(not)).is_none(), "{not}");
        }
        assert!(ObjectKey::is_spelled(Path::new("s3://bucket-only")));
        assert!(!ObjectKey::is_spelled(Path::new("/srv/s3://x")));
    }
}
