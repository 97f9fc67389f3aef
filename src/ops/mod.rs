//! The operations commands run, one module per command (SPEC §10): each takes a config
//! and its options, and returns a report. The CLI (`cli/`) and the server (`server/`)
//! call them; they reach storage only through `backend/`, and run writing plans through
//! `execute/`.

pub(crate) mod activation;
pub(crate) mod adopt;
pub(crate) mod blame;
pub(crate) mod common;
pub(crate) mod inspect;
pub(crate) mod inspect_report;
pub(crate) mod promote;
pub(crate) mod prune;
pub(crate) mod publish;
pub mod recover;
pub(crate) mod release_settings;
pub(crate) mod rollback;
