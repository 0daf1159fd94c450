//! Notices: aggregated records of things that happened, which clients list and long-poll.
//!
//! A notice is identified by its owner (a uid, or none for a public notice), its type and its
//! key. Recording the same identity again is an occurrence of the same notice: it counts up,
//! takes the new data and, unless `repeat-after` says it repeated too soon, moves its
//! `last-repeated` time forward. Only a new notice or a repeat wakes long-pollers, and lists
//! are ordered by `last-repeated`, so a watcher that keeps the last time it saw (`after`) sees
//! every repeat exactly once.
//!
//! The data lives in [`StateData`] beside the changes, so it is persisted with them and its
//! IDs keep counting across restarts. Everything here is pure: the store calls in with the
//! current time under its lock.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use cobble_client::types::NoticeInfo;
use cobble_plan::duration::format_duration;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::{Change, SmallMap, StateData, TaskStatus, change_status};
use cobble_client::time::format_rfc3339_nano_utc;

/// How long after its last occurrence a notice is dropped.
pub(crate) const NOTICE_EXPIRE_AFTER: Duration = Duration::from_secs(7 * 24 * 3600);
/// At most this many notices are kept; the least recently repeated go first.
pub(crate) const MAX_NOTICES: usize = 1000;
/// How often one warning may repeat.
pub(crate) const WARNING_REPEAT_AFTER: Duration = Duration::from_secs(24 * 3600);

/// The latest `last-repeated` of any of a store's warnings, which every answer of the API
/// carries as `latest-warning`. Each store has its own (two daemons in one process share
/// nothing); reading it costs an atomic load, not the store's lock.
#[derive(Debug, Default)]
pub(crate) struct LatestWarning {
    /// Nanoseconds since the epoch; 0 for none.
    nanos: AtomicI64,
}

impl LatestWarning {
    /// Records that a warning repeated at `at`.
    pub(crate) fn note(&self, at: Timestamp) {
        let nanos = i64::try_from(at.as_nanosecond()).unwrap_or(i64::MAX);
        self.nanos.fetch_max(nanos, Ordering::Relaxed);
    }

    /// When a warning last repeated, if one ever did.
    pub(crate) fn get(&self) -> Option<Timestamp> {
        match self.nanos.load(Ordering::Relaxed) {
            0 => None,
            nanos => Timestamp::from_nanosecond(i128::from(nanos)).ok(),
        }
    }
}

/// What a notice is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NoticeType {
    /// A change was spawned or its status changed; the key is the change ID.
    ChangeUpdate,
    /// A client's own notice, with a `domain.com/path` key.
    Custom,
    /// A human-readable warning; the key is the message.
    Warning,
}

impl NoticeType {
    /// The type a client named, or `None` for a name this daemon does not know.
    pub fn parse(name: &str) -> Option<NoticeType> {
        match name {
            "change-update" => Some(NoticeType::ChangeUpdate),
            "custom" => Some(NoticeType::Custom),
            "warning" => Some(NoticeType::Warning),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            NoticeType::ChangeUpdate => "change-update",
            NoticeType::Custom => "custom",
            NoticeType::Warning => "warning",
        }
    }
}

/// One notice and its history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notice {
    pub id: u64,
    /// Who may see it besides admins; `None` for a public notice.
    pub user_id: Option<u32>,
    #[serde(rename = "type")]
    pub kind: NoticeType,
    pub key: String,
    pub first_occurred: Timestamp,
    pub last_occurred: Timestamp,
    /// When it was recorded anew or last allowed to repeat; what lists are ordered by and
    /// what `after` compares with.
    pub last_repeated: Timestamp,
    pub occurrences: u64,
    /// The data of the last occurrence (replaced, never merged).
    #[serde(default, skip_serializing_if = "SmallMap::is_empty")]
    pub last_data: SmallMap<String>,
    /// The `repeat-after` of the last occurrence; zero repeats every time.
    #[serde(default)]
    pub repeat_after: Duration,
    pub expire_after: Duration,
    /// The store version of its last change, which a waiter sees only once the state file
    /// holds it; zero for a notice loaded from disk. Never written.
    #[serde(skip)]
    pub changed_at: u64,
}

impl Notice {
    fn expired(&self, now: Timestamp) -> bool {
        match jiff::SignedDuration::try_from(self.expire_after) {
            Ok(ttl) => self
                .last_occurred
                .checked_add(ttl)
                .is_ok_and(|deadline| deadline < now),
            Err(_) => false,
        }
    }

    /// Whether `uid` may read this notice (`admin` sees every notice).
    pub fn visible_to(&self, uid: u32, admin: bool) -> bool {
        admin || self.user_id.is_none_or(|owner| owner == uid)
    }

    /// The notice as the API shows it.
    pub fn render(&self) -> NoticeInfo {
        NoticeInfo {
            id: self.id.to_string(),
            user_id: self.user_id,
            kind: self.kind.as_str().into(),
            key: self.key.clone(),
            first_occurred: format_rfc3339_nano_utc(self.first_occurred),
            last_occurred: format_rfc3339_nano_utc(self.last_occurred),
            last_repeated: format_rfc3339_nano_utc(self.last_repeated),
            occurrences: self.occurrences,
            last_data: self.last_data.to_btree(),
            repeat_after: go_duration(self.repeat_after),
            expire_after: go_duration(self.expire_after),
        }
    }
}

/// Go's `Duration.String()`, or `None` for zero (which Pebble leaves out).
fn go_duration(d: Duration) -> Option<String> {
    (!d.is_zero()).then(|| format_duration(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)))
}

/// Which notices a list or a wait returns.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct NoticeFilter {
    /// Only notices of this user and public ones; `None` for every user's.
    pub user_id: Option<u32>,
    /// Only these types (any when empty).
    pub types: Vec<NoticeType>,
    /// Only these keys (any when empty).
    pub keys: Vec<String>,
    /// Only notices repeated strictly after this time.
    pub after: Option<Timestamp>,
}

impl NoticeFilter {
    pub(crate) fn matches(&self, n: &Notice) -> bool {
        if let Some(uid) = self.user_id
            && n.user_id.is_some_and(|owner| owner != uid)
        {
            return false;
        }
        if !self.types.is_empty() && !self.types.contains(&n.kind) {
            return false;
        }
        if !self.keys.is_empty() && !self.keys.contains(&n.key) {
            return false;
        }
        self.after.is_none_or(|after| n.last_repeated > after)
    }
}

/// One occurrence to record.
#[derive(Debug, Clone)]
pub(crate) struct Occurrence {
    pub user_id: Option<u32>,
    pub kind: NoticeType,
    pub key: String,
    pub data: BTreeMap<String, String>,
    pub repeat_after: Duration,
}

/// Records an occurrence at `now`; returns the notice's ID and whether it is new or repeated
/// (what wakes waiters).
pub(crate) fn add(d: &mut StateData, occurrence: Occurrence, now: Timestamp) -> (u64, bool) {
    let Occurrence {
        user_id,
        kind,
        key,
        data,
        repeat_after,
    } = occurrence;
    let version = d.version;
    let existing = d
        .notices
        .values_mut()
        .find(|n| n.user_id == user_id && n.kind == kind && n.key == key);
    let (notice, woke) = match existing {
        Some(notice) => {
            notice.occurrences += 1;
            let due = jiff::SignedDuration::try_from(repeat_after)
                .ok()
                .and_then(|wait| notice.last_repeated.checked_add(wait).ok())
                .is_none_or(|due| now > due);
            let woke = repeat_after.is_zero() || due;
            if woke {
                notice.last_repeated = now;
            }
            (notice, woke)
        }
        None => {
            d.last_notice_id += 1;
            let id = d.last_notice_id;
            let notice = d.notices.entry(id).or_insert(Notice {
                id,
                user_id,
                kind,
                key,
                first_occurred: now,
                last_occurred: now,
                last_repeated: now,
                occurrences: 1,
                last_data: SmallMap::new(),
                repeat_after: Duration::ZERO,
                expire_after: NOTICE_EXPIRE_AFTER,
                changed_at: 0,
            });
            (notice, true)
        }
    };
    notice.last_occurred = now;
    notice.last_data = data.into();
    notice.repeat_after = repeat_after;
    notice.changed_at = version;
    let id = notice.id;
    d.dirty.touch_notice(id);
    if woke {
        d.notice_wakes += 1;
    }
    (id, woke)
}

/// The notice an occurrence would count for, if it exists.
pub(crate) fn find<'a>(d: &'a StateData, occurrence: &Occurrence) -> Option<&'a Notice> {
    d.notices.values().find(|n| {
        n.user_id == occurrence.user_id && n.kind == occurrence.kind && n.key == occurrence.key
    })
}

/// The live notices matching `filter`, ordered by `last-repeated` (ID breaks ties).
pub(crate) fn list(d: &StateData, filter: &NoticeFilter, now: Timestamp) -> Vec<Notice> {
    let mut found: Vec<Notice> = d
        .notices
        .values()
        .filter(|n| !n.expired(now) && filter.matches(n))
        .cloned()
        .collect();
    found.sort_by_key(|n| (n.last_repeated, n.id));
    found
}

/// A live notice by ID.
pub(crate) fn get(d: &StateData, id: u64, now: Timestamp) -> Option<Notice> {
    d.notices.get(&id).filter(|n| !n.expired(now)).cloned()
}

/// Drops expired notices, change updates of changes that no longer exist, and the least
/// recently repeated beyond [`MAX_NOTICES`].
pub(crate) fn prune(d: &mut StateData, now: Timestamp) {
    let changes = &d.changes;
    let dirty = &mut d.dirty;
    d.notices.retain(|_, n| {
        let keep = !n.expired(now)
            && (n.kind != NoticeType::ChangeUpdate
                || n.key
                    .parse::<u64>()
                    .is_ok_and(|id| changes.contains_key(&id)));
        if !keep {
            dirty.touch_notice(n.id);
        }
        keep
    });
    let excess = d.notices.len().saturating_sub(MAX_NOTICES);
    if excess > 0 {
        let mut by_age: Vec<(Timestamp, u64)> = d
            .notices
            .values()
            .map(|n| (n.last_repeated, n.id))
            .collect();
        by_age.sort();
        for (_, id) in by_age.into_iter().take(excess) {
            d.notices.remove(&id);
            d.dirty.touch_notice(id);
        }
    }
}

/// Whether going from `old` to `new` is worth a change-update notice: not for the same
/// status, and not for a task that went back from running to pending (Doing to Do, Undoing
/// to Undo), which flaps while a change is worked on.
fn worth_a_notice(old: Option<TaskStatus>, new: TaskStatus) -> bool {
    match old {
        None => true,
        Some(old) => {
            old != new
                && !(old == TaskStatus::Doing && new == TaskStatus::Do)
                && !(old == TaskStatus::Undoing && new == TaskStatus::Undo)
        }
    }
}

/// Records the change-update notice of a change just made. As in Pebble, it records no
/// status: the change's first status change is news whatever it is.
pub(crate) fn change_spawned(d: &mut StateData, change_id: u64, now: Timestamp) {
    if let Some(change) = d.changes.get(&change_id) {
        let data = change_update_data(change);
        record_change_update(d, change_id, data, now);
    }
}

/// Records a change-update notice if the change's status moved since the last one recorded.
pub(crate) fn observe_change(d: &mut StateData, change_id: u64, now: Timestamp) {
    let Some(change) = d.changes.get(&change_id) else {
        return;
    };
    let status = change_status(d, change);
    if !worth_a_notice(change.last_notice_status, status) {
        return;
    }
    let data = change_update_data(change);
    record_change_update(d, change_id, data, now);
    if let Some(change) = d.changes.get_mut(&change_id) {
        change.last_notice_status = Some(status);
    }
}

fn record_change_update(
    d: &mut StateData,
    change_id: u64,
    data: BTreeMap<String, String>,
    now: Timestamp,
) {
    add(
        d,
        Occurrence {
            user_id: None,
            kind: NoticeType::ChangeUpdate,
            key: change_id.to_string(),
            data,
            repeat_after: Duration::ZERO,
        },
        now,
    );
}

fn change_update_data(change: &Change) -> BTreeMap<String, String> {
    let mut data = BTreeMap::from([("kind".to_string(), change.kind.clone())]);
    if let Some(check) = &change.check_name {
        data.insert("check-name".into(), check.clone());
    }
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn custom(uid: Option<u32>, key: &str, repeat_after: Duration) -> Occurrence {
        Occurrence {
            user_id: uid,
            kind: NoticeType::Custom,
            key: key.into(),
            data: BTreeMap::new(),
            repeat_after,
        }
    }

    #[test]
    fn a_second_occurrence_counts_up_and_replaces_the_data() {
        let mut d = StateData::default();
        let (first, woke) = add(&mut d, custom(Some(1), "a.com/b", Duration::ZERO), at(0));
        assert!(woke);
        let mut again = custom(Some(1), "a.com/b", Duration::ZERO);
        again.data.insert("x".into(), "1".into());
        let (second, woke) = add(&mut d, again, at(5));
        assert_eq!((first, woke), (second, true));
        let n = &d.notices[&first];
        assert_eq!(n.occurrences, 2);
        assert_eq!(n.first_occurred, at(0));
        assert_eq!((n.last_occurred, n.last_repeated), (at(5), at(5)));
        assert_eq!(n.last_data["x"], "1");
        let (third, _) = add(&mut d, custom(Some(1), "a.com/b", Duration::ZERO), at(6));
        assert!(d.notices[&third].last_data.is_empty(), "data is replaced");
    }

    #[test]
    fn identity_includes_the_owner() {
        let mut d = StateData::default();
        let (a, _) = add(&mut d, custom(Some(1), "a.com/b", Duration::ZERO), at(0));
        let (b, _) = add(&mut d, custom(Some(2), "a.com/b", Duration::ZERO), at(0));
        let (c, _) = add(&mut d, custom(None, "a.com/b", Duration::ZERO), at(0));
        assert_eq!((a, b, c), (1, 2, 3));
    }

    #[test]
    fn repeat_after_holds_last_repeated_and_does_not_wake() {
        let mut d = StateData::default();
        let ten = Duration::from_secs(10);
        add(&mut d, custom(None, "a.com/b", ten), at(0));
        let (id, woke) = add(&mut d, custom(None, "a.com/b", ten), at(5));
        assert!(!woke);
        assert_eq!(d.notices[&id].last_repeated, at(0));
        assert_eq!(d.notices[&id].last_occurred, at(5));
        assert_eq!(d.notice_wakes, 1);
        let (_, woke) = add(&mut d, custom(None, "a.com/b", ten), at(11));
        assert!(woke);
        assert_eq!(d.notices[&id].last_repeated, at(11));
        assert_eq!(d.notices[&id].occurrences, 3);
    }

    #[test]
    fn filters_by_user_type_key_and_after() {
        let mut d = StateData::default();
        add(&mut d, custom(Some(1), "a.com/one", Duration::ZERO), at(1));
        add(&mut d, custom(Some(2), "a.com/two", Duration::ZERO), at(2));
        add(&mut d, custom(None, "a.com/pub", Duration::ZERO), at(3));
        let keys = |f: NoticeFilter| -> Vec<String> {
            list(&d, &f, at(4)).into_iter().map(|n| n.key).collect()
        };
        let mine = NoticeFilter {
            user_id: Some(1),
            ..Default::default()
        };
        assert_eq!(keys(mine.clone()), ["a.com/one", "a.com/pub"]);
        assert_eq!(
            keys(NoticeFilter::default()),
            ["a.com/one", "a.com/two", "a.com/pub"]
        );
        let after = NoticeFilter {
            after: Some(at(2)),
            ..Default::default()
        };
        assert_eq!(keys(after), ["a.com/pub"], "after is strict");
        let by_key = NoticeFilter {
            keys: vec!["a.com/two".into()],
            ..Default::default()
        };
        assert_eq!(keys(by_key), ["a.com/two"]);
        let by_type = NoticeFilter {
            types: vec![NoticeType::Warning],
            ..Default::default()
        };
        assert!(keys(by_type).is_empty());
    }

    #[test]
    fn prune_drops_expired_orphaned_and_excess_notices() {
        let mut d = StateData::default();
        add(&mut d, custom(None, "a.com/old", Duration::ZERO), at(0));
        let orphan = Occurrence {
            kind: NoticeType::ChangeUpdate,
            ..custom(None, "42", Duration::ZERO)
        };
        add(&mut d, orphan, at(1));
        for i in 0..MAX_NOTICES + 5 {
            add(
                &mut d,
                custom(None, &format!("a.com/n{i}"), Duration::ZERO),
                at(100 + i as i64),
            );
        }
        let week = NOTICE_EXPIRE_AFTER.as_secs() as i64;
        prune(&mut d, at(week + 50));
        assert_eq!(d.notices.len(), MAX_NOTICES);
        assert!(d.notices.values().all(|n| n.kind == NoticeType::Custom));
        assert!(!d.notices.values().any(|n| n.key == "a.com/old"));
        for i in 0..5 {
            let key = format!("a.com/n{i}");
            assert!(!d.notices.values().any(|n| n.key == key), "{key} is oldest");
        }
    }

    #[test]
    fn expired_notices_are_not_listed() {
        let mut d = StateData::default();
        let (id, _) = add(&mut d, custom(None, "a.com/b", Duration::ZERO), at(0));
        let week = NOTICE_EXPIRE_AFTER.as_secs() as i64;
        assert!(get(&d, id, at(week)).is_some());
        assert!(get(&d, id, at(week + 1)).is_none());
        assert!(list(&d, &NoticeFilter::default(), at(week + 1)).is_empty());
    }

    #[test]
    fn change_updates_skip_same_status_and_running_to_pending() {
        use TaskStatus::*;
        let table = [
            (None, Hold, true),
            (Some(Hold), Do, true),
            (Some(Do), Doing, true),
            (Some(Doing), Do, false),
            (Some(Undoing), Undo, false),
            (Some(Doing), Doing, false),
            (Some(Doing), Done, true),
            (Some(Doing), Error, true),
            (Some(Undo), Undoing, true),
        ];
        for (old, new, want) in table {
            assert_eq!(worth_a_notice(old, new), want, "{old:?} -> {new:?}");
        }
    }

    #[test]
    fn renders_pebbles_shape() {
        let mut d = StateData::default();
        let mut occurrence = custom(Some(1000), "a.com/b", Duration::from_secs(90));
        occurrence.data.insert("k".into(), "v".into());
        let (id, _) = add(&mut d, occurrence, at(0));
        let json = serde_json::to_string(&d.notices[&id].render()).unwrap();
        assert_eq!(
            json,
            "{\"id\":\"1\",\"user-id\":1000,\"type\":\"custom\",\"key\":\"a.com/b\",\
             \"first-occurred\":\"2023-11-14T22:13:20Z\",\"last-occurred\":\"2023-11-14T22:13:20Z\",\
             \"last-repeated\":\"2023-11-14T22:13:20Z\",\"occurrences\":1,\"last-data\":{\"k\":\"v\"},\
             \"repeat-after\":\"1m30s\",\"expire-after\":\"168h0m0s\"}"
        );
        let public = custom(None, "a.com/c", Duration::ZERO);
        let (id, _) = add(&mut d, public, at(0));
        let json = serde_json::to_string(&d.notices[&id].render()).unwrap();
        assert!(json.contains("\"user-id\":null"), "{json}");
        assert!(!json.contains("last-data") && !json.contains("repeat-after"));
    }

    mod store {
        use super::*;
        use crate::state::StateStore;

        fn change_updates(s: &StateStore, change: u64) -> Option<Notice> {
            let filter = NoticeFilter {
                types: vec![NoticeType::ChangeUpdate],
                keys: vec![change.to_string()],
                ..Default::default()
            };
            s.notices(&filter).pop()
        }

        #[test]
        fn every_status_change_of_a_check_change_is_a_notice() {
            let s = StateStore::new(StateData::default());
            let c = s.new_check_change("perform-check", "Perform exec check \"c\"", "c");
            let t = s.add_task(c, "perform-check", "x", None);
            // Spawned; the task added is no news of its own (Pebble's count).
            assert_eq!(change_updates(&s, c).unwrap().occurrences, 1);
            s.set_task_status(t, TaskStatus::Doing);
            // Spawned, Doing.
            let n = change_updates(&s, c).unwrap();
            assert_eq!(n.occurrences, 2);
            assert_eq!(n.user_id, None, "change updates are public");
            assert_eq!(n.last_data["kind"], "perform-check");
            assert_eq!(n.last_data["check-name"], "c");
            s.set_task_status(t, TaskStatus::Doing);
            assert_eq!(change_updates(&s, c).unwrap().occurrences, 2, "same status");
            // A running task that fails passes through Abort first, as in Pebble (4 in all).
            s.set_task_status(t, TaskStatus::Error);
            assert_eq!(change_updates(&s, c).unwrap().occurrences, 4);
            assert_eq!(s.change_info(c).unwrap().status, "Error");
        }

        #[test]
        fn a_stopped_check_change_passes_through_abort_and_undo_as_in_pebble() {
            let s = StateStore::new(StateData::default());
            let c = s.new_check_change("perform-check", "Perform exec check \"c\"", "c");
            let t = s.add_task(c, "perform-check", "x", None);
            s.set_task_status(t, TaskStatus::Doing);
            s.end_stopped_task(t);
            // Spawned, Doing, Abort, Undo, Done.
            assert_eq!(change_updates(&s, c).unwrap().occurrences, 5);
            assert_eq!(s.change_info(c).unwrap().status, "Done");
        }

        #[test]
        fn running_to_pending_is_not_a_notice() {
            let s = StateStore::new(StateData::default());
            let c = s.new_change("start", "x", vec![]);
            let t1 = s.add_task(c, "start", "a", None);
            let t2 = s.add_task(c, "start", "b", None);
            s.set_task_status(t1, TaskStatus::Doing);
            let before = change_updates(&s, c).unwrap().occurrences;
            // t1 done while t2 waits: the change goes from Doing back to Do.
            s.set_task_status(t1, TaskStatus::Done);
            assert_eq!(s.change_info(c).unwrap().status, "Do");
            assert_eq!(change_updates(&s, c).unwrap().occurrences, before);
            s.set_task_status(t2, TaskStatus::Doing);
            s.set_task_status(t2, TaskStatus::Done);
            let n = change_updates(&s, c).unwrap();
            assert_eq!(n.occurrences, before + 1, "Doing again is no news; Done is");
            assert!(!n.last_data.contains_key("check-name"));
        }

        #[test]
        fn notices_and_their_ids_survive_a_reload() {
            let s = StateStore::new(StateData::default());
            let id = s.add_notice(Occurrence {
                user_id: Some(1000),
                kind: NoticeType::Custom,
                key: "a.com/b".into(),
                data: BTreeMap::from([("k".into(), "v".into())]),
                repeat_after: Duration::from_secs(60),
            });
            let bytes = s.snapshot_json();
            let s2 = StateStore::new(crate::state::format::decode(&bytes).unwrap());
            let shown = |s: &StateStore| s.notice(id).map(|n| n.render());
            assert_eq!(shown(&s2), shown(&s));
            let next = s2.add_notice(Occurrence {
                user_id: None,
                kind: NoticeType::Custom,
                key: "a.com/c".into(),
                data: BTreeMap::new(),
                repeat_after: Duration::ZERO,
            });
            assert_eq!(next, id + 1);
        }

        #[test]
        fn a_pruned_change_takes_its_notice_along() {
            let s = StateStore::new(StateData::default());
            let c = s.new_change("start", "x", vec![]);
            let t = s.add_task(c, "start", "x", None);
            s.set_task_status(t, TaskStatus::Done);
            assert!(change_updates(&s, c).is_some());
            s.prune(Timestamp::now() + jiff::SignedDuration::from_hours(8 * 24));
            assert!(s.change_info(c).is_none());
            assert!(s.notices(&NoticeFilter::default()).is_empty());
        }

        #[tokio::test(start_paused = true)]
        async fn waiters_wake_on_an_addition_or_repeat_only() {
            let s = StateStore::new(StateData::default());
            let custom = |repeat_after| Occurrence {
                user_id: None,
                kind: NoticeType::Custom,
                key: "a.com/b".into(),
                data: BTreeMap::new(),
                repeat_after,
            };
            let hour = Duration::from_secs(3600);
            s.add_notice(custom(hour));
            let after = s.notices(&NoticeFilter::default())[0].last_repeated;
            let filter = NoticeFilter {
                after: Some(after),
                ..Default::default()
            };
            let waiter = tokio::spawn({
                let s = s.clone();
                let filter = filter.clone();
                async move { s.wait_notices(&filter).await }
            });
            tokio::task::yield_now().await;
            // Held back by repeat-after: no news, the waiter keeps waiting.
            s.add_notice(custom(hour));
            tokio::task::yield_now().await;
            assert!(!waiter.is_finished());
            // Notice times are wall-clock times: let the clock pass `after` first.
            while Timestamp::now() <= after {
                std::hint::spin_loop();
            }
            s.add_notice(custom(Duration::ZERO));
            let woken = tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .expect("the repeat wakes the waiter")
                .unwrap();
            assert_eq!(woken.len(), 1);
            assert_eq!(woken[0].occurrences, 3);
        }
    }
}
