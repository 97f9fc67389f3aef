//! What differs between the object stores distributor publishes to (SPEC §14, §21): how
//! a client is built and finds its credentials, how a copy is made synchronous, whether
//! unfinished uploads must be aborted, how the store's first-contact errors read, and
//! what else the store must be. Everything else (the lease, the decision record, the
//! conditional commit, the staging records, the destination log, recovery) is the same
//! code over `dyn ObjectStore` in this module's parent.
//!
//! A new kind of object store is one [`Dialect`] in its own folder, registered in
//! `backend/mod.rs` (`OBJECT_STORES`).

use super::S3Location;
use super::clock::StoreClock;
use crate::error::Result;
use object_store::ObjectStore;
use object_store::multipart::MultipartStore;
use std::sync::Arc;

/// A store's multipart uploads, part by part (what `Debug` adds: the backend prints).
pub(crate) trait Parts: MultipartStore + std::fmt::Debug {}

impl<T: MultipartStore + std::fmt::Debug> Parts for T {}

/// A store's clients, and its location as they resolved it (an endpoint an environment
/// variable overrides, an account from the environment).
pub(crate) struct Clients {
    /// Every request but a multipart upload's.
    pub client: Arc<dyn ObjectStore>,
    /// The same store's multipart uploads, part by part.
    pub multipart: Arc<dyn Parts>,
    /// Where it is, as recorded in the journal and the staging record.
    pub location: S3Location,
}

/// One kind of object store.
pub(crate) trait Dialect: std::fmt::Debug + Send + Sync {
    /// The backend's name (`s3`, `azure`), which is also its config block's.
    fn name(&self) -> &'static str;

    /// The scheme of its bundle paths (`s3://`, `az://`).
    fn scheme(&self) -> &'static str;

    /// What its destinations can do: an object store's, with this kind's own limits on
    /// keys.
    fn capabilities(&self) -> crate::backend::Capabilities {
        crate::backend::Capabilities::OBJECT_STORE
    }

    /// Builds the clients of `bucket` (a container on azure) at `location`, their HTTP
    /// connector reading the store's clock into `clock`.
    fn connect(&self, bucket: &str, location: S3Location, clock: &StoreClock) -> Result<Clients>;

    /// Whether the store's own copy has finished when its request returns (S3's
    /// CopyObject). Where it may not (Azure's Copy Blob can be pending), moved-aside copies
    /// are downloaded and uploaded again through this host (SPEC §21).
    fn copies_in_store(&self) -> bool;

    /// Whether an object's ETag follows from its bytes, so that a copy of the same bytes
    /// shows the ETag recorded for them (S3: the MD5 of a single PUT or CopyObject). Where
    /// it does not (azure: every write makes a new ETag), a recorded file whose ETag
    /// changed is read and hashed before it is judged changed.
    fn etags_follow_content(&self) -> bool;

    /// Whether an unfinished multipart upload's parts stay stored until it is aborted, so
    /// its id is recorded in staging for `recover` to abort (S3). Azure drops uncommitted
    /// blocks by itself and has nothing to abort.
    fn records_uploads(&self) -> bool;

    /// A first-contact error in words that say what is missing and how to fix it (no
    /// credentials, no bucket or container), for `action` on `what`; `None` for others.
    fn explain(&self, action: &str, what: &str, e: &object_store::Error) -> Option<String>;

    /// A store's raw error text as distributor shows it.
    fn clean(&self, text: &str) -> String {
        text.to_string()
    }

    /// Whether a 404 was the bucket's (container's), not the object's.
    fn missing_container(&self, e: &object_store::Error) -> bool;

    /// What else the store must be, checked once per real run with the conditional-write
    /// probe, while its object stands under `prefix` (shown as `shown`).
    fn check_store(&self, client: &dyn ObjectStore, prefix: &str, shown: &str) -> Result<()> {
        let _ = (client, prefix, shown);
        Ok(())
    }

    /// The store messages name when no endpoint is configured.
    fn default_store(&self) -> &'static str {
        "AWS S3"
    }

    /// Stores known to honour conditional writes, for the refusal of one that does not.
    fn honouring(&self) -> &'static str;
}

/// Every kind of object store distributor speaks to: registered in `backend/mod.rs`.
pub(crate) use crate::backend::OBJECT_STORES as ALL;

/// The dialect a location's `backend` names.
pub(crate) fn named(name: &str) -> Option<&'static dyn Dialect> {
    ALL.iter().copied().find(|d| d.name() == name)
}

/// The dialect of a key as messages show it (`az://…`), s3 for anything else.
pub(crate) fn of_shown(what: &str) -> &'static dyn Dialect {
    ALL.iter()
        .copied()
        .find(|d| what.starts_with(d.scheme()))
        .unwrap_or(&super::Aws)
}
