//! Identities and access levels: every endpoint against every kind of caller, and the
//! identities API refusing bad input without changing anything.
//!
//! Callers are real processes: `curl` run under `setpriv` as the uid under test on the unix
//! socket, and `curl` with or without basic auth over `--http`. The daemon itself runs as an
//! unprivileged uid, so that "root" and "the daemon's own user" are two different callers.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::fixture::{COBBLE, Daemon, free_port, raw};

/// The uid the daemon runs as.
const DAEMON_UID: u32 = 4000;
/// A local user no identity names.
const OTHER_UID: u32 = 65534;
/// A local user an identity makes admin.
const ADMIN_UID: u32 = 4001;
/// A local user an identity makes untrusted.
const UNTRUSTED_UID: u32 = 4002;
/// The password of the `web` metrics identity (its hash is in [`IDENTITIES`]).
const WEB_PASSWORD: &str = "test";

/// `openssl passwd -6 -salt saltsalt test`.
const WEB_HASH: &str = "$6$saltsalt$JcVDtuB6d1BHhCd5RPBh8g8xX/1CbY8EU2PN0MTaj2/Mypw4P./C6dN4j0HALhzBDTocyW1Jm.gYaTPjFGCV40";

fn identities_yaml() -> String {
    format!(
        "identities:\n  web:\n    access: metrics\n    basic:\n      password: \"{WEB_HASH}\"\n  \
         boss:\n    access: admin\n    local:\n      user-id: {ADMIN_UID}\n  \
         stranger:\n    access: untrusted\n    local:\n      user-id: {UNTRUSTED_UID}\n"
    )
}

/// Who calls.
#[derive(Debug, Clone, Copy)]
enum Caller {
    /// uid 0 on the unix socket.
    Root,
    /// The daemon's own uid on the unix socket.
    DaemonUser,
    /// Another local user, named by no identity.
    OtherUser,
    /// A local user an `admin` identity names.
    AdminIdentity,
    /// A local user an `untrusted` identity names.
    UntrustedIdentity,
    /// Basic auth of the `metrics` identity, over `--http`.
    BasicMetricsHttp,
    /// Nothing at all, over `--http`.
    AnonymousHttp,
}

const CALLERS: [Caller; 7] = [
    Caller::Root,
    Caller::DaemonUser,
    Caller::OtherUser,
    Caller::AdminIdentity,
    Caller::UntrustedIdentity,
    Caller::BasicMetricsHttp,
    Caller::AnonymousHttp,
];

/// The level an endpoint needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Open,
    Metrics,
    Read,
    Admin,
}

impl Caller {
    /// The most this caller is granted.
    fn level(self) -> Option<Level> {
        match self {
            Caller::Root | Caller::DaemonUser | Caller::AdminIdentity => Some(Level::Admin),
            Caller::OtherUser => Some(Level::Read),
            Caller::BasicMetricsHttp => Some(Level::Metrics),
            Caller::UntrustedIdentity | Caller::AnonymousHttp => None,
        }
    }
}

/// Every endpoint: method, path, body, the level it needs, and its status once allowed (the
/// bodies are chosen so that an allowed request changes nothing).
const ENDPOINTS: &[(&str, &str, &str, Level, u16)] = &[
    ("GET", "/v1/system-info", "", Level::Open, 200),
    ("GET", "/v1/health", "", Level::Open, 200),
    ("GET", "/v1/metrics", "", Level::Metrics, 200),
    ("GET", "/v1/services", "", Level::Read, 200),
    (
        "POST",
        "/v1/services",
        r#"{"action":"nope"}"#,
        Level::Admin,
        400,
    ),
    ("GET", "/v1/services/s", "", Level::Read, 400),
    ("POST", "/v1/services/s", "{}", Level::Admin, 400),
    ("GET", "/v1/plan?format=yaml", "", Level::Admin, 200),
    (
        "POST",
        "/v1/layers",
        r#"{"action":"nope"}"#,
        Level::Admin,
        400,
    ),
    (
        "POST",
        "/v1/signals",
        r#"{"signal":"SIGHUP","services":[]}"#,
        Level::Admin,
        400,
    ),
    ("GET", "/v1/changes", "", Level::Read, 200),
    ("GET", "/v1/changes/999", "", Level::Read, 404),
    (
        "POST",
        "/v1/changes/999",
        r#"{"action":"abort"}"#,
        Level::Admin,
        404,
    ),
    ("GET", "/v1/changes/999/wait", "", Level::Read, 404),
    ("GET", "/v1/checks", "", Level::Read, 200),
    (
        "POST",
        "/v1/checks",
        r#"{"action":"nope"}"#,
        Level::Admin,
        400,
    ),
    (
        "POST",
        "/v1/checks/refresh",
        r#"{"name":"nope"}"#,
        Level::Admin,
        404,
    ),
    ("GET", "/v1/files?action=list&path=/", "", Level::Admin, 200),
    (
        "POST",
        "/v1/files",
        r#"{"action":"nope"}"#,
        Level::Admin,
        400,
    ),
    ("POST", "/v1/exec", r#"{"command":[]}"#, Level::Admin, 400),
    (
        "GET",
        "/v1/tasks/999/websocket/control",
        "",
        Level::Admin,
        404,
    ),
    ("GET", "/v1/identities", "", Level::Read, 200),
    (
        "POST",
        "/v1/identities",
        r#"{"action":"nope"}"#,
        Level::Admin,
        400,
    ),
];

/// A wrapper that hands `$PEBBLE` to [`DAEMON_UID`] and runs the daemon as that user.
fn unprivileged_cobble(dir: &Path) -> std::path::PathBuf {
    let script = dir.join("cobble-as-daemon-user");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nchown -R {DAEMON_UID}:{DAEMON_UID} \"$PEBBLE\"\n\
             exec setpriv --reuid={DAEMON_UID} --regid={DAEMON_UID} --clear-groups {COBBLE} \"$@\"\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// Sends one request as `caller`; returns the status code.
fn status_as(
    daemon: &Daemon,
    port: u16,
    caller: Caller,
    method: &str,
    path: &str,
    body: &str,
) -> u16 {
    let socket = daemon.pebble_dir().join(".pebble.socket");
    let mut command = match caller {
        Caller::BasicMetricsHttp | Caller::AnonymousHttp => Command::new("curl"),
        _ => {
            let uid = match caller {
                Caller::Root => 0,
                Caller::DaemonUser => DAEMON_UID,
                Caller::OtherUser => OTHER_UID,
                Caller::AdminIdentity => ADMIN_UID,
                _ => UNTRUSTED_UID,
            };
            let mut c = Command::new("setpriv");
            c.args([
                format!("--reuid={uid}"),
                format!("--regid={uid}"),
                "--clear-groups".into(),
                "curl".into(),
                "--unix-socket".into(),
                socket.display().to_string(),
            ]);
            c
        }
    };
    command.args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", method]);
    if !body.is_empty() {
        command.args(["-H", "Content-Type: application/json", "--data", body]);
    }
    if let Caller::BasicMetricsHttp = caller {
        command.args(["-u", &format!("web:{WEB_PASSWORD}")]);
    }
    let url = match caller {
        Caller::BasicMetricsHttp | Caller::AnonymousHttp => {
            format!("http://127.0.0.1:{port}{path}")
        }
        _ => format!("http://localhost{path}"),
    };
    let output = command
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .expect("run curl");
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("curl as {caller:?} {method} {path}: {output:?}"))
}

#[test]
fn every_endpoint_grants_exactly_its_level_to_every_caller() {
    let tmp = tempfile::tempdir().unwrap();
    let ids = tmp.path().join("identities.yaml");
    std::fs::write(&ids, identities_yaml()).unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let port = free_port();
    let program = unprivileged_cobble(tmp.path());
    let http = format!("127.0.0.1:{port}");
    let d = Daemon::start_as(
        &program,
        &[(
            "001-base",
            "services:\n  s:\n    override: replace\n    command: sleep 1000\n",
        )],
        &[
            "--hold",
            "--http",
            &http,
            "--identities",
            ids.to_str().unwrap(),
        ],
        &[],
    );
    // Let every local user reach the socket (0666) through the directories above it.
    for dir in [d.scratch(), d.pebble_dir().as_path()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    let mut failures = Vec::new();
    for &(method, path, body, needs, allowed) in ENDPOINTS {
        for caller in CALLERS {
            let granted = needs == Level::Open || caller.level().is_some_and(|l| l >= needs);
            let expected = if granted { allowed } else { 401 };
            let got = status_as(&d, port, caller, method, path, body);
            if got != expected {
                failures.push(format!(
                    "{method} {path} as {caller:?}: {got}, expected {expected}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}\n{}", failures.join("\n"), d.log());
    // Refusals are audited.
    assert!(
        d.log().contains(&format!(
            r#""event":"authz_fail:{UNTRUSTED_UID},/v1/services","description":"Access denied to GET /v1/services""#
        )),
        "{}",
        d.log()
    );
}

/// Posts identities as root; returns the status and body.
fn post_identities(d: &Daemon, body: &str) -> (u16, String) {
    raw(d, cobble_client::Method::POST, "/v1/identities", Some(body))
}

fn listed(d: &Daemon) -> String {
    raw(d, cobble_client::Method::GET, "/v1/identities", None).1
}

#[test]
fn bad_identities_are_refused_with_pebbles_errors_and_change_nothing() {
    let d = Daemon::hold(&[]);
    let (status, _) = post_identities(
        &d,
        r#"{"action":"add","identities":{"bob":{"access":"read","local":{"user-id":42}}}}"#,
    );
    assert_eq!(status, 200);
    let before = listed(&d);
    let cases = [
        (
            r#"{"action":"frob","identities":{}}"#,
            r#"invalid action \"frob\", must be \"add\", \"update\", \"replace\", or \"remove\""#,
        ),
        (
            r#"{"action":"add","identities":{"x":{"local":{"user-id":1}}}}"#,
            r#"cannot decode request body: access value must be specified (\"admin\", \"read\", \"metrics\", or \"untrusted\")"#,
        ),
        (
            r#"{"action":"add","identities":{"x":{"access":"god","local":{"user-id":1}}}}"#,
            r#"cannot decode request body: invalid access value \"god\", must be \"admin\", \"read\", \"metrics\", or \"untrusted\""#,
        ),
        (
            r#"{"action":"add","identities":{"x":{"access":"read"}}}"#,
            r#"cannot decode request body: identity must have at least one type (\"local\", \"basic\", or \"cert\")"#,
        ),
        (
            r#"{"action":"add","identities":{"x":{"access":"read","local":{}}}}"#,
            "cannot decode request body: local identity must specify user-id",
        ),
        (
            r#"{"action":"add","identities":{"x":{"access":"read","cert":{"pem":"junk"}}}}"#,
            "cannot decode request body: cert identity must include a PEM-encoded certificate",
        ),
        (
            r#"{"action":"add","identities":{"bob":{"access":"admin","local":{"user-id":7}}}}"#,
            "identities already exist: bob",
        ),
        (
            r#"{"action":"update","identities":{"eve":{"access":"admin","local":{"user-id":7}}}}"#,
            "identities do not exist: eve",
        ),
        (
            r#"{"action":"remove","identities":{"eve":null}}"#,
            "identities do not exist: eve",
        ),
        (
            r#"{"action":"remove","identities":{"bob":{"access":"read","local":{"user-id":42}}}}"#,
            r#"identity value for \"bob\" must be null for remove operation"#,
        ),
        (
            r#"{"action":"add","identities":{"eve":null}}"#,
            r#"identity value for \"eve\" must not be null for add operation"#,
        ),
        (
            r#"{"action":"add","identities":{"eve":{"access":"read","local":{"user-id":42}}}}"#,
            "cannot have multiple identities with user ID 42 (bob, eve)",
        ),
    ];
    for (body, message) in cases {
        let (status, answer) = post_identities(&d, body);
        assert_eq!(status, 400, "{body}: {answer}");
        assert!(
            answer.contains(&format!(r#""message":"{message}""#)),
            "{body}: {answer}"
        );
        assert_eq!(listed(&d), before, "{body} changed identities");
    }
}

#[test]
fn wrong_passwords_scrape_nothing_and_identities_outlive_the_daemon() {
    let port = free_port();
    let http = format!("127.0.0.1:{port}");
    let mut d = Daemon::start(&[], &["--hold", "--http", &http]);
    let body = format!(
        r#"{{"action":"replace","identities":{{"web":{{"access":"metrics","basic":{{"password":"{WEB_HASH}"}}}}}}}}"#
    );
    assert_eq!(post_identities(&d, &body).0, 200);
    let scrape = |user: &str| {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-u", user])
            .arg(format!("http://127.0.0.1:{port}/v1/metrics"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(scrape("web:test"), "200");
    assert_eq!(scrape("web:wrong"), "401");
    assert_eq!(scrape("nobody:test"), "401");
    // The identity was durable before the answer: a daemon killed at once still has it.
    d.kill();
    d.restart(&["--hold", "--http", &http]);
    assert_eq!(scrape("web:test"), "200");
    let out = Command::new(COBBLE)
        .args(["identities"])
        .env("PEBBLE", d.pebble_dir())
        .env_remove("PEBBLE_SOCKET")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Name  Access   Types\nweb   metrics  basic\n"
    );
}
