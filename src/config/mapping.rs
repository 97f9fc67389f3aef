//! Path mapping templates (SPEC §2): `{source_id}`, `{pipeline_id}`, `{destination_id}` and
//! `{created:<strftime>}` (UTC). Parsed once at config load so unknown placeholders and bad
//! strftime formats are config errors; rendered per publication.

use crate::paths::check_safe_path;
use chrono::format::{Item, StrftimeItems};
use chrono::{DateTime, FixedOffset, Utc};

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplatePart {
    /// Literal text.
    Literal(String),
    /// `{source_id}`.
    SourceId,
    /// `{pipeline_id}`.
    PipelineId,
    /// `{destination_id}`.
    DestinationId,
    /// `{created:<fmt>}`.
    Created(String),
}

/// A parsed `path_mapping.template`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathTemplate {
    /// The template as written.
    pub text: String,
    /// Its parts in order.
    pub parts: Vec<TemplatePart>,
}

const ACCEPTED: &str =
    "accepted placeholders: {source_id}, {pipeline_id}, {destination_id}, {created:<strftime>}";

impl PathTemplate {
    /// Parses a template; the error says what is accepted.
    pub fn parse(text: &str) -> Result<PathTemplate, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find(['{', '}']) {
            if rest.as_bytes()[open] == b'}' {
                return Err(format!("unmatched '}}' in '{text}'; {ACCEPTED}"));
            }
            if open > 0 {
                parts.push(TemplatePart::Literal(rest[..open].to_string()));
            }
            let close = rest[open..]
                .find('}')
                .ok_or_else(|| format!("unclosed '{{' in '{text}'; {ACCEPTED}"))?
                + open;
            let name = &rest[open + 1..close];
            parts.push(match name {
                "source_id" => TemplatePart::SourceId,
                "pipeline_id" => TemplatePart::PipelineId,
                "destination_id" => TemplatePart::DestinationId,
                _ => match name.strip_prefix("created:") {
                    Some(fmt) if !fmt.is_empty() => {
                        if StrftimeItems::new(fmt).any(|i| matches!(i, Item::Error)) {
                            return Err(format!("invalid strftime format '{fmt}' in '{text}'"));
                        }
                        TemplatePart::Created(fmt.to_string())
                    }
                    _ => {
                        return Err(format!(
                            "unknown placeholder '{{{name}}}' in '{text}'; {ACCEPTED}"
                        ));
                    }
                },
            });
            rest = &rest[close + 1..];
        }
        if !rest.is_empty() {
            parts.push(TemplatePart::Literal(rest.to_string()));
        }
        if parts.is_empty() {
            return Err(format!("template is empty; {ACCEPTED}"));
        }
        Ok(PathTemplate {
            text: text.to_string(),
            parts,
        })
    }

    /// Renders the template; the result must be a safe relative path (SPEC §3.2).
    pub fn render(
        &self,
        source_id: &str,
        created: DateTime<FixedOffset>,
        pipeline_id: &str,
        destination_id: &str,
    ) -> Result<String, String> {
        use std::fmt::Write;
        let utc = created.with_timezone(&Utc);
        let mut out = String::new();
        for p in &self.parts {
            match p {
                TemplatePart::Literal(s) => out.push_str(s),
                TemplatePart::SourceId => out.push_str(source_id),
                TemplatePart::PipelineId => out.push_str(pipeline_id),
                TemplatePart::DestinationId => out.push_str(destination_id),
                TemplatePart::Created(fmt) => write!(out, "{}", utc.format(fmt))
                    .map_err(|_| format!("cannot format created time with '{fmt}'"))?,
            }
        }
        check_safe_path(&out).map_err(|e| {
            format!(
                "template '{}' rendered '{out}', which is not a safe relative path: {e}",
                self.text
            )
        })?;
        Ok(out)
    }
}
