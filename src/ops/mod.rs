//! The operations commands run, one module per command (SPEC §10): each takes a config
//! and its options, and returns a report. The CLI (`cli/`) and the server (`server/`)
//! call them; they reach storage only through `backend/`, and run writing plans through
//! `execute/`.

pub mod adopt;
pub mod common;
pub mod inspect;
pub mod promote;
pub mod prune;
pub mod publish;
pub mod recover;
pub mod release_settings;
pub mod rollback;
