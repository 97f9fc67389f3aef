//! Who a CLI run is, for the journal (SPEC §16): the one place the CLI reads the OS's
//! account database (`/etc/passwd`, for a uid without `$USER`).

use crate::error::InputError;
use crate::input::bounded_text;

/// The actor the journal records for a CLI run (SPEC §16), `cli:` and the first of:
/// `--actor`, `$DISTRIBUTOR_ACTOR`, the CI's own identity (`github:<GITHUB_ACTOR> run
/// <GITHUB_RUN_ID>`, `gitlab:<GITLAB_USER_LOGIN> job <CI_JOB_ID>`), `<user>@<host>` from
/// the OS (`$USER`, `$LOGNAME`, else the name `/etc/passwd` gives the uid, else `uid
/// <n>`). Never `unknown`. Whatever it comes from, it is bounded before anything is
/// locked or written ([`crate::input::bounded_text`]: at most 1 KiB, no control
/// characters; docs/troubleshooting.md, "The actor is refused"): else the usage error
/// naming the flag or the variables it came from.
pub(crate) fn cli_actor(flag: Option<&str>) -> Result<String, InputError> {
    actor_from(flag, &crate::input::env_text)
}

type Var<'a> = &'a dyn Fn(&str) -> Result<Option<String>, InputError>;

fn actor_from(flag: Option<&str>, var: Var<'_>) -> Result<String, InputError> {
    let who = match flag.filter(|f| !f.is_empty()) {
        Some(f) => bounded_text("--actor", f)?.to_string(),
        None => match var("DISTRIBUTOR_ACTOR")? {
            Some(v) => bounded_text("DISTRIBUTOR_ACTOR", &v)?.to_string(),
            None => match ci_identity(var)? {
                Some(ci) => ci,
                None => os_identity(var)?,
            },
        },
    };
    Ok(format!("cli:{who}"))
}

/// `github:<GITHUB_ACTOR> run <GITHUB_RUN_ID>` or `gitlab:<GITLAB_USER_LOGIN> job
/// <CI_JOB_ID>` (without the run or job when it is not set), each variable and the whole
/// bounded.
fn ci_identity(var: Var<'_>) -> Result<Option<String>, InputError> {
    for (site, who, what, run) in [
        ("github", "GITHUB_ACTOR", "run", "GITHUB_RUN_ID"),
        ("gitlab", "GITLAB_USER_LOGIN", "job", "CI_JOB_ID"),
    ] {
        let Some(name) = var(who)? else { continue };
        bounded_text(who, &name)?;
        let actor = match var(run)? {
            Some(id) => {
                bounded_text(run, &id)?;
                let actor = format!("{site}:{name} {what} {id}");
                bounded_text(
                    &format!("{who} and {run} (the actor {site}:<{who}> {what} <{run}>)"),
                    &actor,
                )?;
                actor
            }
            None => format!("{site}:{name}"),
        };
        return Ok(Some(actor));
    }
    Ok(None)
}

/// `<user>@<host>`: the user from `$USER`, `$LOGNAME`, the passwd entry of the uid, else
/// `uid <n>`; the host from `uname`.
fn os_identity(var: Var<'_>) -> Result<String, InputError> {
    let uid = rustix::process::getuid().as_raw();
    let (what, user) = match var("USER")? {
        Some(u) => ("USER".to_string(), u),
        None => match var("LOGNAME")? {
            Some(u) => ("LOGNAME".to_string(), u),
            None => match passwd_name() {
                Some(u) => (format!("the name /etc/passwd gives uid {uid}"), u),
                None => ("the uid".to_string(), format!("uid {uid}")),
            },
        },
    };
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    let actor = if host.is_empty() {
        user
    } else {
        format!("{user}@{host}")
    };
    bounded_text(
        &format!("{what} and the host name (the actor <user>@<host>)"),
        &actor,
    )?;
    Ok(actor)
}

/// The name `/etc/passwd` gives this process's uid, if any.
fn passwd_name() -> Option<String> {
    let uid = rustix::process::getuid().as_raw().to_string();
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        let _ = f.next();
        (f.next()? == uid && !name.is_empty()).then(|| name.to_string())
    })
}

/// Why a CLI run changes a destination (docs/audit.md): `--reason`, else
/// `$DISTRIBUTOR_REASON`; `None` when neither is given. Bounded as the actor is
/// ([`crate::input::bounded_text`]), before anything is locked or written.
pub(crate) fn cli_reason(flag: Option<&str>) -> Result<Option<String>, InputError> {
    match flag.filter(|f| !f.is_empty()) {
        Some(f) => Ok(Some(bounded_text("--reason", f)?.to_string())),
        None => match crate::input::env_text("DISTRIBUTOR_REASON")? {
            Some(v) => Ok(Some(bounded_text("DISTRIBUTOR_REASON", &v)?.to_string())),
            None => Ok(None),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::actor_from;
    use crate::error::InputError;

    type Env = Box<dyn Fn(&str) -> Result<Option<String>, InputError>>;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> Env {
        Box::new(move |k: &str| {
            Ok(pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string()))
        })
    }

    #[test]
    fn the_actor_comes_from_the_flag_the_environment_the_ci_or_the_os() {
        let all: &[(&str, &str)] = &[
            ("DISTRIBUTOR_ACTOR", "deploy-bot"),
            ("GITHUB_ACTOR", "octocat"),
            ("GITHUB_RUN_ID", "42"),
            ("USER", "alice"),
        ];
        let ok = |flag, e: Env| actor_from(flag, &*e).unwrap();
        assert_eq!(ok(Some("ops"), env(all)), "cli:ops");
        assert_eq!(ok(None, env(all)), "cli:deploy-bot");
        assert_eq!(ok(None, env(&all[1..])), "cli:github:octocat run 42");
        let gitlab: &[(&str, &str)] = &[("GITLAB_USER_LOGIN", "bob"), ("CI_JOB_ID", "7")];
        assert_eq!(ok(None, env(gitlab)), "cli:gitlab:bob job 7");
        let os = ok(None, env(&[("USER", "alice")]));
        assert!(os.starts_with("cli:alice@"), "{os}");
        // No name anywhere: the passwd entry of the uid, or the uid; never unknown.
        let bare = ok(None, env(&[]));
        assert!(
            bare.starts_with("cli:") && !bare.contains("unknown"),
            "{bare}"
        );
    }

    #[test]
    fn an_actor_over_1_kib_or_with_a_control_character_names_where_it_came_from() {
        let err = |flag, e: Env| actor_from(flag, &*e).unwrap_err().to_string();
        let e = err(Some("a\nb"), env(&[]));
        assert!(
            e.starts_with("--actor: holds the control character U+000A at byte 1"),
            "{e}"
        );
        let long: &'static str = Box::leak("x".repeat(1025).into_boxed_str());
        let e = err(Some(long), env(&[]));
        assert!(e.starts_with("--actor: is 1025 bytes long"), "{e}");
        let e = err(
            None,
            env(Box::leak(Box::new([("DISTRIBUTOR_ACTOR", long)]))),
        );
        assert!(
            e.starts_with("DISTRIBUTOR_ACTOR: is 1025 bytes long"),
            "{e}"
        );
        let e = err(
            None,
            env(&[("GITHUB_ACTOR", "octo\rcat"), ("GITHUB_RUN_ID", "1")]),
        );
        assert!(
            e.starts_with("GITHUB_ACTOR: holds the control character U+000D"),
            "{e}"
        );
        let e = err(
            None,
            env(&[("GITLAB_USER_LOGIN", "bob"), ("CI_JOB_ID", "7\u{1b}")]),
        );
        assert!(
            e.starts_with("CI_JOB_ID: holds the control character U+001B"),
            "{e}"
        );
        // Each within 1 KiB, together over it: both variables are named.
        let half: &'static str = Box::leak("y".repeat(600).into_boxed_str());
        let e = err(
            None,
            env(Box::leak(Box::new([
                ("GITHUB_ACTOR", half),
                ("GITHUB_RUN_ID", half),
            ]))),
        );
        assert!(e.starts_with("GITHUB_ACTOR and GITHUB_RUN_ID (the actor github:<GITHUB_ACTOR> run <GITHUB_RUN_ID>): is 1212 bytes long"), "{e}");
        let e = err(None, env(&[("USER", "al\u{7f}ice")]));
        assert!(e.starts_with("USER and the host name"), "{e}");
        // The flag comes first: a bad variable behind it is never read.
        assert_eq!(
            actor_from(Some("ops"), &*env(&[("DISTRIBUTOR_ACTOR", "a\nb")])).unwrap(),
            "cli:ops"
        );
    }
}
