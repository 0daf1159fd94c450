use proptest::prelude::*;

use super::*;
use crate::state::CarriedState;

const STOPPED: &str =
    include_str!("../../../../../cobble/tests/fixtures/state/pebble-v1.32.1-stopped.json");
const KILLED: &str =
    include_str!("../../../../../cobble/tests/fixtures/state/pebble-v1.32.1-killed.json");
const V1_12: &str =
    include_str!("../../../../../cobble/tests/fixtures/state/pebble-v1.12.0-stopped.json");
const V1_15_SHAPE: &str =
    include_str!("../../../../../cobble/tests/fixtures/state/pebble-v1.15-shape.json");

/// Everything a state holds, comparable: cobble's own fields in their journal shape, and
/// what is carried.
fn view(d: &StateData) -> (Value, CarriedState) {
    (serde_json::to_value(d).unwrap(), d.carried.clone())
}

fn round_trip(d: &StateData) -> StateData {
    decode(&encode(d)).expect("what cobble writes reads back")
}

#[test]
fn reads_what_pebble_v1_32_wrote() {
    let d = decode(STOPPED.as_bytes()).unwrap();
    assert_eq!(
        (d.last_change_id, d.last_task_id, d.last_notice_id),
        (5, 5, 6)
    );
    let kinds: Vec<&str> = d.changes.values().map(|c| c.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "perform-check",
            "autostart",
            "recover-check",
            "exec",
            "stop"
        ]
    );
    let autostart = &d.changes[&2];
    assert_eq!(autostart.service_names, ["svc"]);
    assert_eq!(autostart.last_notice_status, Some(TaskStatus::Done));
    assert_eq!(d.changes[&1].check_name.as_deref(), Some("chk"));
    assert_eq!(d.tasks[&1].status, TaskStatus::Error);
    assert_eq!(
        d.tasks[&1].log,
        ["2026-12-01T20:47:46Z ERROR exit status 1"]
    );
    assert_eq!(d.tasks[&2].service.as_deref(), Some("svc"));
    assert_eq!(d.tasks[&4].data["exit-code"], 0);
    let custom = &d.notices[&4];
    assert_eq!(
        (custom.kind, custom.key.as_str()),
        (NoticeType::Custom, "example.com/thing")
    );
    assert_eq!((custom.user_id, custom.occurrences), (Some(0), 2));
    assert_eq!(custom.repeat_after, Duration::from_secs(3600));
    assert_eq!(custom.expire_after, Duration::from_secs(7 * 24 * 3600));
    assert_eq!(custom.last_data["k"], "v2");
    assert_eq!(d.identities["alice"].access, Access::Admin);
    assert_eq!(d.identities["alice"].local, Some(1000));
    assert_eq!(d.identities["bob"].basic.as_deref(), Some("$6$abc$xyz"));
    assert!(!d.carried.legacy_identities);
    // What cobble does not use is kept.
    assert!(
        !d.carried.data.contains_key("patch-level"),
        "level 2 is what cobble writes anyway"
    );
    assert!(d.carried.data.contains_key("start-of-operation-time"));
    assert_eq!(d.carried.fields["last-lane-id"], 2);
    let start = d.tasks[&2].carried.as_ref().unwrap();
    assert_eq!(start.fields["lanes"], serde_json::json!([1]));
    assert_eq!(start.data["started"], true);
    assert!(
        d.tasks[&1]
            .carried
            .as_ref()
            .unwrap()
            .data
            .contains_key("check-details")
    );
}

#[test]
fn reads_a_killed_pebble_with_a_certificate_identity() {
    let d = decode(KILLED.as_bytes()).unwrap();
    assert_eq!(d.identities["certy"].access, Access::Metrics);
    assert!(
        d.identities["certy"]
            .cert
            .as_ref()
            .is_some_and(|der| der.len() > 100)
    );
    assert_eq!(d.tasks[&3].status, TaskStatus::Doing);
    let back = round_trip(&d);
    assert_eq!(back.identities, d.identities);
}

#[test]
fn reads_pebble_v1_12_and_keeps_its_patch_level() {
    let d = decode(V1_12.as_bytes()).unwrap();
    assert_eq!(d.carried.data["patch-level"], 1);
    assert!(!d.notices.is_empty());
    let written: Value = serde_json::from_slice(&encode(&d)).unwrap();
    assert_eq!(
        written["data"]["patch-level"], 1,
        "the release it came from still reads it"
    );
}

#[test]
fn reads_legacy_warnings_and_top_level_identities() {
    let d = decode(V1_15_SHAPE.as_bytes()).unwrap();
    assert_eq!(d.identities["ops"].local, Some(1000));
    assert!(d.carried.legacy_identities);
    assert_eq!(d.carried.identities["ops"]["future-field"], 1);
    let warning = d
        .notices
        .values()
        .find(|n| n.kind == NoticeType::Warning)
        .unwrap();
    assert_eq!(warning.key, "disk almost full");
    assert_eq!(warning.id, 5, "after the last notice ID");
    assert_eq!(d.last_notice_id, 5);
    assert_eq!(warning.expire_after, Duration::from_secs(672 * 3600));
    // The unknown notice type, the orphan task, the change with an explicit status.
    assert_eq!(d.carried.notices.len(), 1);
    assert!(!d.tasks.contains_key(&10));
    assert_eq!(d.changes[&8].status_without_tasks, TaskStatus::Done);
    assert_eq!(
        d.changes[&7].spawn_time.to_string(),
        "2024-03-01T09:00:01.25Z"
    );
    assert_eq!(d.tasks[&9].data["exit-code"], 2);
    assert_eq!(
        d.carried.fields["some-future-field"],
        serde_json::json!([1, 2])
    );
    assert_eq!(d.carried.data["some-future-entry"]["kept"], true);
    // Written back: identities in both places Pebble looks, everything carried.
    let written: Value = serde_json::from_slice(&encode(&d)).unwrap();
    assert_eq!(written["identities"]["ops"]["local"]["user-id"], 1000);
    assert_eq!(written["data"]["identities"]["ops"]["future-field"], 1);
    assert_eq!(
        written["tasks"]["9"]["data"]["exec-setup"]["command"][0],
        "ls"
    );
    assert_eq!(written["tasks"]["9"]["doing-time"], 1234);
    assert_eq!(written["changes"]["8"]["status"], 4);
    assert_eq!(written["notices"].as_array().unwrap().len(), 3);
    assert_eq!(written["last-lane-id"], 3);
    assert!(written.get("warnings").is_none());
}

#[test]
fn pebble_fixtures_round_trip_unchanged() {
    for fixture in [STOPPED, KILLED, V1_12, V1_15_SHAPE] {
        let d = decode(fixture.as_bytes()).unwrap();
        assert_eq!(view(&round_trip(&d)), view(&d));
    }
}

#[test]
fn writes_what_pebble_needs_for_cobbles_own_records() {
    let mut d = StateData {
        last_change_id: 2,
        last_task_id: 2,
        ..Default::default()
    };
    let at = Timestamp::from_second(1_700_000_000).unwrap();
    let change = |id, kind: &str, check: Option<&str>| Change {
        id,
        kind: kind.into(),
        summary: "s".into(),
        task_ids: vec![id],
        spawn_time: at,
        ready_time: None,
        service_names: if check.is_none() {
            vec!["svc".into()]
        } else {
            vec![]
        },
        status_without_tasks: TaskStatus::Hold,
        check_name: check.map(str::to_owned),
        last_notice_status: Some(TaskStatus::Doing),
        carried: None,
    };
    let task = |id, kind: &str, service: Option<&str>| Task {
        id,
        change_id: id,
        kind: kind.into(),
        summary: "s".into(),
        status: TaskStatus::Doing,
        log: vec![],
        spawn_time: at,
        ready_time: None,
        service: service.map(str::to_owned),
        data: SmallMap::new(),
        carried: None,
    };
    d.changes.insert(1, change(1, "start", None));
    d.tasks.insert(1, task(1, "start", Some("svc")));
    d.changes.insert(2, change(2, "perform-check", Some("chk")));
    d.tasks.insert(2, task(2, "perform-check", None));
    let written: Value = serde_json::from_slice(&encode(&d)).unwrap();
    assert_eq!(
        written["tasks"]["1"]["data"]["service-request"]["Name"],
        "svc"
    );
    assert_eq!(written["tasks"]["1"]["status"], 3);
    assert_eq!(
        written["tasks"]["2"]["data"]["check-details"]["name"],
        "chk"
    );
    assert_eq!(
        written["changes"]["2"]["data"]["notice-data"]["check-name"],
        "chk"
    );
    assert_eq!(written["changes"]["1"]["data"]["service-names"][0], "svc");
    assert_eq!(written["changes"]["1"]["task-ids"][0], "1");
    assert_eq!(written["changes"]["1"]["last-recorded-notice-status"], 3);
    assert_eq!(written["data"]["patch-level"], PATCH_LEVEL);
    assert_eq!(written["last-change-id"], 2);
    assert_eq!(view(&round_trip(&d)), view(&d));
}

#[test]
fn refuses_what_it_cannot_read() {
    for (bytes, wanted) in [
        (&b"not json"[..], "expected"),
        (b"[1,2]", "not a JSON object"),
        (
            b"{\"data\":{\"patch-level\":3}}",
            "newer Pebble (patch level 3",
        ),
        (
            b"{\"changes\":{\"x\":{\"id\":\"x\"}}}",
            "change ID \"x\" is not a number",
        ),
        (
            b"{\"tasks\":{\"1\":{\"id\":\"1\",\"status\":42}}}",
            "unknown status 42",
        ),
        (
            b"{\"data\":{\"identities\":{\"a\":{\"access\":\"root\"}}}}",
            "identity \"a\": unknown access \"root\"",
        ),
    ] {
        let err = decode(bytes).map(|_| ()).unwrap_err().to_string();
        assert!(err.contains(wanted), "{err}");
    }
}

#[test]
fn reads_the_shape_of_earlier_cobble_releases() {
    let old = r#"{"last_change_id":3,"last_task_id":4,"changes":{},"tasks":{},"last_notice_id":2,"notices":{},"generation":7}"#;
    let d = decode(old.as_bytes()).unwrap();
    assert_eq!(
        (
            d.last_change_id,
            d.last_task_id,
            d.last_notice_id,
            d.generation
        ),
        (3, 4, 2, 7)
    );
}

fn timestamp() -> impl Strategy<Value = Timestamp> {
    (0i64..4_000_000_000, 0i32..1_000_000_000).prop_map(|(s, n)| Timestamp::new(s, n).unwrap())
}

fn status() -> impl Strategy<Value = TaskStatus> {
    prop_oneof![
        Just(TaskStatus::Default),
        Just(TaskStatus::Hold),
        Just(TaskStatus::Do),
        Just(TaskStatus::Doing),
        Just(TaskStatus::Done),
        Just(TaskStatus::Abort),
        Just(TaskStatus::Undo),
        Just(TaskStatus::Undoing),
        Just(TaskStatus::Undone),
        Just(TaskStatus::Error),
        Just(TaskStatus::Wait),
    ]
}

fn text() -> impl Strategy<Value = String> {
    "[a-z\"\\\\ é\n-]{0,12}"
}

prop_compose! {
    fn change_and_tasks(id: u64)(
        kind in text(),
        summary in text(),
        spawn in timestamp(),
        ready in proptest::option::of(timestamp()),
        services in proptest::collection::vec(text(), 0..3),
        check in proptest::option::of(text()),
        without in status(),
        notice in proptest::option::of(status()),
        tasks in proptest::collection::vec(
            (text(), status(), proptest::collection::vec(text(), 0..3), proptest::option::of(text()),
             proptest::option::of(0i64..1000), timestamp()),
            0..3),
    ) -> (Change, Vec<Task>) {
        let task_ids: Vec<u64> = (0..tasks.len() as u64).map(|i| id * 10 + i).collect();
        let change = Change {
            id,
            kind,
            summary,
            task_ids: task_ids.clone(),
            spawn_time: spawn,
            ready_time: ready,
            service_names: services,
            // Pebble's Default means Hold for a change without tasks; with tasks the
            // status is theirs.
            status_without_tasks: if task_ids.is_empty() && without != TaskStatus::Default { without } else { TaskStatus::Hold },
            check_name: check,
            last_notice_status: notice.filter(|s| *s != TaskStatus::Default),
            carried: None,
        };
        let tasks = tasks.into_iter().zip(task_ids).map(|((kind, status, log, service, exit, spawn), tid)| {
            let mut data = SmallMap::new();
            if let Some(code) = exit {
                data.insert("exit-code".into(), Value::from(code));
            }
            Task {
                id: tid,
                change_id: id,
                kind,
                summary: "t".into(),
                status,
                log,
                spawn_time: spawn,
                ready_time: None,
                service,
                data,
                carried: None,
            }
        }).collect();
        (change, tasks)
    }
}

prop_compose! {
    fn notice(id: u64)(
        user in proptest::option::of(any::<u32>()),
        kind in prop_oneof![Just(NoticeType::Custom), Just(NoticeType::Warning), Just(NoticeType::ChangeUpdate)],
        key in text(),
        times in (timestamp(), timestamp(), timestamp()),
        occurrences in 1u64..100,
        data in proptest::collection::btree_map(text(), text(), 0..3),
        repeat in 0u64..100_000_000_000,
        expire in 1u64..100_000_000_000,
    ) -> Notice {
        Notice {
            id,
            user_id: user,
            kind,
            key,
            first_occurred: times.0,
            last_occurred: times.1,
            last_repeated: times.2,
            occurrences,
            last_data: data.into(),
            repeat_after: Duration::from_nanos(repeat),
            expire_after: Duration::from_nanos(expire),
            changed_at: 0,
        }
    }
}

fn identity() -> impl Strategy<Value = Identity> {
    (
        prop_oneof![
            Just(Access::Admin),
            Just(Access::Read),
            Just(Access::Metrics),
            Just(Access::Untrusted)
        ],
        proptest::option::of(any::<u32>()),
        proptest::option::of("\\$6\\$[a-z]{1,8}\\$[a-zA-Z0-9./]{1,20}"),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 1..64)),
    )
        .prop_map(|(access, local, basic, cert)| Identity {
            access,
            local,
            basic,
            cert,
        })
}

fn state() -> impl Strategy<Value = StateData> {
    (
        proptest::collection::vec(1u64..50, 0..6),
        proptest::collection::vec(1u64..50, 0..6),
        proptest::collection::btree_map("[a-z][a-z0-9-]{0,8}", identity(), 0..3),
        0u64..1000,
    )
        .prop_flat_map(|(change_ids, notice_ids, identities, generation)| {
            let changes: Vec<_> = change_ids.into_iter().map(change_and_tasks).collect();
            let notices: Vec<_> = notice_ids.into_iter().map(notice).collect();
            (changes, notices, Just(identities), Just(generation))
        })
        .prop_map(|(changes, notices, identities, generation)| {
            let mut d = StateData {
                identities,
                generation,
                ..Default::default()
            };
            for (change, tasks) in changes {
                for task in tasks {
                    d.tasks.insert(task.id, task);
                }
                d.changes.insert(change.id, change);
            }
            for n in notices {
                d.notices.insert(n.id, n);
            }
            d.last_change_id = d.changes.keys().max().copied().unwrap_or(0) + 1;
            d.last_task_id = d.tasks.keys().max().copied().unwrap_or(0) + 3;
            d.last_notice_id = d.notices.keys().max().copied().unwrap_or(0);
            d
        })
}

proptest! {
    #[test]
    fn any_state_cobble_writes_reads_back_identically(d in state()) {
        let back = round_trip(&d);
        prop_assert_eq!(view(&back), view(&d));
        // And what it writes then is the same bytes.
        prop_assert_eq!(encode(&back), encode(&d));
    }
}
