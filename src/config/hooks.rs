//! The `hooks:` blocks (SPEC §19), under `pipeline:` (for every destination) and per
//! destination: programs run after a committed publication, promote or rollback
//! (`after_commit`) or after one that failed or was rolled back (`after_failure`).
//! Validated here with key paths; `hooks.rs` runs them.

use serde::Deserialize;

/// `timeout` when a hook does not say.
pub(super) const DEFAULT_TIMEOUT_SECS: u64 = 60;
/// Longest `timeout` a hook may ask for.
pub(super) const MAX_TIMEOUT_SECS: u64 = 3600;

/// Variables that hold distributor's own credentials: never passed to a hook, whatever
/// `pass_env` says (SPEC §19).
pub const CREDENTIAL_VARS: &[&str] = &[
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_CLIENT_SECRET",
    "AZURE_FEDERATED_TOKEN_FILE",
];

/// One hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    /// The program (an absolute path) and its arguments; run without a shell.
    pub run: Vec<String>,
    /// How long it may run before it is stopped (SIGTERM, then SIGKILL 5 s later).
    pub timeout_secs: u64,
    /// Names of variables of distributor's environment the hook also gets.
    pub pass_env: Vec<String>,
    /// Where the config writes it (`pipeline.hooks.after_commit[0]`), for messages.
    pub key: String,
}

/// The hooks of one destination: the pipeline's, then its own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hooks {
    /// Run after a committed publication, promote or rollback.
    pub after_commit: Vec<Hook>,
    /// Run after a publication, promote or rollback that failed or was rolled back.
    pub after_failure: Vec<Hook>,
}

impl Hooks {
    /// `self`'s hooks, then `more`'s.
    pub fn then(&self, more: &Hooks) -> Hooks {
        Hooks {
            after_commit: (self.after_commit.iter())
                .chain(&more.after_commit)
                .cloned()
                .collect(),
            after_failure: (self.after_failure.iter())
                .chain(&more.after_failure)
                .cloned()
                .collect(),
        }
    }

    /// No hook at all.
    pub fn is_empty(&self) -> bool {
        self.after_commit.is_empty() && self.after_failure.is_empty()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with keys after_commit, after_failure"
)]
pub(super) struct RawHooks {
    #[serde(default)]
    after_commit: Vec<RawHook>,
    #[serde(default)]
    after_failure: Vec<RawHook>,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with keys run, timeout, pass_env"
)]
struct RawHook {
    run: Vec<String>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    pass_env: Vec<String>,
}

/// Validates a `hooks:` block at `key` (`pipeline.hooks`, `destinations[0].hooks`).
/// Errors are `(key path, message)`.
pub(super) fn settings(key: &str, raw: RawHooks) -> Result<Hooks, (String, String)> {
    let list = |which: &str, raw: Vec<RawHook>| -> Result<Vec<Hook>, (String, String)> {
        (raw.into_iter().enumerate())
            .map(|(i, h)| hook(&format!("{key}.{which}[{i}]"), h))
            .collect()
    };
    Ok(Hooks {
        after_commit: list("after_commit", raw.after_commit)?,
        after_failure: list("after_failure", raw.after_failure)?,
    })
}

fn hook(key: &str, raw: RawHook) -> Result<Hook, (String, String)> {
    let Some(program) = raw.run.first() else {
        return Err((
            format!("{key}.run"),
            "is empty; accepted: a list, the program's absolute path first, then its arguments"
                .into(),
        ));
    };
    if !program.starts_with('/') {
        return Err((
            format!("{key}.run[0]"),
            format!(
                "'{program}' is not an absolute path; accepted: an absolute path (a hook runs without a shell and with PATH=/usr/bin:/bin, from /)"
            ),
        ));
    }
    if let Some(i) = raw.run.iter().position(|a| a.contains('\0')) {
        return Err((
            format!("{key}.run[{i}]"),
            "holds a NUL byte; accepted: text".into(),
        ));
    }
    let timeout_secs = match &raw.timeout {
        None => DEFAULT_TIMEOUT_SECS,
        Some(t) => match super::parse_age(t) {
            Ok(s) if (1..=MAX_TIMEOUT_SECS).contains(&s) => s,
            Ok(_) => {
                return Err((
                    format!("{key}.timeout"),
                    format!("'{t}' is out of range; accepted: 1s to {MAX_TIMEOUT_SECS}s (1h)"),
                ));
            }
            Err(m) => return Err((format!("{key}.timeout"), m)),
        },
    };
    for (i, name) in raw.pass_env.iter().enumerate() {
        let at = || format!("{key}.pass_env[{i}]");
        let valid = name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid {
            return Err((
                at(),
                format!(
                    "'{name}' is not a variable name; accepted: letters, digits and '_', not starting with a digit"
                ),
            ));
        }
        if CREDENTIAL_VARS.contains(&name.as_str()) {
            return Err((
                at(),
                format!(
                    "'{name}' holds distributor's storage credentials, which a hook never gets; pass the hook a credential of its own under another name"
                ),
            ));
        }
    }
    Ok(Hook {
        run: raw.run,
        timeout_secs,
        pass_env: raw.pass_env,
        key: key.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Hooks, (String, String)> {
        settings("destinations[0].hooks", serde_yaml::from_str(yaml).unwrap())
    }

    #[test]
    fn hooks_with_defaults() {
        let h = parse(
            "after_commit:\n  - run: [/usr/local/bin/purge, --zone, w]\n    timeout: 2m\n    pass_env: [CDN_TOKEN]\nafter_failure:\n  - run: [/bin/true]\n",
        )
        .unwrap();
        assert_eq!(
            h.after_commit[0].run,
            ["/usr/local/bin/purge", "--zone", "w"]
        );
        assert_eq!(h.after_commit[0].timeout_secs, 120);
        assert_eq!(h.after_commit[0].pass_env, ["CDN_TOKEN"]);
        assert_eq!(h.after_failure[0].timeout_secs, DEFAULT_TIMEOUT_SECS);
    }

    #[test]
    fn bad_hooks_name_the_key() {
        for (yaml, key, says) in [
            (
                "after_commit:\n  - run: []\n",
                "after_commit[0].run",
                "is empty",
            ),
            (
                "after_commit:\n  - run: [purge]\n",
                "after_commit[0].run[0]",
                "absolute path",
            ),
            (
                "after_commit:\n  - run: [/x]\n    timeout: 0s\n",
                "after_commit[0].timeout",
                "out of range",
            ),
            (
                "after_commit:\n  - run: [/x]\n    timeout: 2h\n",
                "after_commit[0].timeout",
                "out of range",
            ),
            (
                "after_commit:\n  - run: [/x]\n    timeout: soon\n",
                "after_commit[0].timeout",
                "not an age",
            ),
            (
                "after_failure:\n  - run: [/x]\n    pass_env: [AWS_SECRET_ACCESS_KEY]\n",
                "after_failure[0].pass_env[0]",
                "credentials",
            ),
            (
                "after_failure:\n  - run: [/x]\n    pass_env: [\"A-B\"]\n",
                "after_failure[0].pass_env[0]",
                "not a variable name",
            ),
        ] {
            let (k, m) = parse(yaml).unwrap_err();
            assert_eq!(k, format!("destinations[0].hooks.{key}"), "{yaml}");
            assert!(m.contains(says), "{yaml}: {m}");
        }
    }
}
