//! Storage primitives. The local backend is the only code that creates, renames or
//! removes anything in a destination, and every primitive refuses to act through a
//! symlink or outside the bundle path.

pub mod local;
