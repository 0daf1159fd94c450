//! Every JSON request payload decodes as Pebble's decodes it into its Go type: type errors
//! name the Go field and type Pebble's would. Each expected message is what Go 1.23's
//! `encoding/json` gave for Pebble v1.32.1's payload types.

use cobble_client::identities::IdentitiesRequest;
use cobble_client::types::{
    AddNoticeRequest, ChangeAction, ChecksAction, ExecRequest, FilesRequest, LayersRequest,
    RefreshCheckRequest, ServicesAction, SignalsRequest, WriteFilesRequest,
};

use crate::go_json::{GoPayload, decode};

fn outcome<T: GoPayload>(body: &str) -> Result<(), String> {
    decode::<T>(body.as_bytes()).map(drop)
}

/// Decodes `body` as the payload of `endpoint`.
fn decode_as(endpoint: &str, body: &str) -> Result<(), String> {
    match endpoint {
        "services" => outcome::<ServicesAction>(body),
        "checks" => outcome::<ChecksAction>(body),
        "refresh" => outcome::<RefreshCheckRequest>(body),
        "change" => outcome::<ChangeAction>(body),
        "layers" => outcome::<LayersRequest>(body),
        "signals" => outcome::<SignalsRequest>(body),
        "exec" => outcome::<ExecRequest>(body),
        "identities" => outcome::<IdentitiesRequest>(body),
        "notices" => outcome::<AddNoticeRequest>(body),
        "files" => outcome::<FilesRequest>(body),
        "write" => outcome::<WriteFilesRequest>(body),
        other => panic!("no payload {other}"),
    }
}

#[test]
fn type_errors_are_pebbles() {
    let cases = [
        (
            "services",
            r#"{"action": "start", "services": 5}"#,
            r#"json: cannot unmarshal number into Go struct field .services of type []string"#,
        ),
        (
            "services",
            r#"{"action": 5}"#,
            r#"json: cannot unmarshal number into Go struct field .action of type string"#,
        ),
        (
            "services",
            r#"[1, 2]"#,
            r#"json: cannot unmarshal array into Go value of type struct { Action string "json:\"action\""; Services []string "json:\"services\"" }"#,
        ),
        (
            "services",
            r#"42"#,
            r#"json: cannot unmarshal number into Go value of type struct { Action string "json:\"action\""; Services []string "json:\"services\"" }"#,
        ),
        (
            "services",
            r#""just a string""#,
            r#"json: cannot unmarshal string into Go value of type struct { Action string "json:\"action\""; Services []string "json:\"services\"" }"#,
        ),
        (
            "services",
            r#"true"#,
            r#"json: cannot unmarshal bool into Go value of type struct { Action string "json:\"action\""; Services []string "json:\"services\"" }"#,
        ),
        (
            "services",
            r#"{"services": ["a", 3, {}]}"#,
            r#"json: cannot unmarshal number into Go struct field .services of type string"#,
        ),
        (
            "services",
            r#"{"action": {"x": 1}, "services": 7}"#,
            r#"json: cannot unmarshal object into Go struct field .action of type string"#,
        ),
        (
            "checks",
            r#"[1, 2]"#,
            r#"json: cannot unmarshal array into Go value of type struct { Action string "json:\"action\""; Checks []string "json:\"checks\"" }"#,
        ),
        (
            "checks",
            r#"{"checks": "a"}"#,
            r#"json: cannot unmarshal string into Go struct field .checks of type []string"#,
        ),
        (
            "refresh",
            r#"{"name": 7}"#,
            r#"json: cannot unmarshal number into Go struct field .name of type string"#,
        ),
        (
            "refresh",
            r#""just a string""#,
            r#"json: cannot unmarshal string into Go value of type struct { Name string "json:\"name\"" }"#,
        ),
        (
            "change",
            r#"{"action": []}"#,
            r#"json: cannot unmarshal array into Go struct field .action of type string"#,
        ),
        (
            "change",
            r#"[]"#,
            r#"json: cannot unmarshal array into Go value of type struct { Action string "json:\"action\"" }"#,
        ),
        (
            "layers",
            r#"{"layer": 5}"#,
            r#"json: cannot unmarshal number into Go struct field .layer of type string"#,
        ),
        (
            "layers",
            r#"{"combine": "yes"}"#,
            r#"json: cannot unmarshal string into Go struct field .combine of type bool"#,
        ),
        (
            "layers",
            r#"{"inner": 1}"#,
            r#"json: cannot unmarshal number into Go struct field .inner of type bool"#,
        ),
        (
            "layers",
            r#"[]"#,
            r#"json: cannot unmarshal array into Go value of type struct { Action string "json:\"action\""; Combine bool "json:\"combine\""; Inner bool "json:\"inner\""; Label string "json:\"label\""; Format string "json:\"format\""; Layer string "json:\"layer\"" }"#,
        ),
        (
            "signals",
            r#"{"signal": "SIGCONT", "services": [1]}"#,
            r#"json: cannot unmarshal number into Go struct field signalsPayload.services of type string"#,
        ),
        (
            "signals",
            r#"{"signal": 9}"#,
            r#"json: cannot unmarshal number into Go struct field signalsPayload.signal of type string"#,
        ),
        (
            "signals",
            r#"[]"#,
            r#"json: cannot unmarshal array into Go value of type daemon.signalsPayload"#,
        ),
        (
            "exec",
            r#"[1, 2]"#,
            r#"json: cannot unmarshal array into Go value of type daemon.execPayload"#,
        ),
        (
            "exec",
            r#"{"command": "echo hi"}"#,
            r#"json: cannot unmarshal string into Go struct field execPayload.command of type []string"#,
        ),
        (
            "exec",
            r#"{"command": ["a", 1]}"#,
            r#"json: cannot unmarshal number into Go struct field execPayload.command of type string"#,
        ),
        (
            "exec",
            r#"{"environment": {"A": 1}}"#,
            r#"json: cannot unmarshal number into Go struct field execPayload.environment of type string"#,
        ),
        (
            "exec",
            r#"{"environment": ["A"]}"#,
            r#"json: cannot unmarshal array into Go struct field execPayload.environment of type map[string]string"#,
        ),
        (
            "exec",
            r#"{"user-id": "0"}"#,
            r#"json: cannot unmarshal string into Go struct field execPayload.user-id of type int"#,
        ),
        (
            "exec",
            r#"{"user-id": 1.5}"#,
            r#"json: cannot unmarshal number 1.5 into Go struct field execPayload.user-id of type int"#,
        ),
        (
            "exec",
            r#"{"user-id": 99999999999999999999}"#,
            r#"json: cannot unmarshal number 99999999999999999999 into Go struct field execPayload.user-id of type int"#,
        ),
        (
            "exec",
            r#"{"width": -1, "height": 1e3}"#,
            r#"json: cannot unmarshal number 1e3 into Go struct field execPayload.height of type int"#,
        ),
        (
            "exec",
            r#"{"terminal": "true"}"#,
            r#"json: cannot unmarshal string into Go struct field execPayload.terminal of type bool"#,
        ),
        (
            "exec",
            r#"{"timeout": 10}"#,
            r#"json: cannot unmarshal number into Go struct field execPayload.timeout of type string"#,
        ),
        (
            "identities",
            r#"{"action": "add", "identities": ["alice"]}"#,
            r#"json: cannot unmarshal array into Go struct field .identities of type map[string]*daemon.apiIdentity"#,
        ),
        (
            "identities",
            r#"{"action": "add", "identities": {"erin": {"access": "read", "local": {"user-id": -1}}}}"#,
            r#"json: cannot unmarshal number -1 into Go struct field apiLocalIdentity.identities.local.user-id of type uint32"#,
        ),
        (
            "identities",
            r#"{"identities": {"a": 5}}"#,
            r#"json: cannot unmarshal number into Go struct field .identities of type daemon.apiIdentity"#,
        ),
        (
            "identities",
            r#"{"identities": {"a": {"access": 5}}}"#,
            r#"json: cannot unmarshal number into Go struct field apiIdentity.identities.access of type identities.Access"#,
        ),
        (
            "identities",
            r#"{"identities": {"a": {"local": 1}}}"#,
            r#"json: cannot unmarshal number into Go struct field apiIdentity.identities.local of type daemon.apiLocalIdentity"#,
        ),
        (
            "identities",
            r#"{"identities": {"a": {"local": {"user-id": 4294967296}}}}"#,
            r#"json: cannot unmarshal number 4294967296 into Go struct field apiLocalIdentity.identities.local.user-id of type uint32"#,
        ),
        (
            "identities",
            r#"{"identities": {"a": {"basic": {"password": 1}}}}"#,
            r#"json: cannot unmarshal number into Go struct field apiBasicIdentity.identities.basic.password of type string"#,
        ),
        (
            "identities",
            r#"{"identities": {"a": {"cert": {"pem": []}}}}"#,
            r#"json: cannot unmarshal array into Go struct field apiCertIdentity.identities.cert.pem of type string"#,
        ),
        (
            "identities",
            r#"[]"#,
            r#"json: cannot unmarshal array into Go value of type struct { Action string "json:\"action\""; Identities map[string]*daemon.apiIdentity "json:\"identities\"" }"#,
        ),
        (
            "notices",
            r#"[1, 2]"#,
            r#"json: cannot unmarshal array into Go value of type struct { Action string "json:\"action\""; Type string "json:\"type\""; Key string "json:\"key\""; RepeatAfter string "json:\"repeat-after\""; DataJSON json.RawMessage "json:\"data\"" }"#,
        ),
        (
            "notices",
            r#"{"type": 7}"#,
            r#"json: cannot unmarshal number into Go struct field .type of type string"#,
        ),
        (
            "notices",
            r#"{"action": {"x": 1}}"#,
            r#"json: cannot unmarshal object into Go struct field .action of type string"#,
        ),
        (
            "notices",
            r#"{"repeat-after": 5}"#,
            r#"json: cannot unmarshal number into Go struct field .repeat-after of type string"#,
        ),
        (
            "notices",
            r#"{"data": 5, "key": 1}"#,
            r#"json: cannot unmarshal number into Go struct field .key of type string"#,
        ),
        (
            "files",
            r#"{"action": "make-dirs", "dirs": [{"path": 1}]}"#,
            r#"json: cannot unmarshal number into Go struct field makeDirsItem.dirs.path of type string"#,
        ),
        (
            "files",
            r#"{"dirs": {"path": "/x"}}"#,
            r#"json: cannot unmarshal object into Go struct field .dirs of type []daemon.makeDirsItem"#,
        ),
        (
            "files",
            r#"{"paths": [{"path": "/x", "recursive": "yes"}]}"#,
            r#"json: cannot unmarshal string into Go struct field removePathsItem.paths.recursive of type bool"#,
        ),
        (
            "files",
            r#"{"dirs": [{"user-id": "x"}]}"#,
            r#"json: cannot unmarshal string into Go struct field makeDirsItem.dirs.user-id of type int"#,
        ),
        (
            "files",
            r#"{"dirs": [{"make-parents": 1}]}"#,
            r#"json: cannot unmarshal number into Go struct field makeDirsItem.dirs.make-parents of type bool"#,
        ),
        (
            "files",
            r#"[]"#,
            r#"json: cannot unmarshal array into Go value of type struct { Action string "json:\"action\""; Dirs []daemon.makeDirsItem "json:\"dirs\""; Paths []daemon.removePathsItem "json:\"paths\"" }"#,
        ),
        (
            "write",
            r#"{"action": "write", "files": [{"path": 1}]}"#,
            r#"json: cannot unmarshal number into Go struct field writeFilesItem.files.path of type string"#,
        ),
        (
            "write",
            r#"{"files": [{"make-dirs": "x"}]}"#,
            r#"json: cannot unmarshal string into Go struct field writeFilesItem.files.make-dirs of type bool"#,
        ),
        (
            "write",
            r#"{"files": [{"group-id": -1.0}]}"#,
            r#"json: cannot unmarshal number -1.0 into Go struct field writeFilesItem.files.group-id of type int"#,
        ),
        (
            "write",
            r#"{"files": "x"}"#,
            r#"json: cannot unmarshal string into Go struct field .files of type []daemon.writeFilesItem"#,
        ),
        (
            "write",
            r#"7"#,
            r#"json: cannot unmarshal number into Go value of type struct { Action string "json:\"action\""; Files []daemon.writeFilesItem "json:\"files\"" }"#,
        ),
    ];
    for (endpoint, body, want) in cases {
        assert_eq!(
            decode_as(endpoint, body),
            Err(want.to_owned()),
            "{endpoint} {body}"
        );
    }
}

#[test]
fn what_go_accepts_decodes_to_what_go_decodes() {
    // Keys match fields ignoring case; the last of a repeated key wins; null leaves a string
    // as it was and empties a slice; a null element is the zero value; unknown keys are
    // ignored.
    let decoded = |body: &str| decode::<ServicesAction>(body.as_bytes()).unwrap();
    let services = |action: &str, services: &[&str]| ServicesAction {
        action: action.into(),
        services: services.iter().map(|s| s.to_string()).collect(),
    };
    let cases = [
        (
            r#"{"ACTION": "stop", "Services": ["a"]}"#,
            services("stop", &["a"]),
        ),
        (
            r#"{"action": "start", "action": "stop"}"#,
            services("stop", &[]),
        ),
        (
            r#"{"action": "start", "action": null}"#,
            services("start", &[]),
        ),
        (
            r#"{"services": ["a"], "services": null}"#,
            services("", &[]),
        ),
        (
            r#"{"services": ["a", null], "other": 5}"#,
            services("", &["a", ""]),
        ),
        ("null", services("", &[])),
    ];
    for (body, want) in cases {
        assert_eq!(decoded(body), want, "{body}");
    }

    // A repeated map key decodes into a new element each time.
    let exec: ExecRequest = decode(
        br#"{"environment": {"A": "1"}, "environment": {"B": "2", "A": null}, "Command": ["x"], "group-id": 5, "user-id": null}"#,
    )
    .unwrap();
    assert_eq!(
        exec.environment,
        [
            ("A".to_owned(), String::new()),
            ("B".to_owned(), "2".to_owned())
        ]
        .into()
    );
    assert_eq!(
        (exec.command, exec.user_id, exec.group_id),
        (vec!["x".into()], None, Some(5))
    );

    let identities: IdentitiesRequest = decode(
        br#"{"identities": {"a": null, "b": {"local": {"user-id": 4294967295}}, "b": {"access": "read"}}}"#,
    )
    .unwrap();
    assert_eq!(identities.identities["a"], None);
    let b = identities.identities["b"].as_ref().unwrap();
    assert_eq!((b.access.as_str(), b.local.is_none()), ("read", true));

    let notice: AddNoticeRequest = decode(br#"{"DATA": {"k": "v"}, "type": "custom"}"#).unwrap();
    // `json.RawMessage`: the value's text, as sent.
    assert_eq!(notice.data, Some(serde_json::json!(r#"{"k": "v"}"#)));
}

#[test]
fn strings_unquote_as_go_unquotes_them() {
    let action = |body: &[u8]| decode::<ChangeAction>(body).unwrap().action;
    assert_eq!(
        action(br#"{"action": "a\u00e9\ud83d\ude00\n"}"#),
        "a\u{e9}\u{1f600}\n"
    );
    // A lone surrogate, and each byte that is not UTF-8, is U+FFFD.
    assert_eq!(action(br#"{"action": "\ud800x"}"#), "\u{fffd}x");
    assert_eq!(
        action(b"{\"action\": \"\xf0\x90\x80A\"}"),
        "\u{fffd}\u{fffd}\u{fffd}A"
    );
}
