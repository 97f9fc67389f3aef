//! The wall clock, as distributor writes it in the journal, logs and records.

/// Current UTC time, RFC 3339 with milliseconds.
pub(crate) fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
