use std::collections::BTreeMap;
use std::time::Duration;

use cobble_client::types::ChangeInfo;
use jiff::Timestamp;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::persist::COALESCE_WINDOW;
use super::*;

fn store() -> StateStore {
    StateStore::new(StateData::default())
}

#[test]
fn ids_are_strings_and_count_up() {
    let s = store();
    let a = s.new_change("start", "Start service \"a\"", vec!["a".into()]);
    let b = s.new_change("stop", "Stop service \"a\"", vec!["a".into()]);
    assert_eq!((a, b), (1, 2));
    assert_eq!(s.change_info(b).unwrap().id, "2");
}

#[test]
fn change_status_follows_task_priorities() {
    let s = store();
    let c = s.new_change("start", "x", vec![]);
    assert_eq!(s.change_info(c).unwrap().status, "Hold", "no tasks yet");
    let t1 = s.add_task(c, "start", "Start service \"a\"", Some("a"));
    let t2 = s.add_task(c, "start", "Start service \"b\"", Some("b"));
    assert_eq!(s.change_info(c).unwrap().status, "Do");
    s.set_task_status(t1, TaskStatus::Doing);
    assert_eq!(s.change_info(c).unwrap().status, "Doing");
    s.set_task_status(t1, TaskStatus::Error);
    assert_eq!(s.change_info(c).unwrap().status, "Do", "Do outranks Error");
    s.set_task_status(t2, TaskStatus::Hold);
    let info = s.change_info(c).unwrap();
    assert_eq!(info.status, "Error");
    assert!(info.ready);
    assert!(info.ready_time.is_some());
    assert_eq!(info.tasks[0].progress.done, 1);
}

#[test]
fn err_lists_every_error_entry_with_its_task_summary() {
    let s = store();
    let c = s.new_change("start", "Start service \"a\"", vec![]);
    let t = s.add_task(c, "start", "Start service \"a\"", Some("a"));
    s.task_info(t, "Most recent service output:\n    boom");
    s.task_error(
        t,
        "service start attempt: exited quickly with code 1, will restart",
    );
    s.set_task_status(t, TaskStatus::Error);
    let info = s.change_info(c).unwrap();
    assert_eq!(
        info.err,
        "cannot perform the following tasks:\n- Start service \"a\" (service start attempt: exited quickly with code 1, will restart)"
    );
    assert_eq!(info.tasks[0].log.len(), 2);
    assert!(info.tasks[0].log[0].contains(" INFO Most recent service output:"));
    assert!(info.tasks[0].log[1].contains(" ERROR service start attempt"));
}

#[test]
fn task_log_keeps_the_last_ten_entries() {
    let s = store();
    let c = s.new_change("start", "x", vec![]);
    let t = s.add_task(c, "start", "x", None);
    for i in 0..15 {
        s.task_info(t, &format!("entry {i}"));
    }
    let log = &s.change_info(c).unwrap().tasks[0].log;
    assert_eq!(log.len(), MAX_TASK_LOG);
    assert!(log[0].ends_with("entry 5"));
    assert!(log[9].ends_with("entry 14"));
}

#[test]
fn a_failed_task_is_in_error_with_its_error_logged() {
    let s = store();
    let c = s.new_change("start", "Start service \"web\"", vec![]);
    let t = s.add_task(c, "start", "Start service \"web\"", Some("web"));
    s.set_task_status(t, TaskStatus::Doing);
    s.fail_task(
        t,
        "service start attempt: exited quickly with code 3, will restart",
    );
    assert_eq!(s.task_status(t), Some(TaskStatus::Error));
    let info = s.change_info(c).unwrap();
    assert_eq!(info.status, "Error");
    assert!(
        info.tasks[0]
            .log
            .last()
            .unwrap()
            .ends_with(" ERROR service start attempt: exited quickly with code 3, will restart"),
        "{:?}",
        info.tasks[0].log
    );
}

#[test]
fn select_and_for_filters() {
    let s = store();
    let a = s.new_change("start", "a", vec!["a".into()]);
    let ta = s.add_task(a, "start", "a", Some("a"));
    let b = s.new_change("start", "b", vec!["b".into()]);
    s.add_task(b, "start", "b", Some("b"));
    s.set_task_status(ta, TaskStatus::Done);
    let ids = |v: Vec<ChangeInfo>| v.into_iter().map(|c| c.id).collect::<Vec<_>>();
    assert_eq!(ids(s.changes(Select::All, None)), ["1", "2"]);
    assert_eq!(ids(s.changes(Select::Ready, None)), ["1"]);
    assert_eq!(ids(s.changes(Select::InProgress, None)), ["2"]);
    assert_eq!(ids(s.changes(Select::All, Some("b"))), ["2"]);
    assert!(s.changes(Select::All, Some("zzz")).is_empty());
}

#[test]
fn a_listing_serialises_as_the_rendered_changes() {
    let s = store();
    let a = s.new_change("exec", "Execute command \"echo\"", vec![]);
    let ta = s.add_task(a, "exec", "Execute command \"echo\"", None);
    s.set_task_data(ta, "exit-code", 0.into());
    s.task_error(ta, "boom");
    s.set_task_status(ta, TaskStatus::Error);
    let b = s.new_change("start", "b", vec!["b".into()]);
    s.add_task(b, "start", "b", Some("b"));
    s.new_done_change("replan", "nothing");
    for (select, service) in [
        (Select::All, None),
        (Select::Ready, None),
        (Select::InProgress, None),
        (Select::All, Some("b")),
        (Select::All, Some("zzz")),
    ] {
        let rendered = serde_json::to_string(&s.changes(select, service)).unwrap();
        let listed = serde_json::to_string(&s.changes_listing(select, service)).unwrap();
        assert_eq!(listed, rendered, "{select:?} {service:?}");
    }
    let all = serde_json::to_value(s.changes_listing(Select::All, None)).unwrap();
    assert_eq!(all.as_array().map(Vec::len), Some(3));
}

#[test]
fn abort_holds_pending_tasks_and_cancels_runners() {
    let s = store();
    let c = s.new_change("start", "x", vec![]);
    let t1 = s.add_task(c, "start", "a", None);
    let t2 = s.add_task(c, "start", "b", None);
    s.set_task_status(t1, TaskStatus::Doing);
    let token = s.abort_token(c);
    let info = s.abort(c).unwrap();
    assert_eq!(info.status, "Abort");
    assert!(token.is_cancelled());
    assert_eq!(s.task_status(t2), Some(TaskStatus::Hold));
    s.task_error(t1, "start aborted, sent SIGKILL to process");
    s.set_task_status(t1, TaskStatus::Error);
    assert!(s.change_info(c).unwrap().ready);
    assert_eq!(s.abort(c), Err(StateError::NothingPending(c)));
    assert_eq!(s.abort(99), Err(StateError::NoSuchChange("99".into())));
}

#[test]
fn done_change_without_tasks() {
    let s = store();
    let c = s.new_done_change("replan", "Replan - no services");
    let info = s.change_info(c).unwrap();
    assert_eq!(info.status, "Done");
    assert!(info.ready);
    assert!(info.tasks.is_empty());
}

#[test]
fn reload_keeps_ids_and_closes_unfinished_changes() {
    let s = store();
    let c = s.new_change("start", "x", vec![]);
    let t1 = s.add_task(c, "start", "a", None);
    let t2 = s.add_task(c, "start", "b", None);
    s.set_task_status(t1, TaskStatus::Doing);
    let bytes = s.snapshot_json();
    let data: StateData = format::decode(&bytes).unwrap();
    let s2 = StateStore::new(data);
    assert_eq!(s2.task_status(t1), Some(TaskStatus::Done));
    assert_eq!(s2.task_status(t2), Some(TaskStatus::Hold));
    assert!(s2.change_info(c).unwrap().ready);
    assert_eq!(s2.new_change("stop", "y", vec![]), c + 1);
}

#[test]
fn prune_drops_old_ready_changes_and_caps_the_count() {
    let s = store();
    for _ in 0..(MAX_READY_CHANGES + 5) {
        let c = s.new_change("start", "x", vec![]);
        let t = s.add_task(c, "start", "x", None);
        s.set_task_status(t, TaskStatus::Done);
    }
    let pending = s.new_change("start", "pending", vec![]);
    s.add_task(pending, "start", "x", None);
    s.prune(Timestamp::now());
    assert_eq!(s.changes(Select::Ready, None).len(), MAX_READY_CHANGES);
    assert!(s.change_info(1).is_none(), "oldest ready change dropped");
    assert!(s.change_info(pending).is_some());
    // Eight days on, every ready change has expired; the pending one is kept until 14 days.
    s.prune(Timestamp::now() + jiff::SignedDuration::from_hours(8 * 24));
    assert!(s.changes(Select::Ready, None).is_empty());
    assert!(!s.change_info(pending).unwrap().ready);
    s.prune(Timestamp::now() + jiff::SignedDuration::from_hours(15 * 24));
    assert!(
        s.change_info(pending).unwrap().ready,
        "aborted after 14 days"
    );
}

#[test]
fn state_file_is_replaced_whole_and_private() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".pebble.state");
    persist::write_state_file(&path, b"{}").unwrap();
    let s = store();
    s.new_change("start", "x", vec![]);
    persist::write_state_file(&path, &s.snapshot_json()).unwrap();
    let loaded = load(&path).unwrap();
    assert_eq!(loaded.last_change_id, 1);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != ".pebble.state")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
}

/// Waits for the persister's write count to reach `n`.
async fn writes_reach(writes: &mut watch::Receiver<u64>, n: u64) {
    writes
        .wait_for(|&count| count >= n)
        .await
        .expect("persister running");
}

#[tokio::test(start_paused = true)]
async fn persister_coalesces_bursts_into_one_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".pebble.state");
    let s = store();
    let cancel = CancellationToken::new();
    let persister = Persister::new(s.clone(), path.clone());
    let mut writes = persister.writes();
    let task = tokio::spawn(persister.run(cancel.clone()));
    tokio::task::yield_now().await;

    // Mutations spread over less than one window, the persister free to run between them:
    // one write, holding all of them.
    let burst = |s: &StateStore| {
        let s = s.clone();
        async move {
            for _ in 0..10 {
                s.new_change("start", "x", vec![]);
                tokio::time::sleep(COALESCE_WINDOW / 20).await;
            }
        }
    };
    burst(&s).await;
    writes_reach(&mut writes, 1).await;
    assert_eq!(*writes.borrow(), 1, "one write per burst");
    assert_eq!(load(&path).unwrap().changes.len(), 10);

    // Quiet for many windows: nothing to write. A second burst: one more write.
    tokio::time::sleep(COALESCE_WINDOW * 20).await;
    burst(&s).await;
    writes_reach(&mut writes, 2).await;
    assert_eq!(load(&path).unwrap().changes.len(), 20);

    // Nothing changed since, so shutdown writes only to fold the journal into the state
    // file. Once the persister has ended, every write it began is counted: any write beyond
    // one per burst and that one shows here.
    cancel.cancel();
    task.await.unwrap();
    assert_eq!(*writes.borrow(), 3);
    let folded: StateData = format::decode(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(
        folded.changes.len(),
        20,
        "the state file alone holds everything"
    );
}

#[test]
fn prune_never_aborts_a_long_running_check_change() {
    let s = store();
    let check = s.new_change("perform-check", "Perform exec check \"c\"", vec![]);
    let task = s.add_task(check, "perform-check", "Perform exec check \"c\"", None);
    s.set_task_status(task, TaskStatus::Doing);
    s.prune(Timestamp::now() + jiff::SignedDuration::from_hours(30 * 24));
    assert_eq!(s.change_info(check).unwrap().status, "Doing");
}

#[test]
fn task_data_is_shown_and_kept_across_a_reload() {
    let s = store();
    let c = s.new_change("exec", "Execute command \"true\"", vec![]);
    let t = s.add_task(c, "exec", "Execute command \"true\"", None);
    assert_eq!(s.change_info(c).unwrap().tasks[0].data, None, "no data yet");
    s.set_task_data(t, "exit-code", serde_json::json!(3));
    let data = s.change_info(c).unwrap().tasks[0].data.clone().unwrap();
    assert_eq!(data["exit-code"], 3);
    let reloaded: StateData = format::decode(&s.snapshot_json()).unwrap();
    assert_eq!(reloaded.tasks[&t].data["exit-code"], 3);
    assert_eq!(s.task_kind(t), Some(("exec".to_owned(), c)));
}

/// A running persister on a fresh store, and its write count.
fn persisted(dir: &std::path::Path) -> (StateStore, watch::Receiver<u64>, CancellationToken) {
    let s = store();
    let cancel = CancellationToken::new();
    let persister = Persister::new(s.clone(), dir.join(".pebble.state"));
    let writes = persister.writes();
    tokio::spawn(persister.run(cancel.clone()));
    (s, writes, cancel)
}

#[tokio::test(start_paused = true)]
async fn a_waiting_request_is_released_only_once_its_change_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let (s, writes, _cancel) = persisted(dir.path());
    tokio::task::yield_now().await;
    let id = s.new_change("start", "x", vec![]);
    s.durable().await.expect("durable");
    let on_disk = load(&dir.path().join(".pebble.state")).unwrap();
    assert!(on_disk.changes.contains_key(&id));
    assert_eq!(on_disk.last_change_id, id);
    assert_eq!(*writes.borrow(), 1);
}

#[tokio::test(start_paused = true)]
async fn many_waiting_requests_share_one_write() {
    let dir = tempfile::tempdir().unwrap();
    let (s, writes, _cancel) = persisted(dir.path());
    tokio::task::yield_now().await;
    let requests: Vec<_> = (0..50)
        .map(|_| {
            let s = s.clone();
            tokio::spawn(async move {
                let id = s.new_change("start", "x", vec![]);
                s.durable().await.expect("durable");
                id
            })
        })
        .collect();
    let mut ids = Vec::new();
    for request in requests {
        ids.push(request.await.unwrap());
    }
    let on_disk = load(&dir.path().join(".pebble.state")).unwrap();
    assert!(ids.iter().all(|id| on_disk.changes.contains_key(id)));
    assert_eq!(*writes.borrow(), 1, "one write for the whole batch");
}

#[tokio::test(start_paused = true)]
async fn ids_already_written_need_no_write() {
    let dir = tempfile::tempdir().unwrap();
    let (s, writes, _cancel) = persisted(dir.path());
    tokio::task::yield_now().await;
    let change = s.new_change("start", "x", vec![]);
    let task = s.add_task(change, "start", "x", None);
    s.durable().await.expect("durable");
    assert_eq!(*writes.borrow(), 1);
    // Progress that shows no new ID: a reader does not wait, and nothing is written early.
    s.set_task_status(task, TaskStatus::Doing);
    s.durable_ids().await;
    assert_eq!(*writes.borrow(), 1);
}

#[tokio::test]
async fn without_a_persister_nobody_waits() {
    let s = store();
    s.new_change("start", "x", vec![]);
    s.durable().await.expect("durable");
    s.durable_ids().await;
}

/// What the state file alone holds, without its journal.
fn state_file_alone(path: &std::path::Path) -> StateData {
    format::decode(&std::fs::read(path).unwrap()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_durable_change_is_appended_to_the_journal_not_rewritten_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".pebble.state");
    let s = store();
    let before = s.new_change("start", "before", vec![]);
    let cancel = CancellationToken::new();
    let mut persister = Persister::new(s.clone(), path.clone());
    persister.flush().await.unwrap();
    let writes = persister.writes();
    tokio::spawn(persister.run(cancel.clone()));
    tokio::task::yield_now().await;

    let change = s.new_change("exec", "x", vec![]);
    let task = s.add_task(change, "exec", "x", None);
    s.durable().await.expect("durable");
    assert_eq!(*writes.borrow(), 2);
    let alone = state_file_alone(&path);
    assert_eq!(alone.changes.keys().collect::<Vec<_>>(), [&before]);
    let loaded = load(&path).unwrap();
    assert_eq!(loaded.changes[&change].task_ids, [task]);
    assert_eq!(loaded.tasks[&task].status, TaskStatus::Do);
    assert_eq!((loaded.last_change_id, loaded.last_task_id), (change, task));

    // Later records replace the whole change, tasks included.
    s.set_task_status(task, TaskStatus::Done);
    s.set_task_data(task, "exit-code", serde_json::json!(0));
    s.durable().await.expect("durable");
    let loaded = load(&path).unwrap();
    assert_eq!(loaded.tasks[&task].status, TaskStatus::Done);
    assert_eq!(loaded.tasks[&task].data["exit-code"], 0);
    assert!(loaded.changes[&change].ready_time.is_some());
    assert_eq!(
        state_file_alone(&path).changes.len(),
        1,
        "still not rewritten"
    );
}

#[tokio::test(start_paused = true)]
async fn pruned_changes_stay_gone_after_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".pebble.state");
    let s = store();
    let mut persister = Persister::new(s.clone(), path.clone());
    persister.flush().await.unwrap();
    tokio::spawn(persister.run(CancellationToken::new()));
    let old = s.new_change("start", "old", vec![]);
    let t = s.add_task(old, "start", "old", None);
    s.set_task_status(t, TaskStatus::Done);
    let kept = s.new_change("start", "kept", vec![]);
    s.add_task(kept, "start", "kept", None);
    s.durable().await.expect("durable");
    s.prune(Timestamp::now() + jiff::SignedDuration::from_hours(8 * 24));
    s.durable().await.expect("durable");
    let loaded = load(&path).unwrap();
    assert!(!loaded.changes.contains_key(&old));
    assert!(!loaded.tasks.contains_key(&t));
    assert!(loaded.changes.contains_key(&kept));
}

#[tokio::test(start_paused = true)]
async fn a_large_journal_is_folded_into_the_state_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".pebble.state");
    let s = store();
    let mut persister = Persister::new(s.clone(), path.clone());
    persister.flush().await.unwrap();
    tokio::spawn(persister.run(CancellationToken::new()));
    let journal = dir.path().join(".pebble.state.journal");
    let big = "x".repeat(64 * 1024);
    let mut ids = Vec::new();
    let mut folded = false;
    for _ in 0..40 {
        ids.push(s.new_change("start", &big, vec![]));
        s.durable().await.expect("durable");
        if state_file_alone(&path).changes.len() == ids.len() {
            folded = true;
            break;
        }
    }
    assert!(folded, "the state file was never rewritten whole");
    assert!(
        std::fs::metadata(&journal).map_or(0, |m| m.len()) < 100,
        "the old journal is gone, a fresh one holds no record yet"
    );
    let loaded = load(&path).unwrap();
    assert!(ids.iter().all(|id| loaded.changes.contains_key(id)));
}

/// The files a daemon killed with SIGKILL leaves: a state file holding one change and an
/// identity, and a journal of three records after it, one acknowledged change each. Returns
/// the state file's path, the change in the state file and the three in the journal.
async fn killed_daemon(dir: &std::path::Path) -> (std::path::PathBuf, u64, [u64; 3]) {
    use crate::identities::{Access, Action, Identity};
    let path = dir.join(".pebble.state");
    let s = store();
    let first = s.new_change("start", "in the state file", vec![]);
    s.mutate(|d| {
        d.apply_identities(
            Action::Add,
            BTreeMap::from([(
                "ops".to_owned(),
                Some(Identity {
                    access: Access::Admin,
                    local: Some(1000),
                    basic: None,
                    cert: None,
                }),
            )]),
        )
    })
    .unwrap();
    let mut persister = Persister::new(s.clone(), path.clone());
    persister.flush().await.unwrap();
    let run = tokio::spawn(persister.run(CancellationToken::new()));
    let mut journaled = [0; 3];
    for id in &mut journaled {
        *id = s.new_change("start", "in the journal", vec![]);
        s.durable().await.expect("durable");
    }
    // Killed: no last write.
    run.abort();
    let _ = run.await;
    (path, first, journaled)
}

fn change_ids(d: &StateData) -> Vec<u64> {
    d.changes.keys().copied().collect()
}

fn load_error(path: &std::path::Path) -> String {
    load(path).map(|_| ()).unwrap_err().to_string()
}

#[tokio::test(start_paused = true)]
async fn an_intact_journal_is_replayed_and_a_superseded_one_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let (path, first, [a, b, c]) = killed_daemon(dir.path()).await;
    let loaded = load(&path).unwrap();
    assert_eq!(change_ids(&loaded), [first, a, b, c]);
    assert!(loaded.identities.contains_key("ops"));
    // A checkpoint that a crash cut off before it removed the older journal: the state
    // file names a later generation, and the older journal is ignored.
    let mut newer = format::decode(&std::fs::read(&path).unwrap()).unwrap();
    newer.generation += 1;
    newer.changes.clear();
    persist::write_state_file(&path, &format::encode(&newer)).unwrap();
    assert!(load(&path).unwrap().changes.is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_emptied_state_file_stops_the_daemon_with_what_was_lost_and_how_to_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _, [a, b, c]) = killed_daemon(dir.path()).await;
    std::fs::write(&path, b"").unwrap();
    let err = load_error(&path);
    assert!(
        err.contains(&format!(
            "cannot load state file {}: it is empty",
            path.display()
        )),
        "{err}"
    );
    assert!(
        err.contains("held 1 change, 1 notice and 1 identity"),
        "{err}"
    );
    assert!(
        err.contains(&format!("mv {0} {0}.damaged", path.display())),
        "{err}"
    );
    // Garbage in its place is refused the same way.
    std::fs::write(&path, b"\x00\x17garbage").unwrap();
    assert!(load_error(&path).contains("it cannot be parsed"));
    // Moved aside as told: the journal's changes, and no ID given again.
    std::fs::rename(&path, dir.path().join("aside")).unwrap();
    let loaded = load(&path).unwrap();
    assert_eq!(change_ids(&loaded), [a, b, c]);
    assert_eq!(loaded.last_change_id, c);
}

#[tokio::test(start_paused = true)]
async fn a_damaged_journal_stops_the_daemon_naming_the_record_and_how_to_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let (path, first, [a, b, _]) = killed_daemon(dir.path()).await;
    let journal = journal::path_for(&path);
    let bytes = std::fs::read(&journal).unwrap();
    let starts: Vec<usize> = std::iter::once(0)
        .chain(
            bytes
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .map(|(i, _)| i + 1),
        )
        .collect();
    // [header, record 1, record 2, record 3, end]
    assert_eq!(starts.len(), 5);
    let journal_error = |content: &[u8]| {
        std::fs::write(&journal, content).unwrap();
        load_error(&path)
    };
    // Emptied, or its header cut or garbled: unknown loss.
    for content in [&b""[..], &bytes[..starts[1] - 5], b"garbage\n"] {
        let err = journal_error(content);
        assert!(
            err.contains("it is empty or its first line is damaged"),
            "{err}"
        );
        assert!(
            err.contains(&format!("mv {0} {0}.damaged", journal.display())),
            "{err}"
        );
    }
    // A byte flipped in the second record.
    let mut flipped = bytes.clone();
    flipped[starts[2] + 20] ^= 1;
    let err = journal_error(&flipped);
    assert!(
        err.contains(&format!("record 2 (at byte {})", starts[2])),
        "{err}"
    );
    assert!(
        err.contains(&format!("truncate -s {} {}", starts[2], journal.display())),
        "{err}"
    );
    // A record lost from the middle: the sequence tells.
    let mut gap = bytes[..starts[2]].to_vec();
    gap.extend_from_slice(&bytes[starts[3]..]);
    assert!(journal_error(&gap).contains("record 2"));
    // Cut as told: what comes before the damage.
    std::fs::write(&journal, &flipped[..starts[2]]).unwrap();
    assert_eq!(change_ids(&load(&path).unwrap()), [first, a]);
    // A last record cut short by a crash was never acknowledged: left out.
    for cut in [1, 10, bytes.len() - starts[3] - 1] {
        std::fs::write(&journal, &bytes[..bytes.len() - cut]).unwrap();
        assert_eq!(
            change_ids(&load(&path).unwrap()),
            [first, a, b],
            "cut {cut}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_state_file_rewritten_by_pebble_wins_over_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let (path, first, _) = killed_daemon(dir.path()).await;
    // Pebble ran on the directory after the kill and wrote its own state: cobble's
    // generation entry carried, the bytes its own.
    let mut value: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    value["data"]["start-of-operation-time"] = "2026-01-01T00:00:00Z".into();
    std::fs::write(&path, serde_json::to_vec(&value).unwrap()).unwrap();
    let loaded = load(&path).unwrap();
    assert_eq!(change_ids(&loaded), [first]);
    // An older copy of the state file under a newer journal is refused.
    value["data"]["cobble-generation"] = 0.into();
    std::fs::write(&path, serde_json::to_vec(&value).unwrap()).unwrap();
    assert!(load_error(&path).contains("restored from an older copy"));
}

#[tokio::test(start_paused = true)]
async fn notices_and_identities_reach_the_journal() {
    use crate::identities::{Access, Action, Identity};
    use notices::{NoticeType, Occurrence};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".pebble.state");
    let s = store();
    let mut persister = Persister::new(s.clone(), path.clone());
    persister.flush().await.unwrap();
    tokio::spawn(persister.run(CancellationToken::new()));
    tokio::task::yield_now().await;

    let custom = |key: &str| Occurrence {
        user_id: Some(1000),
        kind: NoticeType::Custom,
        key: key.into(),
        data: BTreeMap::from([("k".to_owned(), "v".to_owned())]),
        repeat_after: Duration::ZERO,
    };
    let id = s.add_notice(custom("example.com/a"));
    let identity = Identity {
        access: Access::Read,
        local: Some(1000),
        basic: None,
        cert: None,
    };
    s.mutate(|d| {
        d.apply_identities(
            Action::Add,
            BTreeMap::from([("bob".to_owned(), Some(identity.clone()))]),
        )
    })
    .unwrap();
    s.durable().await.expect("durable");

    // What a daemon killed now would load: the state file has neither, its journal both.
    let alone = state_file_alone(&path);
    assert!(alone.notices.is_empty() && alone.identities.is_empty());
    let loaded = load(&path).unwrap();
    assert_eq!(loaded.notices[&id].key, "example.com/a");
    assert_eq!(loaded.last_notice_id, id);
    assert_eq!(loaded.identities["bob"], identity);

    // A repeat replaces the notice; removing the identity removes it.
    s.add_notice(custom("example.com/a"));
    s.mutate(|d| d.apply_identities(Action::Replace, BTreeMap::from([("bob".to_owned(), None)])))
        .unwrap();
    s.durable().await.expect("durable");
    let loaded = load(&path).unwrap();
    assert_eq!(loaded.notices[&id].occurrences, 2);
    assert!(loaded.identities.is_empty());
}

#[test]
fn a_busy_daemon_keeps_its_history_bounded_between_prunes() {
    let s = store();
    for _ in 0..(3 * MAX_READY_CHANGES) {
        let c = s.new_change("exec", "x", vec![]);
        let t = s.add_task(c, "exec", "x", None);
        s.set_task_status(t, TaskStatus::Done);
        assert!(s.lock().changes.len() <= MAX_READY_CHANGES + PRUNE_SLACK + 1);
    }
    let d = s.lock();
    assert!(d.notices.len() <= MAX_READY_CHANGES + PRUNE_SLACK + 1);
    assert!(
        d.changes.contains_key(&d.last_change_id),
        "the newest is kept"
    );
}

/// A store with a persister attached whose writes the test performs by hand: what a
/// write makes durable is published only when the test says so, as after a slow fsync.
fn store_with_slow_disk() -> StateStore {
    let s = store();
    s.inner.durable.send_modify(|d| d.persisted = true);
    s
}

/// The write the slow disk finally completes: everything so far is durable.
fn complete_write(s: &StateStore) {
    let covers = covers(&s.lock());
    s.inner.durable.send_modify(|d| {
        d.version = covers.version;
        d.notice_wakes = covers.notice_wakes;
        d.failure = None;
    });
    s.inner.notice_wakes.send_replace(covers.notice_wakes);
}

fn custom(key: &str) -> Occurrence {
    Occurrence {
        user_id: None,
        kind: NoticeType::Custom,
        key: key.into(),
        data: BTreeMap::new(),
        repeat_after: Duration::ZERO,
    }
}

#[tokio::test(start_paused = true)]
async fn a_notice_waiter_never_sees_a_notice_before_its_notify_is_answered() {
    let s = store_with_slow_disk();
    // A first occurrence on disk, so that the waiter waits for a repeat of it, the case
    // where no new ID is involved.
    s.add_notice(custom("a.com/b"));
    complete_write(&s);
    let after = s.notices(&NoticeFilter::default())[0].last_repeated;
    let filter = NoticeFilter {
        after: Some(after),
        ..Default::default()
    };
    let waiter = tokio::spawn({
        let (s, filter) = (s.clone(), filter.clone());
        async move { s.wait_notices(&filter).await }
    });
    while Timestamp::now() <= after {
        std::hint::spin_loop();
    }
    let notify = tokio::spawn({
        let s = s.clone();
        async move { s.add_notice_recorded(custom("a.com/b")).await }
    });
    // The fsync takes its time: neither the notify nor the waiter may answer meanwhile.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!notify.is_finished(), "notify answered before the write");
    assert!(!waiter.is_finished(), "a waiter saw a notice not on disk");
    complete_write(&s);
    let id = notify.await.unwrap().expect("recorded");
    let seen = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the durable repeat wakes the waiter")
        .unwrap();
    assert_eq!((seen.len(), seen[0].id), (1, *id.get()));
    assert_eq!(seen[0].occurrences, 2);
}

#[tokio::test(start_paused = true)]
async fn a_notify_the_disk_refuses_is_taken_back() {
    let s = store_with_slow_disk();
    let notify = tokio::spawn({
        let s = s.clone();
        async move { s.add_notice_recorded(custom("a.com/b")).await }
    });
    tokio::task::yield_now().await;
    let through = s.lock().version;
    s.inner.durable.send_modify(|d| {
        d.failure = Some(Failure {
            through,
            cause: "write /x: no space left on device".into(),
        })
    });
    let err = notify.await.unwrap().unwrap_err();
    assert_eq!(err.to_string(), "write /x: no space left on device");
    assert!(s.notices(&NoticeFilter::default()).is_empty());
    // The ID is spent: the next notice gets another.
    let next = tokio::spawn({
        let s = s.clone();
        async move { s.add_notice_recorded(custom("a.com/b")).await }
    });
    tokio::task::yield_now().await;
    complete_write(&s);
    assert_eq!(*next.await.unwrap().unwrap().get(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_change_the_disk_refuses_is_discarded_with_its_notice() {
    let s = store_with_slow_disk();
    let c = s.new_change("start", "x", vec![]);
    s.add_task(c, "start", "x", None);
    s.discard_change(c);
    assert!(s.change_info(c).is_none());
    assert!(s.notices(&NoticeFilter::default()).is_empty());
    assert_eq!(
        s.new_change("start", "y", vec![]),
        c + 1,
        "IDs are never reused"
    );
}

#[tokio::test(start_paused = true)]
async fn an_abort_tells_the_runners_only_once_it_is_on_disk_and_one_refused_is_taken_back() {
    let s = store_with_slow_disk();
    let c = s.new_change("start", "x", vec![]);
    let t1 = s.add_task(c, "start", "a", None);
    let t2 = s.add_task(c, "start", "b", None);
    s.set_task_status(t1, TaskStatus::Doing);
    complete_write(&s);
    let token = s.abort_token(c);

    let abort = tokio::spawn({
        let s = s.clone();
        async move { s.abort_change(c).await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!abort.is_finished(), "answered before the write");
    assert!(
        !token.is_cancelled(),
        "the runners were told before the write"
    );
    let through = s.lock().version;
    s.inner.durable.send_modify(|d| {
        d.failure = Some(Failure {
            through,
            cause: "write /x: no space left on device".into(),
        })
    });
    let err = abort.await.unwrap().unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot record change: write /x: no space left on device"
    );
    assert!(!token.is_cancelled(), "a refused abort is not carried out");
    assert_eq!(s.task_status(t1), Some(TaskStatus::Doing));
    assert_eq!(s.task_status(t2), Some(TaskStatus::Do));
    assert_eq!(s.change_info(c).unwrap().status, "Doing");

    // The disk heals: the same abort goes through, and only then are the runners told.
    complete_write(&s);
    let abort = tokio::spawn({
        let s = s.clone();
        async move { s.abort_change(c).await }
    });
    tokio::task::yield_now().await;
    assert!(!token.is_cancelled());
    complete_write(&s);
    let info = abort.await.unwrap().expect("recorded");
    assert_eq!(info.status, "Abort");
    assert!(token.is_cancelled());
    assert_eq!(s.task_status(t2), Some(TaskStatus::Hold));
}

#[test]
fn each_store_knows_only_its_own_warnings() {
    // Two daemons in one process (the tests run many) share nothing.
    let (a, b) = (store(), store());
    assert_eq!(a.latest_warning().get(), None);
    a.add_warning("disk almost full");
    let at = a.latest_warning().get().expect("a warning");
    assert_eq!(b.latest_warning().get(), None);
    // A store made from saved state knows the warnings in it.
    let saved = std::mem::take(&mut *a.lock());
    assert_eq!(StateStore::new(saved).latest_warning().get(), Some(at));
}
