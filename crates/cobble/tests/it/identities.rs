//! Identities and access levels: every endpoint against every kind of caller, and the
//! identities API refusing bad input without changing anything.
//!
//! Callers are real processes: `curl` run under `setpriv` as the uid under test on the unix
//! socket, `curl` with or without basic auth over `--http`, and `curl` with or without a
//! client certificate over `--https`. The daemon itself runs as an unprivileged uid, so that
//! "root" and "the daemon's own user" are two different callers.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
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

/// A client certificate and its key, as PEM files in `dir` named after `name`; valid from
/// `not_before` to `not_after` (years).
pub(crate) fn client_cert(dir: &Path, name: &str, years: (i32, i32)) -> (PathBuf, PathBuf, String) {
    // ECDSA rather than Ed25519: curl's OpenSSL reads this key's PKCS#8 form.
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.not_before = rcgen::date_time_ymd(years.0, 1, 1);
    params.not_after = rcgen::date_time_ymd(years.1, 1, 1);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let pem = params.self_signed(&key).unwrap().pem();
    let cert_path = dir.join(format!("{name}.crt"));
    let key_path = dir.join(format!("{name}.key"));
    std::fs::write(&cert_path, &pem).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (cert_path, key_path, pem)
}

/// YAML for one `cert` identity.
pub(crate) fn cert_identity(name: &str, access: &str, pem: &str) -> String {
    let pem: String = pem.lines().map(|l| format!("        {l}\n")).collect();
    format!("  {name}:\n    access: {access}\n    cert:\n      pem: |\n{pem}")
}

fn identities_yaml(reader_pem: &str, expired_pem: &str) -> String {
    format!(
        "identities:\n  web:\n    access: metrics\n    basic:\n      password: \"{WEB_HASH}\"\n  \
         ops:\n    access: admin\n    basic:\n      password: \"{WEB_HASH}\"\n  \
         boss:\n    access: admin\n    local:\n      user-id: {ADMIN_UID}\n  \
         stranger:\n    access: untrusted\n    local:\n      user-id: {UNTRUSTED_UID}\n{}{}",
        cert_identity("reader", "read", reader_pem),
        cert_identity("old", "admin", expired_pem)
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
    /// Basic auth of an `admin` identity, over `--http`: cleartext gets it nothing.
    BasicAdminHttp,
    /// Nothing at all, over `--http`.
    AnonymousHttp,
    /// The certificate of a `read` identity, over `--https`.
    ReaderCertHttps,
    /// A certificate no identity holds, over `--https`.
    UnknownCertHttps,
    /// The certificate of an `admin` identity, expired, over `--https`.
    ExpiredCertHttps,
    /// Basic auth of the `metrics` identity and no certificate, over `--https`: refused at
    /// the handshake, as a client without a certificate is.
    BasicMetricsHttps,
    /// The `read` identity's certificate followed by another, over `--https`: a chain,
    /// refused at the handshake.
    ChainHttps,
    /// Root on the unix socket with the basic credentials of the `ops` admin identity: the
    /// identity decides, and it has no uid.
    BasicAdminUnix,
    /// Another local user on the unix socket with a wrong password for `ops`: no identity,
    /// so the uid's default.
    WrongBasicUnix,
    /// Another local user on the unix socket with an `Authorization` header that does not
    /// decode: as if there were none.
    MalformedBasicUnix,
    /// A wrong password for the `web` metrics identity, over `--http`.
    WrongBasicHttp,
}

const CALLERS: [Caller; 17] = [
    Caller::Root,
    Caller::DaemonUser,
    Caller::OtherUser,
    Caller::AdminIdentity,
    Caller::UntrustedIdentity,
    Caller::BasicMetricsHttp,
    Caller::BasicAdminHttp,
    Caller::AnonymousHttp,
    Caller::ReaderCertHttps,
    Caller::UnknownCertHttps,
    Caller::ExpiredCertHttps,
    Caller::BasicMetricsHttps,
    Caller::ChainHttps,
    Caller::BasicAdminUnix,
    Caller::WrongBasicUnix,
    Caller::MalformedBasicUnix,
    Caller::WrongBasicHttp,
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
            Caller::Root | Caller::DaemonUser | Caller::AdminIdentity | Caller::BasicAdminUnix => {
                Some(Level::Admin)
            }
            Caller::OtherUser
            | Caller::ReaderCertHttps
            | Caller::WrongBasicUnix
            | Caller::MalformedBasicUnix => Some(Level::Read),
            Caller::BasicMetricsHttp => Some(Level::Metrics),
            // Over HTTPS the certificate is the credential; a password there is not read.
            // Over HTTP only an identity whose access is exactly `metrics` gets anything.
            Caller::UntrustedIdentity
            | Caller::BasicAdminHttp
            | Caller::AnonymousHttp
            | Caller::UnknownCertHttps
            | Caller::ExpiredCertHttps
            | Caller::BasicMetricsHttps
            | Caller::ChainHttps
            | Caller::WrongBasicHttp => None,
        }
    }

    /// Whether the TLS handshake itself refuses the caller (no certificate, or a chain), so
    /// that not even the open endpoints answer.
    fn refused_at_handshake(self) -> bool {
        matches!(self, Caller::BasicMetricsHttps | Caller::ChainHttps)
    }

    /// Whether the caller's requests have a uid, which the notices endpoints need: not when
    /// a basic or certificate identity named the caller, even on the unix socket.
    fn has_uid(self) -> bool {
        !matches!(self, Caller::ReaderCertHttps | Caller::BasicAdminUnix)
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
    // A relative binary is refused before anything is tried, over every transport.
    (
        "POST",
        "/v1/cobble/reexec",
        r#"{"binary":"relative/cobble"}"#,
        Level::Admin,
        400,
    ),
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
    ("GET", "/v1/logs?n=0", "", Level::Read, 200),
    ("GET", NOTICES, "", Level::Read, 200),
    ("GET", "/v1/notices/999", "", Level::Read, 404),
    ("POST", NOTICES, r#"{"action":"nope"}"#, Level::Read, 400),
];

/// The notices endpoints answer 403 to a caller without a uid, once access is granted.
const NOTICES: &str = "/v1/notices";

#[test]
fn the_access_matrix_covers_every_route() {
    // A route added to the router without a row here fails this test, so that its access
    // is decided (and checked against every kind of caller) when it is added.
    let covered = |method: &str, route: &str| {
        let want: Vec<&str> = route.split('/').collect();
        ENDPOINTS.iter().any(|(m, path, ..)| {
            let got: Vec<&str> = path
                .split('?')
                .next()
                .unwrap_or_default()
                .split('/')
                .collect();
            *m == method
                && want.len() == got.len()
                && want
                    .iter()
                    .zip(&got)
                    .all(|(w, g)| w == g || w.starts_with('{'))
        })
    };
    let routes = cobble_daemon::api_routes();
    assert!(routes.len() >= 25, "only {} routes were read", routes.len());
    for (method, route) in routes {
        // Pairing is decided by the pairing window, not by an access level: its own tests.
        if route == "/v1/pairing" {
            continue;
        }
        assert!(
            covered(method, route),
            "{method} {route} is not in ENDPOINTS"
        );
    }
}

/// A wrapper that hands `$PEBBLE` to [`DAEMON_UID`] and runs the daemon as that user.
fn unprivileged_cobble(dir: &Path) -> PathBuf {
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

/// A daemon to call, and how to reach it.
struct Target<'a> {
    daemon: &'a Daemon,
    http_port: u16,
    https_port: u16,
    /// Where the client certificates are.
    certs: &'a Path,
}

/// Sends one request as `caller`; returns the status code.
fn status_as(target: &Target<'_>, caller: Caller, method: &str, path: &str, body: &str) -> u16 {
    let socket = target.daemon.pebble_dir().join(".pebble.socket");
    let cert = |name: &str| {
        [
            "--cert".to_owned(),
            target
                .certs
                .join(format!("{name}.crt"))
                .display()
                .to_string(),
            "--key".to_owned(),
            target
                .certs
                .join(format!("{name}.key"))
                .display()
                .to_string(),
        ]
    };
    let (mut command, url) = match caller {
        Caller::BasicMetricsHttp
        | Caller::BasicAdminHttp
        | Caller::AnonymousHttp
        | Caller::WrongBasicHttp => (
            Command::new("curl"),
            format!("http://127.0.0.1:{}{path}", target.http_port),
        ),
        Caller::ReaderCertHttps
        | Caller::UnknownCertHttps
        | Caller::ExpiredCertHttps
        | Caller::BasicMetricsHttps
        | Caller::ChainHttps => {
            let mut c = Command::new("curl");
            // The server certificate is self-signed: nothing to check it against.
            c.arg("-k");
            match caller {
                Caller::ReaderCertHttps => c.args(cert("reader")),
                Caller::UnknownCertHttps => c.args(cert("unknown")),
                Caller::ExpiredCertHttps => c.args(cert("old")),
                // curl sends every certificate of the file, in order.
                Caller::ChainHttps => c.args(cert("chain")),
                _ => &mut c,
            };
            (c, format!("https://127.0.0.1:{}{path}", target.https_port))
        }
        _ => {
            let uid = match caller {
                Caller::Root | Caller::BasicAdminUnix => 0,
                Caller::DaemonUser => DAEMON_UID,
                Caller::OtherUser | Caller::WrongBasicUnix | Caller::MalformedBasicUnix => {
                    OTHER_UID
                }
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
            (c, format!("http://localhost{path}"))
        }
    };
    command.args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", method]);
    if !body.is_empty() {
        command.args(["-H", "Content-Type: application/json", "--data", body]);
    }
    match caller {
        Caller::BasicMetricsHttp | Caller::BasicMetricsHttps => {
            command.args(["-u", &format!("web:{WEB_PASSWORD}")]);
        }
        Caller::BasicAdminHttp | Caller::BasicAdminUnix => {
            command.args(["-u", &format!("ops:{WEB_PASSWORD}")]);
        }
        Caller::WrongBasicUnix => {
            command.args(["-u", "ops:wrong"]);
        }
        Caller::WrongBasicHttp => {
            command.args(["-u", "web:wrong"]);
        }
        Caller::MalformedBasicUnix => {
            command.args(["-H", "Authorization: Basic %%%"]);
        }
        _ => {}
    }
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
    let (_, _, reader_pem) = client_cert(tmp.path(), "reader", (2000, 4000));
    client_cert(tmp.path(), "unknown", (2000, 4000));
    let (_, _, expired_pem) = client_cert(tmp.path(), "old", (2000, 2001));
    // The reader's certificate and key, with another certificate after it.
    let (_, _, extra_pem) = client_cert(tmp.path(), "extra", (2000, 4000));
    std::fs::write(
        tmp.path().join("chain.crt"),
        format!("{reader_pem}{extra_pem}"),
    )
    .unwrap();
    std::fs::copy(tmp.path().join("reader.key"), tmp.path().join("chain.key")).unwrap();
    let ids = tmp.path().join("identities.yaml");
    std::fs::write(&ids, identities_yaml(&reader_pem, &expired_pem)).unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (http_port, https_port) = (free_port(), free_port());
    let program = unprivileged_cobble(tmp.path());
    let http = format!("127.0.0.1:{http_port}");
    let https = format!("127.0.0.1:{https_port}");
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
            "--https",
            &https,
            "--identities",
            ids.to_str().unwrap(),
        ],
        &[],
    );
    // Let every local user reach the socket (0666) through the directories above it.
    for dir in [d.scratch(), d.pebble_dir().as_path()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    let target = Target {
        daemon: &d,
        http_port,
        https_port,
        certs: tmp.path(),
    };
    let mut failures = Vec::new();
    for &(method, path, body, needs, allowed) in ENDPOINTS {
        // Every caller at once: each request is one curl run, and the requests are all
        // refusals or reads, so their order changes nothing.
        let target = &target;
        let got: Vec<u16> = std::thread::scope(|scope| {
            let runs: Vec<_> = CALLERS
                .iter()
                .map(|&caller| scope.spawn(move || status_as(target, caller, method, path, body)))
                .collect();
            runs.into_iter().map(|run| run.join().unwrap()).collect()
        });
        for (caller, got) in CALLERS.into_iter().zip(got) {
            let granted = needs == Level::Open || caller.level().is_some_and(|l| l >= needs);
            let expected = if caller.refused_at_handshake() {
                // curl's code for no answer at all.
                0
            } else if !granted {
                401
            } else if path.starts_with(NOTICES) && !caller.has_uid() {
                403
            } else {
                allowed
            };
            if got != expected {
                failures.push(format!(
                    "{method} {path} as {caller:?}: {got}, expected {expected}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}\n{}", failures.join("\n"), d.log());
    // Refusals of somebody are audited as CRITICAL, naming the identity when one matched
    // and the uid otherwise; those of an anonymous TCP client are not, as in Pebble.
    let log = d.log();
    for (user, path) in [
        ("stranger", "/v1/services"),
        ("ops", "/v1/metrics"),
        ("reader", "/v1/plan"),
        (&OTHER_UID.to_string(), "/v1/plan"),
    ] {
        let expected = format!(
            r#""level":"CRITICAL","event":"authz_fail:{user},{path}","description":"User {user} not authorized to access {path}""#
        );
        assert!(log.contains(&expected), "no {expected}\n{log}");
    }
    assert!(!log.contains("authz_fail:<unknown>"), "{log}");
    assert!(!log.contains("authz_fail:unknown"), "{log}");
    // A stored certificate that fails verification names nobody, and says why.
    let expired = r#""level":"WARN","event":"authz_fail:old","description":"client certificate matched stored identity but failed self-signed verification: x509: certificate has expired or is not yet valid: current time "#;
    assert!(log.contains(expired), "no {expired}\n{log}");
    assert!(
        log.contains(r#" is after 2001-01-01T00:00:00Z","appid":"pebble"}"#),
        "{log}"
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
            r#"invalid identity for \"x\": access value must be specified (\"admin\", \"read\", \"metrics\", or \"untrusted\")"#,
        ),
        (
            r#"{"action":"add","identities":{"x":{"access":"god","local":{"user-id":1}}}}"#,
            r#"invalid identity for \"x\": invalid access value \"god\", must be \"admin\", \"read\", \"metrics\", or \"untrusted\""#,
        ),
        (
            r#"{"action":"add","identities":{"x":{"access":"read"}}}"#,
            r#"invalid identity for \"x\": identity must have at least one type (\"local\", \"basic\", or \"cert\")"#,
        ),
        (
            r#"{"action":"add","identities":{"x":{"access":"read","local":{}}}}"#,
            r#"invalid identity for \"x\": local identity must specify user-id"#,
        ),
        (
            r#"{"action":"add","identities":{"x":{"access":"read","cert":{"pem":"junk"}}}}"#,
            r#"invalid identity for \"x\": cert identity must include a PEM-encoded certificate"#,
        ),
        // Pebble reads every identity before the action, and names the bad name "".
        (
            r#"{"action":"frob","identities":{"x":{"access":"read"}}}"#,
            r#"invalid identity for \"x\": identity must have at least one type (\"local\", \"basic\", or \"cert\")"#,
        ),
        (
            r#"{"action":"add","identities":{"1bad":{"access":"read","local":{"user-id":1}}}}"#,
            r#"invalid identity for \"1bad\": identity name \"\" invalid: must start with an alphabetic character and only contain alphanumeric characters, underscore, and hyphen"#,
        ),
        (
            r#"{"action":"frob","identities":{"eve":null}}"#,
            r#"invalid action \"frob\", must be \"add\", \"update\", \"replace\", or \"remove\""#,
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

#[test]
fn https_trusts_only_current_certificates_of_identities_with_a_kept_key() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, _, good) = client_cert(tmp.path(), "good", (2000, 4000));
    let (_, _, expired) = client_cert(tmp.path(), "expired", (2000, 2001));
    let (_, _, future) = client_cert(tmp.path(), "future", (3900, 4000));
    client_cert(tmp.path(), "unknown", (2000, 4000));
    let ids = tmp.path().join("identities.yaml");
    std::fs::write(
        &ids,
        format!(
            "identities:\n{}{}{}",
            cert_identity("good", "admin", &good),
            cert_identity("expired", "admin", &expired),
            cert_identity("future", "admin", &future),
        ),
    )
    .unwrap();
    let port = free_port();
    let https = format!("127.0.0.1:{port}");
    let args = [
        "--hold",
        "--https",
        &https,
        "--identities",
        ids.to_str().unwrap(),
    ];
    let mut d = Daemon::start(&[], &args);
    let get = |name: &str| {
        let mut c = Command::new("curl");
        c.args(["-sk", "-o", "/dev/null", "-w", "%{http_code}"]);
        if !name.is_empty() {
            c.arg("--cert")
                .arg(tmp.path().join(format!("{name}.crt")))
                .arg("--key")
                .arg(tmp.path().join(format!("{name}.key")));
        }
        let out = c
            .arg(format!("https://127.0.0.1:{port}/v1/services"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(get("good"), "200");
    assert_eq!(get("expired"), "401");
    assert_eq!(get("future"), "401");
    assert_eq!(get("unknown"), "401");
    // No certificate: refused at the handshake, so no status at all.
    assert_eq!(get(""), "000");

    let key_path = d.pebble_dir().join("identity/key.pem");
    let key = std::fs::read_to_string(&key_path).unwrap();
    assert!(key.starts_with("-----BEGIN PRIVATE KEY-----"), "{key}");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&key_path), 0o600);
    assert_eq!(mode(&d.pebble_dir().join("identity")), 0o700);
    // The key is the daemon's identity: a restart keeps it.
    d.stop();
    d.restart(&args);
    assert_eq!(std::fs::read_to_string(&key_path).unwrap(), key);
    assert_eq!(get("good"), "200");
}

#[test]
fn https_without_persistent_state_is_refused_before_anything_is_made() {
    let tmp = tempfile::tempdir().unwrap();
    let pebble = tmp.path().join("pebble");
    let out = Command::new(COBBLE)
        .args(["run", "--create-dirs", "--https", "127.0.0.1:0"])
        .env("PEBBLE", &pebble)
        .env("PEBBLE_PERSIST", "never")
        .env_remove("PEBBLE_SOCKET")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "cannot use --https with PEBBLE_PERSIST=never: identity key requires persistent state"
        ),
        "{out:?}"
    );
    assert!(!pebble.join("identity").exists());
}

/// Accepts any server certificate: the daemon's is self-signed, made at its first start.
#[derive(Debug)]
struct AnyServer(std::sync::Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _: &rustls_pki_types::CertificateDer<'_>,
        _: &[rustls_pki_types::CertificateDer<'_>],
        _: &rustls_pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Exec's websockets over `--https`, from a client whose certificate an `admin` identity
/// holds: TLS connections cannot take spliced bytes, so output takes the daemon's read and
/// write, and input and output must still arrive whole.
#[test]
fn exec_runs_over_https_for_an_admin_certificate() {
    use futures_util::{SinkExt, StreamExt};
    use rustls_pki_types::pem::PemObject;
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;

    let tmp = tempfile::tempdir().unwrap();
    let (cert_path, key_path, pem) = client_cert(tmp.path(), "ops", (2000, 4000));
    let ids = tmp.path().join("identities.yaml");
    std::fs::write(
        &ids,
        format!("identities:\n{}", cert_identity("ops", "admin", &pem)),
    )
    .unwrap();
    let port = free_port();
    let https = format!("127.0.0.1:{port}");
    let _daemon = Daemon::start(
        &[],
        &[
            "--hold",
            "--https",
            &https,
            "--identities",
            ids.to_str().unwrap(),
        ],
    );
    let out = Command::new("curl")
        .args(["-sk", "--cert"])
        .arg(&cert_path)
        .arg("--key")
        .arg(&key_path)
        .args(["-d", r#"{"command":["cat"]}"#])
        .arg(format!("https://127.0.0.1:{port}/v1/exec"))
        .output()
        .unwrap();
    let envelope: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(envelope["status-code"], 202, "{envelope}");
    let task = envelope["result"]["task-id"].as_str().unwrap().to_owned();

    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(std::sync::Arc::new(AnyServer(provider)))
        .with_client_auth_cert(
            vec![rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()],
            rustls_pki_types::PrivateKeyDer::from_pem_file(&key_path).unwrap(),
        )
        .unwrap();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let connect = |id: &str| {
                let request = format!("wss://127.0.0.1:{port}/v1/tasks/{task}/websocket/{id}")
                    .into_client_request()
                    .unwrap();
                let connector = connector.clone();
                async move {
                    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
                        .await
                        .unwrap();
                    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
                    let tls = connector.connect(name, tcp).await.unwrap();
                    tokio_tungstenite::client_async(request, tls)
                        .await
                        .unwrap()
                        .0
                }
            };
            let mut control = connect("control").await;
            let mut stdio = connect("stdio").await;
            let input: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
            for chunk in input.chunks(40_000) {
                stdio.send(Message::binary(chunk.to_vec())).await.unwrap();
            }
            stdio
                .send(Message::text(r#"{"command":"end"}"#))
                .await
                .unwrap();
            let mut output = Vec::new();
            loop {
                match stdio.next().await {
                    Some(Ok(Message::Binary(bytes))) => output.extend_from_slice(&bytes),
                    Some(Ok(Message::Text(text))) => {
                        assert_eq!(text.as_str(), r#"{"command":"end"}"#);
                        break;
                    }
                    other => panic!("stdio ended early: {other:?}"),
                }
            }
            assert!(
                output == input,
                "{} of {} bytes came back",
                output.len(),
                input.len()
            );
            // The daemon closes control once the command is done.
            loop {
                match control.next().await {
                    Some(Ok(Message::Close(_))) => break,
                    Some(Ok(_)) => {}
                    other => panic!("control ended without a close: {other:?}"),
                }
            }
        });
}

/// Pebble's notices are kept per uid, and a request that a basic identity names has none,
/// even on the unix socket: each notices endpoint refuses it in its own words. A password
/// that names nobody, or a header that does not decode, leaves the socket peer's uid.
#[test]
fn notices_refuse_a_caller_named_by_basic_auth_even_on_the_unix_socket() {
    let tmp = tempfile::tempdir().unwrap();
    let ids = tmp.path().join("identities.yaml");
    std::fs::write(
        &ids,
        format!(
            "identities:\n  ops:\n    access: admin\n    basic:\n      password: \"{WEB_HASH}\"\n"
        ),
    )
    .unwrap();
    let d = Daemon::start(&[], &["--hold", "--identities", ids.to_str().unwrap()]);
    let socket = d.pebble_dir().join(".pebble.socket");
    let call = |auth: &[&str], method: &str, path: &str, body: &str| {
        let mut c = Command::new("curl");
        c.args(["-s", "--unix-socket"]).arg(&socket).args(auth);
        c.args(["-X", method]);
        if !body.is_empty() {
            c.args(["--data", body]);
        }
        let out = c.arg(format!("http://localhost{path}")).output().unwrap();
        let envelope: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
        envelope
    };
    let add = r#"{"action":"add","type":"custom","key":"example.com/a"}"#;
    let basic = ["-u", "ops:test"];
    for (method, path, body, what) in [
        ("GET", "/v1/notices", "", "retrieve notices"),
        ("GET", "/v1/notices/1", "", "retrieve notice"),
        ("POST", "/v1/notices", add, "create notice"),
    ] {
        let answer = call(&basic, method, path, body);
        assert_eq!(answer["status-code"], 403, "{method} {path}: {answer}");
        assert_eq!(
            answer["result"]["message"],
            format!("cannot determine UID of request, so cannot {what}"),
            "{method} {path}: {answer}"
        );
    }
    // The identity is admin all the same: other endpoints serve it.
    assert_eq!(call(&basic, "GET", "/v1/changes", "")["status-code"], 200);
    // Without a match, the peer's uid (root) decides, and notices are served.
    for auth in [
        &["-u", "ops:wrong"][..],
        &["-H", "Authorization: Basic %%%"],
        &[],
    ] {
        let added = call(auth, "POST", "/v1/notices", add);
        assert_eq!(added["status-code"], 200, "{auth:?}: {added}");
        let listed = call(auth, "GET", "/v1/notices?types=custom", "");
        assert_eq!(
            listed["result"][0]["key"], "example.com/a",
            "{auth:?}: {listed}"
        );
    }
}

/// A client that presents no certificate, or a chain of more than one, is refused during the
/// TLS handshake, as Pebble's `VerifyConnection` refuses it: not even `/v1/system-info` is
/// served to it. One certificate gets an answer: the identity's access when an identity
/// holds it, the open endpoints only when none does.
#[test]
fn https_refuses_at_the_handshake_a_client_without_exactly_one_certificate() {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};

    let tmp = tempfile::tempdir().unwrap();
    let (_, key_path, registered) = client_cert(tmp.path(), "registered", (2000, 4000));
    let (_, other_key, unregistered) = client_cert(tmp.path(), "unregistered", (2000, 4000));
    let (_, _, extra) = client_cert(tmp.path(), "extra", (2000, 4000));
    let ids = tmp.path().join("identities.yaml");
    std::fs::write(
        &ids,
        format!(
            "identities:\n{}",
            cert_identity("registered", "read", &registered)
        ),
    )
    .unwrap();
    let port = free_port();
    let https = format!("127.0.0.1:{port}");
    let _d = Daemon::start(
        &[],
        &[
            "--hold",
            "--https",
            &https,
            "--identities",
            ids.to_str().unwrap(),
        ],
    );
    let der = |pem: &str| CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
    // The status line of `GET path`, or the error that ended the connection.
    let get =
        |chain: Vec<CertificateDer<'static>>, key: &Path, path: &str| -> Result<String, String> {
            let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
            let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .unwrap()
                .dangerous()
                .with_custom_certificate_verifier(std::sync::Arc::new(AnyServer(provider)));
            let config = if chain.is_empty() {
                builder.with_no_client_auth()
            } else {
                builder
                    .with_client_auth_cert(chain, PrivateKeyDer::from_pem_file(key).unwrap())
                    .unwrap()
            };
            let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
            let mut conn =
                rustls::ClientConnection::new(std::sync::Arc::new(config), name).unwrap();
            let mut tls = rustls::Stream::new(&mut conn, &mut tcp);
            use std::io::{Read as _, Write as _};
            tls.write_all(
                format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .map_err(|e| e.to_string())?;
            let mut answer = String::new();
            tls.read_to_string(&mut answer).map_err(|e| e.to_string())?;
            Ok(answer.lines().next().unwrap_or_default().to_owned())
        };
    for path in ["/v1/system-info", "/v1/services"] {
        let refused = get(Vec::new(), &key_path, path).unwrap_err();
        assert!(refused.contains("CertificateRequired"), "{path}: {refused}");
        let refused = get(vec![der(&registered), der(&extra)], &key_path, path).unwrap_err();
        assert!(refused.contains("BadCertificate"), "{path}: {refused}");
    }
    let ok = "HTTP/1.1 200 OK";
    assert_eq!(
        get(vec![der(&registered)], &key_path, "/v1/services").unwrap(),
        ok
    );
    assert_eq!(
        get(vec![der(&unregistered)], &other_key, "/v1/system-info").unwrap(),
        ok
    );
    assert_eq!(
        get(vec![der(&unregistered)], &other_key, "/v1/services").unwrap(),
        "HTTP/1.1 401 Unauthorized"
    );
}
