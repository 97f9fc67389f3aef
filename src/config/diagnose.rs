//! What a config error says beyond serde's words (SPEC §2: the key path, the line and
//! column, what is accepted), in one place for every map and list of the config.
//!
//! serde and serde_yaml know the key path, the location and, for an unknown key or enum
//! value, the accepted names; they do not know what an operator most likely meant, what a
//! list looks like at that place, or where a key is when the mistake is found only after
//! deserialization (a duplicate id). [`explain`] adds the first two to any deserialization
//! message; [`locate`] finds the line and column of any key path in the config text.
//! Nothing here reads a file: it works on the text the loader already holds.

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// The message serde_yaml gave for `key` (its key path, `destinations[1].takeover.mode`)
/// with what it lacks: its own path prefix dropped, a suggestion for a misspelt key or
/// value, an example of a list where one was expected, the accepted booleans, and hints
/// for tabs and a quoted `version`.
pub(super) fn explain(key: &str, msg: String, text: &str) -> String {
    let msg = strip_yaml_path(key, msg);
    let msg = hint(key, msg, text);
    if let Some(s) = suggestion(&msg) {
        return format!("{msg}; did you mean `{s}`?");
    }
    if msg.contains("expected a sequence") {
        return format!("{msg}; {}", list_example(key));
    }
    if msg.contains("expected a boolean") {
        return format!("{msg}; accepted: true or false");
    }
    msg
}

/// For serde's `unknown field `x`, expected one of `a`, `b`` (every map of the config
/// refuses unknown keys through it) and `unknown variant ...` (every enum value): the
/// accepted name closest to the one written, when it is close enough to be a typo.
fn suggestion(msg: &str) -> Option<&str> {
    if !(msg.starts_with("unknown field `") || msg.starts_with("unknown variant `")) {
        return None;
    }
    // Backtick-quoted words: the one written, then the accepted ones.
    let mut quoted = msg.split('`').skip(1).step_by(2);
    let written = quoted.next()?;
    closest(written, quoted)
}

/// The candidate within a typo's reach of `written` (case aside; a swap of two letters is
/// one edit), the nearest when several are.
pub(super) fn closest<'a>(
    written: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let w = written.to_lowercase();
    let reach = match w.chars().count() {
        0..=2 => 0,
        3..=4 => 1,
        5..=8 => 2,
        _ => 3,
    };
    candidates
        .into_iter()
        .map(|c| (strsim::damerau_levenshtein(&w, &c.to_lowercase()), c))
        .filter(|(d, _)| *d <= reach)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// What a list looks like at `key`, for a value that is not one (a map, a string).
fn list_example(key: &str) -> String {
    let name = key
        .rsplit('.')
        .next()
        .unwrap_or(key)
        .split('[')
        .next()
        .unwrap_or_default();
    let example = match name {
        "destinations" => {
            "a list with one item per destination, each starting with `- `: destinations: [{id: latest, path: /srv/latest}], or on the lines below `destinations:`, `  - id: latest` then `    path: /srv/latest`"
        }
        "upload_tokens" => {
            "a list with one item per token: upload_tokens: [{name: forecast-job, sha256: \"<64 hex>\"}], or `- name: forecast-job` on its own line below it"
        }
        "ignore" => "a list of globs: ignore: [\"robots.txt\", \"*.tmp\"]",
        "after_commit" | "after_failure" => {
            "a list with one item per hook: after_commit: [{run: [/usr/local/bin/notify, --ok]}], or `- run: [/usr/local/bin/notify]` on its own line below it"
        }
        "run" => "a list, the program's absolute path first: run: [/usr/local/bin/notify, --ok]",
        "pass_env" => "a list of variable names: pass_env: [LANG, TZ]",
        "cache_control" => {
            "a list of rules: cache_control: [{glob: \"*.html\", value: \"max-age=60\"}]"
        }
        _ => "a list: [a, b], or one `- item` per line below the key",
    };
    format!("accepted at {key}: {example}")
}

/// A hint for the YAML mistakes operators make most: a tab used for indentation (YAML
/// allows spaces only) and a quoted version (`version: "1"` is a string).
fn hint(key: &str, msg: String, text: &str) -> String {
    if msg.contains("tab") || (text.contains('\t') && msg.contains("found character")) {
        let line = text
            .lines()
            .position(|l| l.trim_start_matches(' ').starts_with('\t'))
            .map(|n| format!(" (line {})", n + 1))
            .unwrap_or_default();
        return format!(
            "{msg}; tabs are not allowed for indentation in YAML{line}: indent with spaces"
        );
    }
    if key == "version" && msg.contains("expected u32") {
        return format!("{msg}; expected the number 1 (write `version: 1`, without quotes)");
    }
    msg
}

/// serde_yaml prefixes its messages with its own idea of the path (`destinations[0]:`),
/// which is at best a repetition of `key` and at worst a shorter, misleading one (`pipeline:`
/// for an error in `pipeline.id`): drop it so the message names the key path once.
pub(super) fn strip_yaml_path(key: &str, msg: String) -> String {
    if let Some((prefix, rest)) = msg.split_once(": ") {
        let within = key == prefix
            || key
                .strip_prefix(prefix)
                .is_some_and(|r| r.starts_with('.') || r.starts_with('['));
        if within && !prefix.contains(' ') {
            return rest.to_string();
        }
    }
    msg
}

/// The line and column (from 1) of the value at `key` (`destinations[2].id`) in the YAML
/// `text`, as serde_yaml counts them; `None` when the key is not in the text (a missing
/// key, or a default). Found by reading the text again and failing on purpose at that
/// value, so that serde_yaml marks it, since the parsed config keeps no positions.
pub(super) fn locate(text: &str, key: &str) -> Option<(usize, usize)> {
    let path = segments(key)?;
    let de = serde_yaml::Deserializer::from_str(text);
    let e = Walk(&path).deserialize(de).err()?;
    if !e.to_string().contains(HERE) {
        return None;
    }
    let at = e.location()?;
    Some((at.line(), at.column()))
}

/// One step of a key path.
#[derive(Debug, PartialEq)]
enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

/// `destinations[2].hooks.after_commit[0].run` as its steps; `None` when it is not a key
/// path (`(top level)`).
fn segments(key: &str) -> Option<Vec<Seg<'_>>> {
    let mut out = Vec::new();
    for part in key.split('.') {
        let (name, mut rest) = part.split_at(part.find('[').unwrap_or(part.len()));
        if name.is_empty() || name.contains(['(', ' ']) {
            return None;
        }
        out.push(Seg::Key(name));
        while let Some(r) = rest.strip_prefix('[') {
            let (n, after) = r.split_once(']')?;
            out.push(Seg::Index(n.parse().ok()?));
            rest = after;
        }
        if !rest.is_empty() {
            return None;
        }
    }
    Some(out)
}

/// What the deliberate failure at the located value expects: a marker no real message has.
const HERE: &str = "the located key (distributor)";

/// Reads the document down the key path and fails at its end.
struct Walk<'a, 'p>(&'p [Seg<'a>]);

impl<'de> DeserializeSeed<'de> for Walk<'_, '_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        match self.0 {
            [] => d.deserialize_any(Here),
            _ => d.deserialize_any(self),
        }
    }
}

impl<'de> Visitor<'de> for Walk<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let (first, rest) = self.0.split_first().expect("a non-empty path");
        while let Some(k) = map.next_key::<serde_yaml::Value>()? {
            match first {
                Seg::Key(name) if k.as_str() == Some(name) => map.next_value_seed(Walk(rest))?,
                _ => map.next_value::<IgnoredAny>().map(|_| ())?,
            }
        }
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let (first, rest) = self.0.split_first().expect("a non-empty path");
        let mut i = 0;
        loop {
            let more = match first {
                Seg::Index(n) if *n == i => seq.next_element_seed(Walk(rest))?,
                _ => seq.next_element::<IgnoredAny>()?.map(|_| ()),
            };
            if more.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }
    // A scalar where the path goes on: the key is not there.
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
}

/// Refuses whatever it is given, so that serde_yaml marks the value's line and column.
struct Here;

impl Visitor<'_> for Here {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(HERE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "version: 1\npipeline:\n  id: weather\ndestinations:\n  - id: a\n    path: /srv/a\n  - {id: b, path: /srv/b}\n  - id: a\n    path: /srv/c\n    hooks:\n      after_commit:\n        - run: [/bin/true]\n";

    #[test]
    fn locate_finds_any_key_path() {
        assert_eq!(locate(TEXT, "version"), Some((1, 10)));
        assert_eq!(locate(TEXT, "pipeline.id"), Some((3, 7)));
        assert_eq!(locate(TEXT, "destinations[0].id"), Some((5, 9)));
        assert_eq!(locate(TEXT, "destinations[1].path"), Some((7, 19)));
        assert_eq!(locate(TEXT, "destinations[2].id"), Some((8, 9)));
        assert_eq!(
            locate(TEXT, "destinations[2].hooks.after_commit[0].run[0]"),
            Some((12, 17))
        );
        for absent in [
            "source.path",
            "destinations[3].id",
            "destinations[0].id.x",
            "(top level)",
            "",
            "destinations[x]",
        ] {
            assert_eq!(locate(TEXT, absent), None, "{absent}");
        }
        assert_eq!(
            locate("a: [1\nb: 2\n", "b"),
            None,
            "a YAML error is not a location"
        );
    }

    #[test]
    fn closest_reaches_typos_only() {
        let keys = ["version", "pipeline", "source", "journal", "destinations"];
        assert_eq!(closest("pipline", keys), Some("pipeline"));
        assert_eq!(closest("Pipeline", keys), Some("pipeline"));
        assert_eq!(closest("destination", keys), Some("destinations"));
        assert_eq!(closest("verison", keys), Some("version"));
        assert_eq!(closest("owner", keys), None);
        assert_eq!(closest("mdoe", ["mode"]), Some("mode"));
        assert_eq!(closest("id", ["ip"]), None);
        assert_eq!(closest("ID", ["id"]), Some("id"));
    }

    #[test]
    fn explain_suggests_and_shows_lists() {
        let m = explain(
            "pipline",
            "unknown field `pipline`, expected one of `version`, `pipeline` at line 2 column 1"
                .into(),
            "",
        );
        assert!(
            m.ends_with("at line 2 column 1; did you mean `pipeline`?"),
            "{m}"
        );
        let m = explain(
            "destinations[0].takeover.mode",
            "destinations[0].takeover.mode: unknown variant `same_pipline`, expected one of `same_pipeline`, `never`".into(),
            "",
        );
        assert!(
            m.starts_with("unknown variant") && m.ends_with("did you mean `same_pipeline`?"),
            "{m}"
        );
        let m = explain(
            "destinations[0].verify.ignore",
            "invalid type: map, expected a sequence at line 8 column 15".into(),
            "",
        );
        assert!(
            m.contains("accepted at destinations[0].verify.ignore: a list of globs"),
            "{m}"
        );
    }
}
