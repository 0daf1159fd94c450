//! From an exec request to what to run: validation, identity, environment and directory.
//!
//! Everything a client can get wrong is found here, before a change exists, and answered
//! with Pebble's words: the program must be on the daemon's `PATH`, the service context must
//! exist, the user and group must resolve, the working directory must be there. The
//! environment is built in Pebble's order: the daemon's own (without `HOME` and `USER` when
//! the command runs as another user), then the service context's and the request's, then
//! `PATH` and `LANG` defaults, then `HOME` and `USER` of the user it runs as where still
//! empty. The working directory is the requested one, or that `HOME` (which must exist), or
//! `/`.
//!
//! [`prepare`] blocks (it reads the user database and stats paths): run it on the blocking
//! pool. [`Host`] stands for the daemon's process so tests can give it any environment and
//! user database.

use std::collections::BTreeMap;
use std::time::Duration;

use cobble_client::types::ExecRequest;
use cobble_plan::{ContextOptions, Plan, go_quote, parse_duration};
use cobble_sys::pty::WindowSize;
use cobble_sys::user::UserDb;

use crate::process::launch::is_executable_program;

/// `PATH` when the environment has none, as Pebble sets it.
pub(crate) const DEFAULT_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// `LANG` when the environment has none.
pub(crate) const DEFAULT_LANG: &str = "C.UTF-8";
/// The longest string `execve` takes (the kernel's `MAX_ARG_STRLEN`, 32 pages), counting
/// the terminating NUL.
pub(crate) const MAX_STRING: usize = 32 * 4096;
/// The most bytes of arguments and environment (strings with their NULs, plus a pointer
/// each) accepted: what `execve` allows with the usual 8 MiB stack limit.
pub(crate) const MAX_ARGUMENTS: usize = 2 * 1024 * 1024;

/// Why a request cannot run, as the API answers it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SetupError {
    /// Answered with 400.
    #[error("{0}")]
    BadRequest(String),
    /// Answered with 500, as Pebble answers a failure of its `cmdstate.Exec`.
    #[error("cannot call exec: {0}")]
    CannotCall(String),
    /// The change could not be written to the state file; the command was not run.
    /// Answered with 500.
    #[error("cannot record change: {0}")]
    NotRecorded(crate::state::NotRecorded),
}

/// The daemon process, as far as building a command's environment goes.
#[derive(Debug, Clone)]
pub(crate) struct Host {
    /// The daemon's environment.
    pub environment: BTreeMap<String, String>,
    /// The daemon's uid.
    pub uid: u32,
    /// Where users and groups are looked up.
    pub users: UserDb,
}

impl Host {
    /// The running daemon: its environment now, its uid, the system's user database.
    pub(crate) fn current() -> Host {
        Host {
            environment: std::env::vars_os()
                .map(|(k, v)| {
                    (
                        k.to_string_lossy().into_owned(),
                        v.to_string_lossy().into_owned(),
                    )
                })
                .collect(),
            uid: cobble_sys::current_uid(),
            users: UserDb::system(),
        }
    }
}

/// A request ready to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Prepared {
    /// Program and arguments, as requested.
    pub argv: Vec<String>,
    /// The complete environment. Held in memory for the launch only, never in the state.
    pub environment: BTreeMap<String, String>,
    /// The directory the command runs in.
    pub working_dir: String,
    /// The uid and gid to run as; the daemon's when `None`.
    pub ids: Option<(u32, u32)>,
    /// The command is killed after this long.
    pub timeout: Option<Duration>,
    /// Run on a pseudo-terminal.
    pub terminal: bool,
    /// The terminal is also stdin and the controlling terminal.
    pub interactive: bool,
    /// Stderr goes to its own websocket.
    pub split_stderr: bool,
    /// The terminal's first size, when the request gave a usable one.
    pub size: Option<WindowSize>,
    /// The `rlimits` of the context service, if any.
    pub rlimits: cobble_plan::Rlimits,
}

/// Checks `request` against the plan and the host and works out what to run. Blocking.
pub(crate) fn prepare(
    request: ExecRequest,
    plan: &Plan,
    host: &Host,
) -> Result<Prepared, SetupError> {
    let bad = |message: String| Err(SetupError::BadRequest(message));
    let Some(program) = request.command.first() else {
        return bad("must specify command".into());
    };
    let timeout = parse_timeout(&request.timeout)?;
    if !is_executable_program(program) {
        return bad(format!("cannot find executable {}", go_quote(program)));
    }
    let context = plan
        .merge_service_context(
            &request.service_context,
            ContextOptions {
                environment: request.environment,
                user_id: request.user_id,
                user: request.user,
                group_id: request.group_id,
                group: request.group,
                working_dir: request.working_dir,
                rlimits: Default::default(),
            },
        )
        .map_err(|e| SetupError::BadRequest(e.to_string()))?;
    let ids = host
        .users
        .normalize_uid_gid(
            context.user_id,
            &context.user,
            context.group_id,
            &context.group,
        )
        .map_err(|e| SetupError::BadRequest(e.to_string()))?;
    if request.interactive && !request.terminal {
        // Pebble finds this only when it runs the command, so it answers 500; clients may
        // tell by the status, so cobble answers the same.
        return Err(SetupError::CannotCall(
            "cannot use interactive mode without a terminal".into(),
        ));
    }
    let environment = build_environment(host, context.environment, ids.map(|(uid, _)| uid));
    check_sizes(&request.command, &environment)?;
    let working_dir = working_dir(&context.working_dir, &environment)?;
    let size = (request.width > 0 && request.height > 0).then(|| WindowSize {
        width: u16::try_from(request.width).unwrap_or(u16::MAX),
        height: u16::try_from(request.height).unwrap_or(u16::MAX),
    });
    Ok(Prepared {
        argv: request.command,
        environment,
        working_dir,
        ids,
        timeout,
        terminal: request.terminal,
        interactive: request.interactive,
        split_stderr: request.split_stderr,
        size,
        rlimits: context.rlimits,
    })
}

/// An empty timeout is none; a negative one is refused (Pebble would start a command that
/// has already timed out).
fn parse_timeout(text: &str) -> Result<Option<Duration>, SetupError> {
    if text.is_empty() {
        return Ok(None);
    }
    let invalid = |reason: String| SetupError::BadRequest(format!("invalid timeout: {reason}"));
    let nanos = parse_duration(text).map_err(|e| invalid(e.to_string()))?;
    match u64::try_from(nanos) {
        Ok(0) => Ok(None),
        Ok(nanos) => Ok(Some(Duration::from_nanos(nanos))),
        Err(_) => Err(invalid(format!("duration {} is negative", go_quote(text)))),
    }
}

/// The command's environment, in Pebble's order (see the module documentation).
fn build_environment(
    host: &Host,
    requested: BTreeMap<String, String>,
    uid: Option<u32>,
) -> BTreeMap<String, String> {
    let mut environment = host.environment.clone();
    if uid.is_some_and(|uid| uid != host.uid) {
        // The daemon's own would be wrong for another user; they are filled in below.
        environment.remove("HOME");
        environment.remove("USER");
    }
    environment.extend(requested);
    environment
        .entry("PATH".into())
        .or_insert_with(|| DEFAULT_PATH.into());
    let empty = |environment: &BTreeMap<String, String>, key: &str| {
        environment.get(key).is_none_or(String::is_empty)
    };
    if empty(&environment, "HOME") || empty(&environment, "USER") {
        let uid = uid.unwrap_or(host.uid);
        match host.users.lookup_id(uid) {
            Ok(user) => {
                if empty(&environment, "HOME") {
                    environment.insert("HOME".into(), user.home);
                }
                if empty(&environment, "USER") {
                    environment.insert("USER".into(), user.name);
                }
            }
            Err(e) => tracing::info!("Cannot look up user {uid}: {e}"),
        }
    }
    environment
        .entry("LANG".into())
        .or_insert_with(|| DEFAULT_LANG.into());
    environment
}

/// Refuses what `execve` would refuse with "argument list too long", before a change exists.
fn check_sizes(argv: &[String], environment: &BTreeMap<String, String>) -> Result<(), SetupError> {
    let too_large = |what: String| {
        Err(SetupError::BadRequest(format!(
            "cannot call exec: {what}: argument list too long"
        )))
    };
    let mut total = 0;
    for arg in argv {
        if arg.len() + 1 > MAX_STRING {
            return too_large(format!(
                "argument of {} bytes (the most is {})",
                arg.len(),
                MAX_STRING - 1
            ));
        }
        total += arg.len() + 1 + size_of::<usize>();
    }
    for (key, value) in environment {
        let len = key.len() + 1 + value.len();
        if len + 1 > MAX_STRING {
            return too_large(format!(
                "environment variable {} of {len} bytes (the most is {})",
                go_quote(key),
                MAX_STRING - 1
            ));
        }
        total += len + 1 + size_of::<usize>();
    }
    if total > MAX_ARGUMENTS {
        return too_large(format!(
            "command and environment of {total} bytes (the most is {MAX_ARGUMENTS})"
        ));
    }
    Ok(())
}

/// The requested directory, or `HOME`, or `/`; what is named must be a directory.
fn working_dir(
    requested: &str,
    environment: &BTreeMap<String, String>,
) -> Result<String, SetupError> {
    let (dir, name) = if requested.is_empty() {
        match environment.get("HOME").filter(|home| !home.is_empty()) {
            Some(home) => (home.as_str(), "home directory"),
            None => return Ok("/".into()),
        }
    } else {
        if !requested.starts_with('/') {
            // Relative to what? The daemon's directory is no business of the client's.
            return Err(SetupError::BadRequest(format!(
                "cannot call exec: working directory {} is not an absolute path",
                go_quote(requested)
            )));
        }
        (requested, "working directory")
    };
    // Checked here so the command does not fail later with a misleading
    // "fork/exec /bin/x: no such file or directory".
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(dir.to_owned()),
        Ok(_) => Err(SetupError::CannotCall(format!(
            "{name} {} not a directory",
            go_quote(dir)
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(SetupError::CannotCall(format!(
            "{name} {} does not exist",
            go_quote(dir)
        ))),
        Err(e) => Err(SetupError::CannotCall(format!(
            "cannot stat {name} {}: stat {dir}: {}",
            go_quote(dir),
            cobble_sys::os_error_text(&e)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cobble_plan::Service;

    /// A host whose user database holds root, a user with a home and one without.
    struct Fixture {
        dir: tempfile::TempDir,
        host: Host,
    }

    impl Fixture {
        fn new() -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            let home = dir.path().join("home-alice");
            std::fs::create_dir(&home).unwrap();
            let root_home = dir.path().join("home-root");
            std::fs::create_dir(&root_home).unwrap();
            let passwd = dir.path().join("passwd");
            std::fs::write(
                &passwd,
                format!(
                    "root:x:0:0:root:/root:/bin/sh\n\
                     alice:x:1000:1000::{}:/bin/sh\n\
                     ghost:x:1001:1001::/nonexistent:/bin/sh\n",
                    home.display()
                ),
            )
            .unwrap();
            let group = dir.path().join("group");
            std::fs::write(&group, "root:x:0:\nalice:x:1000:\nstaff:x:50:\n").unwrap();
            let host = Host {
                environment: [
                    ("HOME", root_home.to_str().unwrap()),
                    ("USER", "root"),
                    ("FROM_DAEMON", "yes"),
                    ("PATH", "/usr/bin:/bin"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
                uid: 0,
                users: UserDb::new(passwd, group),
            };
            Fixture { dir, host }
        }

        fn home(&self) -> String {
            self.dir.path().join("home-alice").display().to_string()
        }

        fn root_home(&self) -> String {
            self.dir.path().join("home-root").display().to_string()
        }

        fn prepare(&self, request: ExecRequest) -> Result<Prepared, SetupError> {
            self.prepare_in(request, &Plan::default())
        }

        fn prepare_in(&self, request: ExecRequest, plan: &Plan) -> Result<Prepared, SetupError> {
            prepare(request, plan, &self.host)
        }
    }

    fn request(command: &[&str]) -> ExecRequest {
        ExecRequest {
            command: command.iter().map(|s| s.to_string()).collect(),
            ..ExecRequest::default()
        }
    }

    fn bad(message: &str) -> Result<Prepared, SetupError> {
        Err(SetupError::BadRequest(message.into()))
    }

    #[test]
    fn the_daemons_environment_comes_first_and_the_request_wins() {
        let f = Fixture::new();
        let mut r = request(&["true"]);
        r.environment = [("FROM_DAEMON".to_string(), "no".to_string())].into();
        let p = f.prepare(r).unwrap();
        assert_eq!(p.environment["FROM_DAEMON"], "no");
        assert_eq!(p.environment["HOME"], f.root_home());
        assert_eq!(p.environment["USER"], "root");
        assert_eq!(p.environment["LANG"], DEFAULT_LANG);
        assert_eq!(p.environment["PATH"], "/usr/bin:/bin");
        assert_eq!(p.working_dir, f.root_home());
        assert_eq!(p.ids, None);
    }

    #[test]
    fn path_and_lang_defaults_fill_only_what_is_missing() {
        let mut f = Fixture::new();
        f.host.environment.remove("PATH");
        let mut r = request(&["true"]);
        r.environment = [("LANG".to_string(), String::new())].into();
        let p = f.prepare(r).unwrap();
        assert_eq!(p.environment["PATH"], DEFAULT_PATH);
        assert_eq!(p.environment["LANG"], "", "set, even if empty");
    }

    #[test]
    fn another_user_gets_their_own_home_user_and_working_dir() {
        let f = Fixture::new();
        let mut r = request(&["true"]);
        r.user = "alice".into();
        let p = f.prepare(r).unwrap();
        assert_eq!(p.ids, Some((1000, 1000)));
        assert_eq!(p.environment["HOME"], f.home());
        assert_eq!(p.environment["USER"], "alice");
        assert_eq!(p.working_dir, f.home());
        assert_eq!(p.environment["FROM_DAEMON"], "yes");
    }

    #[test]
    fn a_requested_home_is_kept_for_another_user() {
        let f = Fixture::new();
        let mut r = request(&["true"]);
        r.user_id = Some(1000);
        r.group = "staff".into();
        r.environment = [("HOME".to_string(), "/tmp".to_string())].into();
        let p = f.prepare(r).unwrap();
        assert_eq!(p.ids, Some((1000, 50)));
        assert_eq!(p.environment["HOME"], "/tmp");
        assert_eq!(p.environment["USER"], "alice");
        assert_eq!(p.working_dir, "/tmp");
    }

    #[test]
    fn a_home_that_does_not_exist_fails_unless_a_directory_is_given() {
        let f = Fixture::new();
        let mut r = request(&["true"]);
        r.user = "ghost".into();
        assert_eq!(
            f.prepare(r.clone()),
            Err(SetupError::CannotCall(
                "home directory \"/nonexistent\" does not exist".into()
            ))
        );
        r.working_dir = "/".into();
        assert_eq!(f.prepare(r).unwrap().working_dir, "/");
    }

    #[test]
    fn no_home_at_all_means_the_root_directory() {
        let mut f = Fixture::new();
        f.host.environment.remove("HOME");
        f.host.uid = 4242; // no passwd entry to take a home from
        let p = f.prepare(request(&["true"])).unwrap();
        assert_eq!(p.working_dir, "/");
        assert!(!p.environment.contains_key("HOME"));
    }

    #[test]
    fn working_directories_are_checked() {
        let f = Fixture::new();
        let file = f.dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let cases = [
            (
                "/no/such/dir".to_owned(),
                SetupError::CannotCall("working directory \"/no/such/dir\" does not exist".into()),
            ),
            (
                file.display().to_string(),
                SetupError::CannotCall(format!(
                    "working directory \"{}\" not a directory",
                    file.display()
                )),
            ),
            (
                "relative/dir".to_owned(),
                SetupError::BadRequest(
                    "cannot call exec: working directory \"relative/dir\" is not an absolute path"
                        .into(),
                ),
            ),
        ];
        for (dir, error) in cases {
            let mut r = request(&["true"]);
            r.working_dir = dir;
            assert_eq!(f.prepare(r), Err(error));
        }
    }

    #[test]
    fn bad_requests_are_worded_like_pebble() {
        let f = Fixture::new();
        assert_eq!(f.prepare(request(&[])), bad("must specify command"));
        assert_eq!(
            f.prepare(request(&["no-such-program-here"])),
            bad("cannot find executable \"no-such-program-here\"")
        );
        assert_eq!(
            f.prepare(request(&["/no/such/program"])),
            bad("cannot find executable \"/no/such/program\"")
        );
        let mut r = request(&["true"]);
        r.timeout = "soon".into();
        assert_eq!(
            f.prepare(r),
            bad("invalid timeout: time: invalid duration \"soon\"")
        );
        let mut r = request(&["true"]);
        r.timeout = "-1s".into();
        assert_eq!(
            f.prepare(r),
            bad("invalid timeout: duration \"-1s\" is negative")
        );
        let mut r = request(&["true"]);
        r.user = "bob".into();
        assert_eq!(f.prepare(r), bad("user: unknown user bob"));
        let mut r = request(&["true"]);
        r.user = "alice".into();
        r.group = "nogroup".into();
        assert_eq!(f.prepare(r), bad("group: unknown group nogroup"));
        let mut r = request(&["true"]);
        r.group_id = Some(0);
        assert_eq!(f.prepare(r), bad("must specify user, not just group"));
        let mut r = request(&["true"]);
        r.interactive = true;
        assert_eq!(
            f.prepare(r),
            Err(SetupError::CannotCall(
                "cannot use interactive mode without a terminal".into()
            ))
        );
        let mut r = request(&["true"]);
        r.service_context = "nope".into();
        assert_eq!(f.prepare(r), bad("context service \"nope\" not found"));
    }

    #[test]
    fn oversized_environments_are_refused_before_anything_runs() {
        let f = Fixture::new();
        let mut r = request(&["true"]);
        r.environment = [("BIG".to_string(), "x".repeat(MAX_STRING))].into();
        assert_eq!(
            f.prepare(r),
            bad(&format!(
                "cannot call exec: environment variable \"BIG\" of {} bytes (the most is {}): \
                 argument list too long",
                MAX_STRING + 4,
                MAX_STRING - 1
            ))
        );
        let mut r = request(&["true"]);
        r.environment = (0..40)
            .map(|i| (format!("V{i}"), "x".repeat(MAX_STRING / 2)))
            .collect();
        let error = f.prepare(r).unwrap_err().to_string();
        assert!(
            error.starts_with("cannot call exec: command and environment of "),
            "{error}"
        );
        // Just under the per-string limit is fine.
        let mut r = request(&["true"]);
        r.environment = [("OK".to_string(), "x".repeat(MAX_STRING - 5))].into();
        assert!(f.prepare(r).is_ok());
    }

    #[test]
    fn service_context_supplies_environment_identity_and_directory() {
        let f = Fixture::new();
        let mut plan = Plan::default();
        plan.services.insert(
            "svc".into(),
            Service {
                name: "svc".into(),
                environment: [
                    ("FOO".to_string(), "foo".to_string()),
                    ("BAR".into(), "bar".into()),
                ]
                .into(),
                user: "alice".into(),
                working_dir: "/tmp".into(),
                ..Service::default()
            },
        );
        let mut r = request(&["true"]);
        r.service_context = "svc".into();
        r.environment = [("FOO".to_string(), "oof".to_string())].into();
        let p = f.prepare_in(r.clone(), &plan).unwrap();
        assert_eq!(p.environment["FOO"], "oof");
        assert_eq!(p.environment["BAR"], "bar");
        assert_eq!(p.ids, Some((1000, 1000)));
        assert_eq!(p.working_dir, "/tmp");
        r.working_dir = "/".into();
        assert_eq!(f.prepare_in(r, &plan).unwrap().working_dir, "/");
    }

    #[test]
    fn terminal_size_is_used_only_when_both_sides_are_positive() {
        let f = Fixture::new();
        let mut r = request(&["true"]);
        r.terminal = true;
        r.width = 80;
        r.height = 0;
        assert_eq!(f.prepare(r.clone()).unwrap().size, None);
        r.height = 24;
        assert_eq!(
            f.prepare(r).unwrap().size,
            Some(WindowSize {
                width: 80,
                height: 24
            })
        );
    }
}
