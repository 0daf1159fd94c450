//! Hostile input through the real daemon: bodies nested past Go's limit, layers nested past
//! yaml.v3's or whose aliases expand past what it expands, pushes whose part headers never
//! end, certificates of deep or huge ASN.1. Each gets Pebble v1.32.1's status and words, and
//! the daemon goes on answering.

use cobble_client::Method;
use serde_json::{Value, json};

use crate::fixture::{Daemon, Test, raw};

/// The status and the result's message of a request.
fn answer(d: &Daemon, method: Method, path: &str, body: &str) -> (u16, String) {
    let (status, text) = raw(d, method, path, Some(body));
    let body: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let message = body["result"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (status, message)
}

/// The daemon still answers, and is the same process.
fn still_answers(d: &Daemon, pid: u32) {
    let (status, _) = raw(d, Method::GET, "/v1/health", None);
    assert_eq!(status, 200);
    assert_eq!(d.pid(), pid);
    assert!(crate::fixture::running(pid), "the daemon is gone");
}

#[test]
fn bodies_nested_past_gos_limit_are_refused_in_its_words() {
    let d = Daemon::hold(&[]);
    let pid = d.pid();
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let notice =
        format!(r#"{{"action": "add", "type": "custom", "key": "a.com/b", "data": {deep}}}"#);
    assert_eq!(
        answer(&d, Method::POST, "/v1/notices", &notice),
        (
            400,
            "cannot decode request body: invalid character '[' exceeded max depth".to_owned()
        )
    );
    let services = format!(r#"{{"action": "start", "services": {deep}}}"#);
    assert_eq!(
        answer(&d, Method::POST, "/v1/services", &services),
        (
            400,
            "cannot decode data from request body: invalid character '[' exceeded max depth"
                .to_owned()
        )
    );
    // Within the limit, the type speaks, as in Go.
    let within = format!(
        r#"{{"action": "start", "services": {}{}}}"#,
        "[".repeat(9_999),
        "]".repeat(9_999)
    );
    assert_eq!(
        answer(&d, Method::POST, "/v1/services", &within),
        (
            400,
            "cannot decode data from request body: json: cannot unmarshal array into Go struct field .services of type string".to_owned()
        )
    );
    still_answers(&d, pid);
}

/// Nine levels, each a flow sequence of nine aliases of the one before.
fn billion_laughs() -> String {
    let mut yaml = "      a: &a [\"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\"]\n".to_owned();
    for (prev, level) in ('a'..='h').zip('b'..='i') {
        let aliases = vec![format!("*{prev}"); 9].join(", ");
        yaml.push_str(&format!("      {level}: &{level} [{aliases}]\n"));
    }
    yaml
}

fn add_layer(d: &Daemon, yaml: &str) -> (u16, String) {
    let body = json!({"action": "add", "label": "hostile", "format": "yaml", "layer": yaml});
    answer(d, Method::POST, "/v1/layers", &body.to_string())
}

#[test]
fn layers_that_expand_or_nest_past_yaml_v3s_limits_are_refused_at_once_in_its_words() {
    let d = Daemon::hold(&[]);
    let pid = d.pid();
    let environment = format!(
        "services:\n  bomb:\n    override: replace\n    command: sleep 1\n    environment:\n{}",
        billion_laughs()
    );
    let errors: String = (5..=13)
        .map(|line| format!("\n  line {line}: cannot unmarshal !!seq into string"))
        .collect();
    assert_eq!(
        add_layer(&d, &environment),
        (
            400,
            format!(
                "cannot parse layer YAML: cannot parse layer \"hostile\" section \"services\": yaml: unmarshal errors:{errors}"
            )
        )
    );
    // Where cobble's own field would take every expansion, yaml.v3's rule refuses it.
    let own_field = environment.replace("environment:", "rlimits:");
    assert_eq!(
        add_layer(&d, &own_field),
        (
            400,
            "cannot parse layer YAML: cannot parse layer \"hostile\" section \"services\": yaml: document contains excessive aliasing".to_owned()
        )
    );
    let deep = format!("summary: {}", "[".repeat(100_000));
    assert_eq!(
        add_layer(&d, &deep),
        (
            400,
            "cannot parse layer YAML: cannot parse layer \"hostile\": yaml: exceeded max depth of 10000"
                .to_owned()
        )
    );
    still_answers(&d, pid);
    // Nothing of it reached the plan.
    let (_, plan) = raw(&d, Method::GET, "/v1/plan?format=yaml", None);
    assert!(!plan.contains("bomb"), "{plan}");
}

#[test]
fn a_layers_directory_layer_nested_past_yaml_v3s_limit_stops_the_start_in_its_words() {
    let test = Test::new();
    let layers = test.pebble_dir().join("layers");
    std::fs::create_dir_all(&layers).unwrap();
    std::fs::write(
        layers.join("001-hostile.yaml"),
        format!("{}x\n", "- ".repeat(10_001)),
    )
    .unwrap();
    test.args(&["run"])
        .stderr_contains("cannot parse layer \"hostile\": yaml: exceeded max depth of 10000")
        .status(1)
        .run();
}

/// Sends `head` (a request line and headers, without the blank line that ends them) on a
/// connection of its own; the status line of the answer.
fn status_line(d: &Daemon, head: &[u8]) -> String {
    use std::io::{Read, Write};
    let mut stream =
        std::os::unix::net::UnixStream::connect(d.pebble_dir().join(".pebble.socket")).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    // The daemon may answer and close before it has read all of a head it refuses.
    let _ = stream
        .write_all(head)
        .and_then(|()| stream.write_all(b"\r\n\r\n"));
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    text.lines().next().unwrap_or_default().to_owned()
}

/// A request head of `len` bytes in all (its blank line included): one long header.
fn head_of(len: usize) -> Vec<u8> {
    let mut head = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Long: ".to_vec();
    head.resize(len - 4, b'a');
    head
}

#[test]
fn request_heads_are_bounded_where_gos_server_bounds_them() {
    let d = Daemon::hold(&[]);
    let pid = d.pid();
    // Go's server reads a head of up to 1 MiB and 4 KiB, and answers 431 past it.
    let most = (1 << 20) + 4096;
    assert_eq!(status_line(&d, &head_of(most)), "HTTP/1.1 200 OK");
    assert_eq!(
        status_line(&d, &head_of(most + 1)),
        "HTTP/1.1 431 Request Header Fields Too Large"
    );
    assert_eq!(
        status_line(&d, &head_of(64 << 20)),
        "HTTP/1.1 431 Request Header Fields Too Large"
    );
    // Go counts no header fields; cobble takes a thousand, and answers as for a long head
    // past them.
    let many = |n: usize| {
        let mut head = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close".to_vec();
        for i in 0..n - 2 {
            head.extend_from_slice(format!("\r\nX-{i}: a").as_bytes());
        }
        head
    };
    assert_eq!(status_line(&d, &many(1000)), "HTTP/1.1 200 OK");
    assert_eq!(
        status_line(&d, &many(1001)),
        "HTTP/1.1 431 Request Header Fields Too Large"
    );
    still_answers(&d, pid);
}

#[test]
fn long_query_strings_get_pebbles_answers_up_to_the_longest_uri_taken() {
    let d = Daemon::hold(&[]);
    let pid = d.pid();
    // Thousands of names, listed or repeated: an empty list, as from Pebble.
    let listed: Vec<String> = (0..6000).map(|i| format!("svc{i}")).collect();
    let (status, text) = raw(
        &d,
        Method::GET,
        &format!("/v1/services?names={}", listed.join(",")),
        None,
    );
    assert_eq!(
        (status, text.as_str()),
        (
            200,
            r#"{"type":"sync","status-code":200,"status":"OK","result":[]}"#
        )
    );
    let repeated: Vec<String> = (0..4000).map(|i| format!("names=s{i}")).collect();
    let (status, text) = raw(
        &d,
        Method::GET,
        &format!("/v1/services?{}", repeated.join("&")),
        None,
    );
    assert_eq!(
        (status, text.as_str()),
        (
            200,
            r#"{"type":"sync","status-code":200,"status":"OK","result":[]}"#
        )
    );
    // Of a repeated key, the first counts, as in Go.
    let selects = format!("/v1/changes?select=all{}", "&select=x".repeat(6000));
    assert_eq!(raw(&d, Method::GET, &selects, None).0, 200);
    let selects = format!("/v1/changes?select=x{}", "&select=all".repeat(4000));
    assert_eq!(
        answer(&d, Method::GET, &selects, ""),
        (
            400,
            "select should be one of: all,in-progress,ready".to_owned()
        )
    );
    // A target longer than the HTTP library takes (64 KiB), within Go's 1 MiB head: 414.
    let huge = format!(
        "GET /v1/services?names={} HTTP/1.1\r\nHost: x\r\nConnection: close",
        "a,".repeat(100_000)
    );
    assert_eq!(
        status_line(&d, huge.as_bytes()),
        "HTTP/1.1 414 URI Too Long"
    );
    still_answers(&d, pid);
}

/// Sends a request with `content_type` and `body` on a connection of its own; the status
/// and the result's message.
fn post_typed(d: &Daemon, path: &str, content_type: &str, body: &[u8]) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream =
        std::os::unix::net::UnixStream::connect(d.pebble_dir().join(".pebble.socket")).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let _ = stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body));
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n").expect("an answer");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let body: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let message = body["result"]["message"].as_str().unwrap_or_default();
    (status, message.to_owned())
}

#[test]
fn hostile_multipart_pushes_get_pebbles_answers() {
    let d = Daemon::hold(&[]);
    let pid = d.pid();
    let boundary = "B".repeat(40);
    let multipart = format!("multipart/form-data; boundary={boundary}");
    let form = |metadata: &str| {
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n{metadata}\r\n--{boundary}--\r\n"
        )
        .into_bytes()
    };
    // Metadata nested past Go's limit: its decoder's words.
    let deep = format!(r#"{{"action":"write","files":{}"#, "[".repeat(20_000));
    assert_eq!(
        post_typed(&d, "/v1/files", &multipart, &form(&deep)),
        (
            400,
            "cannot decode request metadata: invalid character '[' exceeded max depth".to_owned()
        )
    );
    // Metadata past cobble's 4 MiB bound (Pebble decodes any size).
    let huge = format!(
        r#"{{"action":"write","files":[],"x":"{}"}}"#,
        "a".repeat(5 << 20)
    );
    assert_eq!(
        post_typed(&d, "/v1/files", &multipart, &form(&huge)),
        (400, "cannot decode request metadata: too large".to_owned())
    );
    // No boundary, a boundary too short, an empty one: Pebble's words.
    let good = form(r#"{"action":"write","files":[{"path":"/x"}]}"#);
    assert_eq!(
        post_typed(&d, "/v1/files", "multipart/form-data", &good),
        (400, r#"invalid boundary """#.to_owned())
    );
    assert_eq!(
        post_typed(
            &d,
            "/v1/files",
            "multipart/form-data; boundary=BOUND",
            &good
        ),
        (400, r#"invalid boundary "BOUND""#.to_owned())
    );
    assert_eq!(
        post_typed(&d, "/v1/files", "multipart/form-data; boundary=", &good),
        (
            400,
            r#"invalid Content-Type "multipart/form-data; boundary=""#.to_owned()
        )
    );
    // Thousands of empty parts before the metadata: the first is the one Pebble names.
    let mut many = Vec::new();
    for _ in 0..20_000 {
        many.extend_from_slice(format!("--{boundary}\r\nX: y\r\n\r\n\r\n").as_bytes());
    }
    many.extend_from_slice(&good);
    assert_eq!(
        post_typed(&d, "/v1/files", &multipart, &many),
        (
            400,
            r#"metadata field name must be "request", got """#.to_owned()
        )
    );
    still_answers(&d, pid);
}

/// The daemon's peak resident memory (`VmHWM`), in KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Posts a multipart body that starts with `prefix` and goes on with `a`s up to `total`
/// bytes, from a thread of its own that stops when the daemon stops reading; the status and
/// the result's message.
fn post_endless(d: &Daemon, content_type: &str, prefix: &[u8], total: usize) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream =
        std::os::unix::net::UnixStream::connect(d.pebble_dir().join(".pebble.socket")).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let head = format!(
        "POST /v1/files HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: {content_type}\r\nContent-Length: {total}\r\n\r\n"
    );
    let mut writer = stream.try_clone().unwrap();
    let prefix = prefix.to_vec();
    let sender = std::thread::spawn(move || {
        let filler = vec![b'a'; 64 * 1024];
        let mut sent = prefix.len();
        let mut result = writer
            .write_all(head.as_bytes())
            .and_then(|()| writer.write_all(&prefix));
        while result.is_ok() && sent < total {
            let n = filler.len().min(total - sent);
            result = writer.write_all(&filler[..n]);
            sent += n;
        }
    });
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let _ = stream.shutdown(std::net::Shutdown::Both);
    sender.join().unwrap();
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n").expect("an answer");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let body: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    let message = body["result"]["message"].as_str().unwrap_or_default();
    (status, message.to_owned())
}

#[test]
fn push_part_headers_are_bounded_as_gos_reader_bounds_them() {
    let d = Daemon::hold(&[]);
    let pid = d.pid();
    let boundary = "B".repeat(40);
    let multipart = format!("multipart/form-data; boundary={boundary}");
    let target = d.pebble_dir().join("pushed.txt");
    std::fs::write(&target, "old").unwrap();
    let path = target.to_str().unwrap();
    let metadata = format!(r#"{{"action":"write","files":[{{"path":"{path}"}}]}}"#);
    let request_part =
        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"request\"\r\n");
    let file_part = format!(
        "\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"{path}\"\r\n"
    );

    // Headers that never end, offered far past Go's 10 MiB: refused in its words once past
    // them, with the daemon's memory bounded by them rather than by what the client sends.
    let before = peak_kib(pid);
    let endless = format!("{request_part}X-Long: ");
    assert_eq!(
        post_endless(&d, &multipart, endless.as_bytes(), 256 << 20),
        (
            400,
            "cannot read request metadata: multipart: message too large".to_owned()
        )
    );
    let grown = peak_kib(pid).saturating_sub(before);
    assert!(grown < 64 * 1024, "the daemon grew by {grown} KiB");
    let endless = format!("{request_part}\r\n{metadata}{file_part}X-Long: ");
    assert_eq!(
        post_endless(&d, &multipart, endless.as_bytes(), 11 << 20),
        (
            400,
            "cannot read file part 0: multipart: message too large".to_owned()
        )
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "old");

    // Up to 10 000 header lines a part, as Go's reader takes (multer alone parses 32).
    let with_lines = |extra: usize| {
        let lines: String = (0..extra).map(|i| format!("X-{i}: y\r\n")).collect();
        format!(
            "{request_part}{lines}\r\n{metadata}{file_part}{lines}Content-Type: application/octet-stream\r\n\r\nnew\r\n--{boundary}--\r\n"
        )
        .into_bytes()
    };
    assert_eq!(
        post_typed(&d, "/v1/files", &multipart, &with_lines(10_001)),
        (
            400,
            "cannot read request metadata: multipart: message too large".to_owned()
        )
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "old");
    let (status, text) = raw_post(&d, &multipart, &with_lines(9_998));
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["result"],
        json!([{ "path": path }])
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
    // And a plain push still works.
    let (status, text) = raw_post(&d, &multipart, &with_lines(0));
    assert_eq!(status, 200, "{text}");
    still_answers(&d, pid);
}

/// Posts `body` to /v1/files; the status and the whole answer's body.
fn raw_post(d: &Daemon, content_type: &str, body: &[u8]) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream =
        std::os::unix::net::UnixStream::connect(d.pebble_dir().join(".pebble.socket")).unwrap();
    let head = format!(
        "POST /v1/files HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n").expect("an answer");
    (
        head.split(' ').nth(1).unwrap().parse().unwrap(),
        body.to_owned(),
    )
}

/// DER: `tag`, a definite length, `inner`.
fn der(tag: u8, inner: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    if inner.len() < 128 {
        out.push(inner.len() as u8);
    } else {
        let len: Vec<u8> = (inner.len() as u32)
            .to_be_bytes()
            .into_iter()
            .skip_while(|&b| b == 0)
            .collect();
        out.push(0x80 | len.len() as u8);
        out.extend_from_slice(&len);
    }
    out.extend_from_slice(inner);
    out
}

/// `der` as a PEM certificate, 64 characters a line.
fn pem_of(der: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut text = Vec::new();
    for group in der.chunks(3) {
        let n = group
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= group.len() {
                text.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]);
            } else {
                text.push(b'=');
            }
        }
    }
    let lines: Vec<&str> = text
        .chunks(64)
        .map(|line| std::str::from_utf8(line).unwrap())
        .collect();
    format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        lines.join("\n")
    )
}

#[test]
fn hostile_identities_get_pebbles_answers() {
    let d = Daemon::hold(&[]);
    let pid = d.pid();
    let add = |pem: &str| {
        json!({"action": "add", "identities": {"bob": {"access": "admin", "cert": {"pem": pem}}}})
            .to_string()
    };
    let refused = |why: &str| {
        (
            400,
            format!(
                r#"invalid identity for "bob": cannot parse certificate from cert identity: {why}"#
            ),
        )
    };
    // A body nested past Go's limit: its decoder's words.
    let deep = format!(
        r#"{{"action":"add","identities":{{"bob":{}{}}}}}"#,
        "[".repeat(20_000),
        "]".repeat(20_000)
    );
    assert_eq!(
        answer(&d, Method::POST, "/v1/identities", &deep),
        (
            400,
            "cannot decode request body: invalid character '[' exceeded max depth".to_owned()
        )
    );
    // ASN.1 nested 100 000 deep, as a certificate and inside one: where Go's parser stops.
    let mut nested = Vec::new();
    for _ in 0..100_000 {
        nested = der(0x30, &nested);
    }
    assert_eq!(
        answer(&d, Method::POST, "/v1/identities", &add(&pem_of(&nested))),
        refused("x509: malformed serial number")
    );
    let serial = der(0x02, &[1]);
    let tbs = der(0x30, &[serial.clone(), nested.clone()].concat());
    let inside = der(0x30, &[tbs, nested].concat());
    assert_eq!(
        answer(&d, Method::POST, "/v1/identities", &add(&pem_of(&inside))),
        refused("x509: malformed OID")
    );
    // A certificate of megabytes that is one string: Go finds no TBS certificate.
    let huge = der(0x30, &der(0x04, &vec![b'a'; 2_500_000]));
    assert_eq!(
        answer(&d, Method::POST, "/v1/identities", &add(&pem_of(&huge))),
        refused("x509: malformed tbs certificate")
    );
    // Past cobble's 4 MiB body bound (Pebble reads any size).
    let huger = der(0x30, &der(0x04, &vec![b'a'; 4_000_000]));
    assert_eq!(
        answer(&d, Method::POST, "/v1/identities", &add(&pem_of(&huger))),
        (
            400,
            "cannot decode request body: request body too large".to_owned()
        )
    );
    // Not DER at all, an indefinite length, a version Go does not know.
    assert_eq!(
        answer(
            &d,
            Method::POST,
            "/v1/identities",
            &add(&pem_of(&[0xff; 100]))
        ),
        refused("x509: malformed certificate")
    );
    assert_eq!(
        answer(
            &d,
            Method::POST,
            "/v1/identities",
            &add(&pem_of(b"\x30\x80\x30\x03\x02\x01\x01\x00\x00"))
        ),
        refused("x509: malformed certificate")
    );
    let v6 = der(
        0x30,
        &der(0x30, &[der(0xa0, &der(0x02, &[5])), serial].concat()),
    );
    assert_eq!(
        answer(&d, Method::POST, "/v1/identities", &add(&pem_of(&v6))),
        refused("x509: invalid version")
    );
    // None of them was added.
    let (status, text) = raw(&d, Method::GET, "/v1/identities", None);
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["result"],
        json!({})
    );
    still_answers(&d, pid);
}
