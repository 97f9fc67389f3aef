//! The takeover policy table of SPEC §5.2, in one function.

use crate::model::{Owner, TakeoverMode};

/// May the current owner (`me`, publishing `source_id`) take over content recorded for
/// `other` with `other_source_id`? Applies only to valid state of the configured mode.
pub(crate) fn takeover_permitted(
    mode: TakeoverMode,
    me: &Owner,
    source_id: &str,
    other: &Owner,
    other_source_id: &str,
) -> bool {
    match mode {
        TakeoverMode::SamePipeline => other.pipeline_id == me.pipeline_id,
        TakeoverMode::SameSource => other_source_id == source_id,
        TakeoverMode::AnyManaged => true,
        TakeoverMode::Never => false,
    }
}
