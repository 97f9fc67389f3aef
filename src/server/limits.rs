//! Upload limits: what one request may send and unpack. Every limit is checked while the
//! data streams by, so nothing over a limit is ever held in memory or written whole.

/// Default `--max-upload-bytes`: 1 GiB (SPEC §12).
pub(crate) const DEFAULT_MAX_UPLOAD_BYTES: u64 = 1 << 30;
/// Default `--max-entries`: tar entries in one upload.
pub(crate) const DEFAULT_MAX_ENTRIES: u64 = 100_000;
/// Default `--max-extracted-bytes`: 4 GiB of file content unpacked from one upload (a
/// gzip body can expand far beyond its own size).
pub(crate) const DEFAULT_MAX_EXTRACTED_BYTES: u64 = 4 << 30;
/// Largest GNU long-name or PAX extension record accepted. A safe path is at most 4096
/// bytes (SPEC §3.2); this leaves room for the other PAX keys while keeping a hostile
/// record from being read into memory.
pub(crate) const MAX_EXTENSION_BYTES: u64 = 64 * 1024;

/// Largest `distributor-manifest.json` accepted in an upload. The manifest is parsed in
/// memory, so unlike the other files it gets a bound of its own, far below
/// `--max-extracted-bytes`: 64 MiB holds several hundred thousand outputs.
pub(crate) const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// Default `--upload-idle-timeout`: seconds a request body may stall before the upload is
/// abandoned, and a request head may take before its connection is closed (so a stalled
/// client holds neither spool space, a connection nor a graceful shutdown).
pub(crate) const DEFAULT_UPLOAD_IDLE_TIMEOUT_SECS: u64 = 60;

/// Default `--upload-min-rate`: bytes per second an upload's body must average over each
/// rate window. 1 KiB/s is thousands of times below any link a CI runner uploads over
/// (a congested mobile uplink still moves 100 KiB/s), so a real upload never meets it,
/// while a client trickling a byte every few seconds is cut within one window.
pub(crate) const DEFAULT_UPLOAD_MIN_RATE: u64 = 1024;

/// Default `--upload-rate-window`: seconds over which `--upload-min-rate` is averaged.
/// Long enough to ride out what a healthy transfer goes through (TCP's retransmission
/// backoff doubles from 1 s, so four losses in a row stall a connection for 15 s; a
/// client or proxy pausing to flush), short enough that slots held by slow clients come
/// free within half a minute. The first window is the grace period: nothing is judged
/// before one full window of waiting for the client.
pub(crate) const DEFAULT_UPLOAD_RATE_WINDOW_SECS: u64 = 30;

/// Default `--upload-deadline`: seconds a body may take in all, from the moment its slot
/// is granted. The largest body the defaults accept, 1 GiB, needs 0.57 MiB/s (under
/// 5 Mbit/s) to arrive in 30 minutes; and a client that keeps the minimum rate cannot hold
/// a slot longer than this.
pub(crate) const DEFAULT_UPLOAD_DEADLINE_SECS: u64 = 30 * 60;

/// Default `--max-concurrent-uploads`: uploads received, unpacked and published at once.
/// Each may hold up to `--max-upload-bytes` plus `--max-extracted-bytes` of spool, so this
/// bounds the spool's disk use; further uploads wait for a slot before their body is read.
pub(crate) const DEFAULT_MAX_CONCURRENT_UPLOADS: u64 = 4;

/// The limits of one upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Bytes of request body (compressed, as sent).
    pub max_upload_bytes: u64,
    /// Tar entries, directories and extension headers included.
    pub max_entries: u64,
    /// Bytes of file content after unpacking.
    pub max_extracted_bytes: u64,
    /// Longest wait for the next piece of the request body.
    pub idle_timeout: std::time::Duration,
    /// Bytes per second the body must average over each `rate_window`.
    pub min_rate: u64,
    /// Time spent waiting for the client over which `min_rate` is averaged.
    pub rate_window: std::time::Duration,
    /// Longest the whole body may take, from its first read.
    pub deadline: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_upload_bytes: DEFAULT_MAX_UPLOAD_BYTES,
            max_entries: DEFAULT_MAX_ENTRIES,
            max_extracted_bytes: DEFAULT_MAX_EXTRACTED_BYTES,
            idle_timeout: std::time::Duration::from_secs(DEFAULT_UPLOAD_IDLE_TIMEOUT_SECS),
            min_rate: DEFAULT_UPLOAD_MIN_RATE,
            rate_window: std::time::Duration::from_secs(DEFAULT_UPLOAD_RATE_WINDOW_SECS),
            deadline: std::time::Duration::from_secs(DEFAULT_UPLOAD_DEADLINE_SECS),
        }
    }
}
