//! Who a CLI run is, for the journal (SPEC §16): the one place the CLI reads the OS's
//! account database (`/etc/passwd`, for a uid without `$USER`).

/// The actor the journal records for a CLI run (SPEC §16), `cli:` and the first of:
/// `--actor`, `$DISTRIBUTOR_ACTOR`, the CI's own identity (`github:<GITHUB_ACTOR> run
/// <GITHUB_RUN_ID>`, `gitlab:<GITLAB_USER_LOGIN> job <CI_JOB_ID>`), `<user>@<host>` from
/// the OS (`$USER`, `$LOGNAME`, else the name `/etc/passwd` gives the uid, else `uid
/// <n>`). Never `unknown`. Control characters are escaped: the journal and `history`
/// show it on one line.
pub(crate) fn cli_actor(flag: Option<&str>) -> String {
    actor_from(flag, &|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
}

fn actor_from(flag: Option<&str>, var: &dyn Fn(&str) -> Option<String>) -> String {
    let who = flag
        .filter(|f| !f.is_empty())
        .map(str::to_string)
        .or_else(|| var("DISTRIBUTOR_ACTOR"))
        .or_else(|| {
            var("GITHUB_ACTOR").map(|a| match var("GITHUB_RUN_ID") {
                Some(run) => format!("github:{a} run {run}"),
                None => format!("github:{a}"),
            })
        })
        .or_else(|| {
            var("GITLAB_USER_LOGIN").map(|a| match var("CI_JOB_ID") {
                Some(job) => format!("gitlab:{a} job {job}"),
                None => format!("gitlab:{a}"),
            })
        })
        .unwrap_or_else(|| {
            let user = var("USER")
                .or_else(|| var("LOGNAME"))
                .or_else(passwd_name)
                .unwrap_or_else(|| format!("uid {}", rustix::process::getuid().as_raw()));
            let host = rustix::system::uname()
                .nodename()
                .to_string_lossy()
                .into_owned();
            if host.is_empty() {
                user
            } else {
                format!("{user}@{host}")
            }
        });
    let escaped: String = who
        .chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect();
    format!("cli:{escaped}")
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

#[cfg(test)]
mod tests {
    use super::actor_from;

    #[test]
    fn the_actor_comes_from_the_flag_the_environment_the_ci_or_the_os() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let all: &[(&str, &str)] = &[
            ("DISTRIBUTOR_ACTOR", "deploy-bot"),
            ("GITHUB_ACTOR", "octocat"),
            ("GITHUB_RUN_ID", "42"),
            ("USER", "alice"),
        ];
        assert_eq!(actor_from(Some("ops"), &env(all)), "cli:ops");
        assert_eq!(actor_from(None, &env(all)), "cli:deploy-bot");
        assert_eq!(
            actor_from(None, &env(&all[1..])),
            "cli:github:octocat run 42"
        );
        let gitlab: &[(&str, &str)] = &[("GITLAB_USER_LOGIN", "bob"), ("CI_JOB_ID", "7")];
        assert_eq!(actor_from(None, &env(gitlab)), "cli:gitlab:bob job 7");
        let os = actor_from(None, &env(&[("USER", "alice")]));
        assert!(os.starts_with("cli:alice@"), "{os}");
        // No name anywhere: the passwd entry of the uid, or the uid; never unknown.
        let bare = actor_from(None, &env(&[]));
        assert!(
            bare.starts_with("cli:") && !bare.contains("unknown"),
            "{bare}"
        );
        assert_eq!(actor_from(Some("a\nb"), &env(&[])), "cli:a\\nb");
    }
}
