//! The check manager with scripted probes on paused time: periods, thresholds, the
//! perform/recover change cycle, plan changes, start/stop, refresh and health.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cobble_client::types::ChangeInfo;
use cobble_plan::{Check, CheckLevel, ExecCheck, GoDuration, Plan, Startup};
use futures_util::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;

use super::checker::{CheckError, Checker};
use super::{CheckAction, CheckManager, CheckManagerError, CheckStatus, CheckView, Firing};
use crate::state::{StateData, StateStore};

/// What a scripted probe does on its next runs.
#[derive(Debug, Clone)]
enum Outcome {
    Pass,
    Fail(&'static str, &'static str),
    /// Never finishes (so the check's timeout decides).
    Hang,
    /// Fails after this many seconds.
    SlowFail(u64),
}

#[derive(Default)]
struct Script {
    outcomes: Mutex<BTreeMap<String, Outcome>>,
    runs: Mutex<BTreeMap<String, u32>>,
}

struct Scripted {
    name: String,
    script: Arc<Script>,
}

impl Checker for Scripted {
    fn check(&self) -> BoxFuture<'_, Result<(), CheckError>> {
        *self
            .script
            .runs
            .lock()
            .unwrap()
            .entry(self.name.clone())
            .or_default() += 1;
        let outcome = self
            .script
            .outcomes
            .lock()
            .unwrap()
            .get(&self.name)
            .cloned()
            .unwrap_or(Outcome::Pass);
        Box::pin(async move {
            match outcome {
                Outcome::Pass => Ok(()),
                Outcome::Fail(message, details) => Err(CheckError {
                    message: message.into(),
                    details: details.into(),
                }),
                Outcome::Hang => std::future::pending().await,
                Outcome::SlowFail(secs) => {
                    tokio::time::sleep(Duration::from_secs(secs)).await;
                    Err(CheckError {
                        message: "slow".into(),
                        details: String::new(),
                    })
                }
            }
        })
    }
}

struct Harness {
    plan: watch::Sender<Arc<Plan>>,
    store: StateStore,
    manager: CheckManager,
    script: Arc<Script>,
}

fn secs(n: i64) -> Option<GoDuration> {
    Some(GoDuration(n * 1_000_000_000))
}

/// An exec check with a 10 s period (unless changed) and threshold 3.
fn check(name: &str) -> Check {
    Check {
        name: name.into(),
        exec: Some(ExecCheck {
            command: format!("probe {name}"),
            ..ExecCheck::default()
        }),
        ..Check::default()
    }
}

fn plan(checks: Vec<Check>) -> Arc<Plan> {
    let mut plan = Plan::default();
    for check in checks {
        plan.checks.insert(check.name.clone(), check);
    }
    Arc::new(plan)
}

impl Harness {
    fn new(checks: Vec<Check>) -> Harness {
        let (tx, rx) = watch::channel(plan(checks));
        let store = StateStore::new(StateData::default());
        let script = Arc::new(Script::default());
        let factory = {
            let script = script.clone();
            Arc::new(move |config: &Check| {
                Arc::new(Scripted {
                    name: config.name.clone(),
                    script: script.clone(),
                }) as Arc<dyn Checker>
            })
        };
        let (manager, _task) = CheckManager::spawn_with(rx, store.clone(), factory);
        Harness {
            plan: tx,
            store,
            manager,
            script,
        }
    }

    fn set(&self, name: &str, outcome: Outcome) {
        self.script
            .outcomes
            .lock()
            .unwrap()
            .insert(name.into(), outcome);
    }

    fn runs(&self, name: &str) -> u32 {
        self.script
            .runs
            .lock()
            .unwrap()
            .get(name)
            .copied()
            .unwrap_or(0)
    }

    async fn view(&self, name: &str) -> CheckView {
        self.manager
            .checks()
            .await
            .into_iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no check {name}"))
    }

    fn change(&self, id: Option<u64>) -> ChangeInfo {
        self.store
            .change_info(id.expect("check has a change"))
            .expect("change exists")
    }

    /// The checks that are down, with their firing numbers, as the supervisor sees them.
    fn firing(&self) -> Firing {
        self.manager.signals().borrow().firing.clone()
    }

    /// The checks that pass, as the supervisor sees them.
    fn passing(&self) -> Vec<String> {
        self.manager
            .signals()
            .borrow()
            .passing
            .iter()
            .cloned()
            .collect()
    }
}

/// Lets time pass (paused clock) and every task that became ready run.
async fn pass(seconds: f64) {
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

fn log_messages(change: &ChangeInfo) -> Vec<String> {
    change.tasks[0]
        .log
        .iter()
        .map(|entry| {
            entry
                .split_once(' ')
                .map_or("", |(_, rest)| rest)
                .to_owned()
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn first_run_is_one_period_after_start_and_successes_leave_no_record() {
    let h = Harness::new(vec![check("chk")]);
    let view = h.view("chk").await;
    assert_eq!(view.status, CheckStatus::Up);
    assert_eq!((view.successes, view.failures, view.threshold), (0, 0, 3));
    let change = h.change(view.change_id);
    assert_eq!(change.kind, "perform-check");
    assert_eq!(change.summary, "Perform exec check \"chk\"");
    assert_eq!(change.status, "Doing");
    assert_eq!(change.tasks[0].kind, "perform-check");

    pass(9.9).await;
    assert_eq!(h.runs("chk"), 0);
    pass(0.2).await;
    assert_eq!(h.runs("chk"), 1);
    pass(20.0).await;
    let view = h.view("chk").await;
    assert_eq!((view.successes, view.success_count), (3, 3));
    assert!(h.change(view.change_id).tasks[0].log.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_recover_change_probes_a_full_period_after_it_starts() {
    // Pebble's recover task runs a ticker of its own: a probe that took 2 s to fail
    // moves the next one to 2 s past the perform change's grid.
    let mut config = check("chk");
    config.threshold = 1;
    let h = Harness::new(vec![config]);
    h.set("chk", Outcome::SlowFail(2));
    pass(12.1).await;
    let view = h.view("chk").await;
    assert_eq!(h.change(view.change_id).kind, "recover-check");
    pass(9.8).await;
    assert_eq!(h.runs("chk"), 1);
    pass(0.2).await;
    assert_eq!(h.runs("chk"), 2);
}

#[tokio::test(start_paused = true)]
async fn failures_below_threshold_are_logged_and_reset_by_a_success() {
    let h = Harness::new(vec![check("chk")]);
    h.set("chk", Outcome::Fail("exit status 1", "details"));
    pass(20.5).await;
    let view = h.view("chk").await;
    assert_eq!((view.status, view.failures), (CheckStatus::Up, 2));
    let change = h.change(view.change_id);
    assert_eq!(
        log_messages(&change),
        [
            "ERROR exit status 1; details",
            "ERROR exit status 1; details"
        ]
    );
    assert_eq!(change.status, "Doing");
    assert!(h.manager.healthy(CheckLevel::Unset, &[]));

    h.set("chk", Outcome::Pass);
    pass(10.0).await;
    let view = h.view("chk").await;
    assert_eq!((view.failures, view.successes), (0, 1));
    assert_eq!(
        log_messages(&h.change(view.change_id)).last().unwrap(),
        "INFO succeeded after 2 failures"
    );
    assert!(h.firing().is_empty());
}

/// What `requires-checks` and `start-grace` decide by: a check passes from its first
/// success until it is down, and a check that is down carries its last success.
#[tokio::test(start_paused = true)]
async fn a_check_passes_from_its_first_success_and_a_down_one_carries_its_last_success() {
    let mut config = check("chk");
    config.threshold = 2;
    let h = Harness::new(vec![config]);
    h.set("chk", Outcome::Pass);
    // Never run yet: up with no successes, which does not pass.
    assert!(h.passing().is_empty());
    pass(10.5).await;
    assert_eq!(h.passing(), ["chk"]);
    let succeeded = h.manager.signals().borrow().clone();
    assert!(
        succeeded.last_success.is_empty(),
        "only down checks carry it"
    );

    h.set("chk", Outcome::Fail("exit status 3", "last line"));
    pass(10.0).await;
    // One failure under the threshold: still passing.
    assert_eq!(h.passing(), ["chk"]);
    pass(10.0).await;
    let signals = h.manager.signals().borrow().clone();
    assert!(signals.passing.is_empty());
    assert_eq!(signals.firing, Firing::from([("chk".into(), 1)]));
    let last = signals.last_success["chk"];
    assert!(Instant::now() - last >= Duration::from_secs(20), "{last:?}");

    h.set("chk", Outcome::Pass);
    pass(10.0).await;
    let signals = h.manager.signals().borrow().clone();
    assert_eq!(h.passing(), ["chk"]);
    assert!(signals.firing.is_empty() && signals.last_success.is_empty());
}

#[tokio::test(start_paused = true)]
async fn threshold_fires_the_action_and_refires_while_down_and_recovery_starts_a_new_perform_change()
 {
    let mut config = check("chk");
    config.threshold = 2;
    config.level = CheckLevel::Alive;
    let h = Harness::new(vec![config]);
    h.set("chk", Outcome::Pass);
    pass(10.5).await;
    let perform = h.view("chk").await.change_id;

    h.set("chk", Outcome::Fail("exit status 3", "last line"));
    pass(20.0).await;
    let view = h.view("chk").await;
    assert_eq!(view.status, CheckStatus::Down);
    assert_eq!((view.failures, view.successes), (2, 1));
    assert_eq!(h.firing(), Firing::from([("chk".into(), 1)]));
    // The perform change failed with Pebble's err text; a recover change took over.
    let failed = h.change(perform);
    assert_eq!(failed.status, "Error");
    assert!(failed.ready);
    assert_eq!(
        failed.err,
        "cannot perform the following tasks:\n\
         - Perform exec check \"chk\" (exit status 3; last line)\n\
         - Perform exec check \"chk\" (exit status 3; last line)"
    );
    assert_ne!(view.change_id, perform);
    let recover = h.change(view.change_id);
    assert_eq!(recover.kind, "recover-check");
    assert_eq!(recover.summary, "Recover exec check \"chk\"");
    assert_eq!(recover.status, "Doing");
    assert!(!h.manager.healthy(CheckLevel::Unset, &[]));
    assert!(!h.manager.healthy(CheckLevel::Alive, &[]));
    assert!(
        !h.manager.healthy(CheckLevel::Ready, &[]),
        "ready implies alive"
    );
    assert!(!h.manager.healthy(CheckLevel::Unset, &["chk".into()]));
    assert!(h.manager.healthy(CheckLevel::Unset, &["other".into()]));

    // Failures while recovering are logged, as in Pebble; every further `threshold` of them
    // fires the action again (Pebble fires once per streak), which only the daemon's log says.
    pass(30.0).await;
    let view = h.view("chk").await;
    assert_eq!(view.failures, 5);
    assert_eq!(h.firing(), Firing::from([("chk".into(), 2)]));
    assert_eq!(view.action_count, 2);
    assert_eq!(view.last_error.as_deref(), Some("exit status 3"));
    assert!(view.down_since.is_some());
    assert_eq!(
        log_messages(&h.change(view.change_id)),
        vec![
            "ERROR exit status 3; last line",
            "ERROR exit status 3; last line",
            "ERROR exit status 3; last line",
        ]
    );

    h.set("chk", Outcome::Pass);
    pass(10.0).await;
    let view = h.view("chk").await;
    assert_eq!(view.status, CheckStatus::Up);
    assert_eq!((view.failures, view.successes), (0, 1));
    assert_eq!(h.change(recover_id(&recover)).status, "Done");
    let perform_again = h.change(view.change_id);
    assert_eq!(perform_again.kind, "perform-check");
    assert_eq!(perform_again.status, "Doing");
    assert!(h.manager.healthy(CheckLevel::Unset, &[]));
    assert!(h.firing().is_empty(), "an up check is not firing");
    assert_eq!((view.success_count, view.failure_count), (2, 5));

    // A new streak fires again.
    h.set("chk", Outcome::Fail("exit status 3", ""));
    pass(20.0).await;
    assert_eq!(h.firing(), Firing::from([("chk".into(), 3)]));
}

/// Pebble's `prev-change-id`: the change before the current one, through a failure, a
/// recovery and a stop; a fresh start has none.
#[tokio::test(start_paused = true)]
async fn the_previous_change_is_the_one_the_check_failed_or_recovered_from() {
    let mut config = check("chk");
    config.threshold = 1;
    let h = Harness::new(vec![config]);
    h.set("chk", Outcome::Pass);
    pass(10.5).await;
    let first = h.view("chk").await;
    assert_eq!(first.prev_change_id, None);

    h.set("chk", Outcome::Fail("exit status 1", ""));
    pass(10.0).await;
    let down = h.view("chk").await;
    assert_eq!(down.status, CheckStatus::Down);
    assert_eq!(down.prev_change_id, first.change_id);

    h.set("chk", Outcome::Pass);
    pass(10.0).await;
    let up = h.view("chk").await;
    assert_eq!(up.status, CheckStatus::Up);
    assert_eq!(up.prev_change_id, down.change_id);

    h.manager
        .act(CheckAction::Stop, vec!["chk".into()])
        .await
        .unwrap();
    let stopped = h.view("chk").await;
    assert_eq!(
        (stopped.change_id, stopped.prev_change_id),
        (None, down.change_id)
    );

    h.manager
        .act(CheckAction::Start, vec!["chk".into()])
        .await
        .unwrap();
    assert_eq!(h.view("chk").await.prev_change_id, None);
}

/// Pebble lists a disabled check that is not running afresh on every plan change, even one
/// that leaves it as it was: the failures and changes of the run a client stopped go; an
/// enabled one is started again.
#[tokio::test(start_paused = true)]
async fn a_plan_change_lists_a_stopped_disabled_check_afresh() {
    let mut config = check("chk");
    config.threshold = 1;
    config.startup = Startup::Disabled;
    let h = Harness::new(vec![config.clone()]);
    h.set("chk", Outcome::Fail("exit status 1", ""));
    h.manager
        .act(CheckAction::Start, vec!["chk".into()])
        .await
        .unwrap();
    pass(25.0).await;
    h.manager
        .act(CheckAction::Stop, vec!["chk".into()])
        .await
        .unwrap();
    let stopped = h.view("chk").await;
    assert!(stopped.failures >= 1, "{stopped:?}");
    assert!(stopped.prev_change_id.is_some(), "{stopped:?}");

    h.plan.send(plan(vec![config])).unwrap();
    let listed = h.view("chk").await;
    assert_eq!(
        (
            listed.status,
            listed.failures,
            listed.change_id,
            listed.prev_change_id
        ),
        (CheckStatus::Inactive, 0, None, None)
    );
    assert_eq!(listed.failure_count, stopped.failure_count);
}

fn recover_id(change: &ChangeInfo) -> Option<u64> {
    change.id.parse().ok()
}

#[tokio::test(start_paused = true)]
async fn timeout_is_clamped_to_the_period_and_reported() {
    let mut config = check("chk");
    config.period = secs(2);
    config.timeout = secs(5);
    config.threshold = 1;
    let h = Harness::new(vec![config]);
    h.set("chk", Outcome::Hang);
    let perform = h.view("chk").await.change_id;
    pass(2.0 + 2.5).await;
    let view = h.view("chk").await;
    assert_eq!(view.status, CheckStatus::Down);
    let failed = h.change(perform);
    assert_eq!(log_messages(&failed), ["ERROR check timed out after 2s"]);
}

#[tokio::test(start_paused = true)]
async fn plan_changes_apply_at_once() {
    let mut disabled = check("off");
    disabled.startup = Startup::Disabled;
    let h = Harness::new(vec![
        check("same"),
        check("changed"),
        check("gone"),
        disabled,
    ]);
    let same = h.view("same").await.change_id;
    let changed = h.view("changed").await.change_id;
    let gone = h.view("gone").await.change_id;
    let off = h.view("off").await;
    assert_eq!((off.status, off.change_id), (CheckStatus::Inactive, None));
    assert!(!off.startup_enabled);
    h.set("changed", Outcome::Fail("exit status 1", ""));
    pass(10.5).await;
    assert_eq!(h.view("changed").await.failures, 1);

    let mut modified = check("changed");
    modified.threshold = 6;
    h.plan
        .send(plan(vec![check("same"), modified, check("new")]))
        .unwrap();
    let checks = h.manager.checks().await;
    let names: Vec<&str> = checks.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["changed", "new", "same"]);
    assert_eq!(h.view("same").await.change_id, same);
    let view = h.view("changed").await;
    assert_ne!(view.change_id, changed);
    assert_eq!((view.failures, view.threshold), (0, 6));
    assert_eq!(h.view("new").await.status, CheckStatus::Up);
    pass(0.1).await;
    assert_eq!(h.change(changed).status, "Done");
    assert_eq!(h.change(gone).status, "Done");
}

#[tokio::test(start_paused = true)]
async fn a_running_check_changed_to_disabled_keeps_running() {
    let h = Harness::new(vec![check("chk")]);
    let running = h.view("chk").await.change_id;
    let mut disabled = check("chk");
    disabled.startup = Startup::Disabled;
    h.plan.send(plan(vec![disabled])).unwrap();
    let view = h.view("chk").await;
    assert_eq!((view.status, view.change_id), (CheckStatus::Up, running));
}

#[tokio::test(start_paused = true)]
async fn stop_and_start_are_idempotent_and_keep_failures() {
    let mut disabled = check("off");
    disabled.startup = Startup::Disabled;
    let h = Harness::new(vec![check("chk"), disabled]);
    h.set("chk", Outcome::Fail("exit status 1", ""));
    pass(10.5).await;
    let change = h.view("chk").await.change_id;

    let stopped = h
        .manager
        .act(
            CheckAction::Stop,
            vec!["off".into(), "chk".into(), "chk".into()],
        )
        .await;
    assert_eq!(stopped, Ok(vec!["chk".to_owned()]));
    let view = h.view("chk").await;
    assert_eq!(
        (view.status, view.change_id, view.failures),
        (CheckStatus::Inactive, None, 1)
    );
    pass(0.1).await;
    assert_eq!(h.change(change).status, "Done");
    // Stopped checks do not run, and do not count for health.
    let runs = h.runs("chk");
    pass(30.0).await;
    assert_eq!(h.runs("chk"), runs);
    assert_eq!(
        h.manager.act(CheckAction::Stop, vec!["chk".into()]).await,
        Ok(vec![])
    );
    let started = h
        .manager
        .act(CheckAction::Start, vec!["chk".into(), "off".into()])
        .await;
    assert_eq!(started, Ok(vec!["chk".to_owned(), "off".to_owned()]));
    let view = h.view("chk").await;
    assert_eq!((view.status, view.failures), (CheckStatus::Up, 0));
    assert_ne!(view.change_id, change);
}

/// As in Pebble, any plan change starts again an enabled check a client stopped, in a new
/// change; a disabled one that is not running stays inactive, and a running one whose
/// configuration did not change keeps its change.
#[tokio::test(start_paused = true)]
async fn a_plan_change_starts_again_an_enabled_check_a_client_stopped() {
    let mut disabled = check("off");
    disabled.startup = Startup::Disabled;
    let h = Harness::new(vec![check("chk"), check("kept"), disabled.clone()]);
    pass(0.1).await;
    let stopped_change = h.view("chk").await.change_id;
    let kept_change = h.view("kept").await.change_id;
    assert_eq!(
        h.manager.act(CheckAction::Stop, vec!["chk".into()]).await,
        Ok(vec!["chk".to_owned()])
    );
    assert_eq!(h.view("chk").await.status, CheckStatus::Inactive);

    // The same checks in a plan of its own, as a layer with only a summary makes.
    h.plan
        .send(plan(vec![check("chk"), check("kept"), disabled]))
        .unwrap();
    let view = h.view("chk").await;
    assert_eq!(view.status, CheckStatus::Up);
    assert!(view.change_id.is_some());
    assert_ne!(view.change_id, stopped_change);
    assert_eq!(h.view("kept").await.change_id, kept_change);
    let off = h.view("off").await;
    assert_eq!((off.status, off.change_id), (CheckStatus::Inactive, None));
}

#[tokio::test(start_paused = true)]
async fn unknown_names_change_nothing() {
    let h = Harness::new(vec![check("chk")]);
    let before = h.manager.checks().await;
    assert_eq!(
        h.manager
            .act(
                CheckAction::Stop,
                vec!["zz".into(), "chk".into(), "aa".into()]
            )
            .await,
        Err(CheckManagerError::NotFound(vec!["aa".into(), "zz".into()]))
    );
    assert_eq!(
        h.manager
            .act(CheckAction::Start, vec!["nope".into()])
            .await
            .unwrap_err()
            .to_string(),
        "cannot find checks in plan: nope"
    );
    assert_eq!(h.manager.checks().await, before);
    assert_eq!(
        h.manager.refresh("nope").await.unwrap_err(),
        CheckManagerError::NoSuchCheck("nope".into())
    );
}

#[tokio::test(start_paused = true)]
async fn refresh_runs_now_and_records_only_for_running_checks() {
    let h = Harness::new(vec![check("chk")]);
    let (view, error) = h.manager.refresh("chk").await.unwrap();
    assert_eq!(
        (view.status, view.successes, error),
        (CheckStatus::Up, 1, None)
    );

    h.set("chk", Outcome::Fail("exit status 1", "details"));
    let (view, error) = h.manager.refresh("chk").await.unwrap();
    assert_eq!(view.failures, 1);
    assert_eq!(error.unwrap().log_text(), "exit status 1; details");

    h.manager
        .act(CheckAction::Stop, vec!["chk".into()])
        .await
        .unwrap();
    let (view, error) = h.manager.refresh("chk").await.unwrap();
    assert_eq!((view.status, view.failures), (CheckStatus::Inactive, 1));
    assert_eq!(error.unwrap().message, "exit status 1");
}

#[tokio::test(start_paused = true)]
async fn a_refresh_starts_the_period_again() {
    let h = Harness::new(vec![check("chk")]);
    pass(6.0).await;
    h.manager.refresh("chk").await.unwrap();
    assert_eq!(h.runs("chk"), 1);
    // Not at 10 s, where the check's first period ended, but 10 s after the refresh.
    pass(9.8).await;
    assert_eq!(h.runs("chk"), 1);
    pass(0.4).await;
    assert_eq!(h.runs("chk"), 2);
}

#[tokio::test(start_paused = true)]
async fn aborting_the_change_stops_the_check() {
    let h = Harness::new(vec![check("chk")]);
    let change = h.view("chk").await.change_id.unwrap();
    h.store.abort(change).unwrap();
    pass(0.1).await;
    let view = h.view("chk").await;
    assert_eq!((view.status, view.change_id), (CheckStatus::Inactive, None));
    assert_eq!(h.store.change_info(change).unwrap().status, "Done");
    assert_eq!(
        h.manager.act(CheckAction::Start, vec!["chk".into()]).await,
        Ok(vec!["chk".into()])
    );
}

#[tokio::test(start_paused = true)]
async fn replan_starts_enabled_checks_that_are_not_running() {
    let mut disabled = check("off");
    disabled.startup = Startup::Disabled;
    let h = Harness::new(vec![check("chk"), disabled]);
    h.manager
        .act(CheckAction::Stop, vec!["chk".into()])
        .await
        .unwrap();
    assert_eq!(h.manager.replan().await, ["chk"]);
    assert_eq!(h.view("chk").await.status, CheckStatus::Up);
    assert_eq!(h.view("off").await.status, CheckStatus::Inactive);
}

#[tokio::test(start_paused = true)]
async fn a_modified_check_starts_its_counters_again_and_an_unchanged_one_keeps_them() {
    let h = Harness::new(vec![check("chk"), check("kept")]);
    h.set("chk", Outcome::Fail("exit status 1", ""));
    h.set("kept", Outcome::Fail("exit status 1", ""));
    pass(25.0).await;
    let before = h.view("chk").await;
    assert!(before.failure_count >= 2, "{before:?}");
    // A layer changes chk's threshold: Pebble drops its data, so its counters start again.
    let mut changed = check("chk");
    changed.threshold = 5;
    h.plan.send(plan(vec![changed, check("kept")])).unwrap();
    let after = h.view("chk").await;
    assert_eq!(
        (after.success_count, after.failure_count, after.action_count),
        (0, 0, 0)
    );
    assert_ne!(after.change_id, before.change_id);
    assert_eq!(after.threshold, 5);
    assert!(h.view("kept").await.failure_count >= 2);
}

#[tokio::test(start_paused = true)]
async fn a_check_disabled_while_running_runs_the_plans_configuration_once_started_again() {
    let mut first = check("chk");
    first.level = CheckLevel::Alive;
    first.threshold = 1;
    let h = Harness::new(vec![first.clone()]);
    pass(0.1).await;
    let running = h.view("chk").await.change_id;
    // Merged to ready, disabled, threshold 2: it keeps running as it was.
    let mut merged = first;
    merged.level = CheckLevel::Ready;
    merged.startup = Startup::Disabled;
    merged.threshold = 2;
    h.plan.send(plan(vec![merged.clone()])).unwrap();
    let view = h.view("chk").await;
    assert_eq!(
        (view.level, view.threshold, view.change_id),
        (CheckLevel::Alive, 1, running)
    );
    // A later plan change with the same configuration leaves it running too.
    h.plan.send(plan(vec![merged])).unwrap();
    assert_eq!(h.view("chk").await.change_id, running);
    // Stopped, it lists the plan's configuration, with its counters kept; started, it runs it.
    h.manager
        .act(CheckAction::Stop, vec!["chk".into()])
        .await
        .unwrap();
    let view = h.view("chk").await;
    assert_eq!(
        (
            view.level,
            view.threshold,
            view.startup_enabled,
            view.status
        ),
        (CheckLevel::Ready, 2, false, CheckStatus::Inactive)
    );
    h.manager
        .act(CheckAction::Start, vec!["chk".into()])
        .await
        .unwrap();
    let view = h.view("chk").await;
    assert_eq!(
        (view.level, view.threshold, view.startup_enabled),
        (CheckLevel::Ready, 2, false)
    );
}

impl Harness {
    /// What a re-executed daemon starts from: the checks `take_over` handed over, and the
    /// state as the state file carries it, with their tasks kept in progress.
    async fn reexecuted(&self) -> Harness {
        let carried = self.manager.take_over().await;
        // Through the handover document's JSON.
        let carried: Vec<super::CarriedCheck> =
            serde_json::from_slice(&serde_json::to_vec(&carried).unwrap()).unwrap();
        let keep: Vec<u64> = carried.iter().filter_map(|c| c.task_id).collect();
        let bytes = self.store.snapshot_json();
        let store = StateStore::keeping(crate::state::format::decode(&bytes).unwrap(), &keep);
        let factory = {
            let script = self.script.clone();
            Arc::new(move |config: &Check| {
                Arc::new(Scripted {
                    name: config.name.clone(),
                    script: script.clone(),
                }) as Arc<dyn Checker>
            })
        };
        let (manager, _task) =
            CheckManager::spawn_carrying(self.plan.subscribe(), store.clone(), factory, carried);
        Harness {
            plan: self.plan.clone(),
            store,
            manager,
            script: self.script.clone(),
        }
    }
}

/// The listing of a check, without what belongs to one program (the generation) and its
/// last success (see [`same_last_success`]).
fn listed(mut view: CheckView) -> CheckView {
    view.generation = 0;
    view.last_success = None;
    view
}

/// Whether two listings' last successes are the same, but for the swap's own time (on the
/// real monotonic clock, which paused time does not stop), less than a second.
fn same_last_success(a: &[CheckView], b: &[CheckView]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(a, b)| match (a.last_success, b.last_success) {
                (Some(x), Some(y)) => x.max(y) - x.min(y) < Duration::from_secs(1),
                (x, y) => x == y,
            })
}

#[tokio::test(start_paused = true)]
async fn a_reexecution_hands_every_check_over_with_its_streak_change_and_schedule() {
    let mut failing = check("failing");
    failing.threshold = 2;
    let mut disabled = check("disabled");
    disabled.startup = Startup::Disabled;
    let h = Harness::new(vec![failing, check("passing"), check("stopped"), disabled]);
    h.set("failing", Outcome::Pass);
    pass(10.5).await;
    h.set("failing", Outcome::Fail("exit status 1", "details"));
    pass(10.0).await;
    h.manager
        .act(CheckAction::Stop, vec!["stopped".into()])
        .await
        .unwrap();
    pass(4.0).await;
    let before = h.manager.checks().await;
    let failing_before = h.view("failing").await;
    assert_eq!((failing_before.successes, failing_before.failures), (1, 1));
    let perform = failing_before.change_id;
    assert!(failing_before.last_success.is_some());
    let runs = h.runs("failing");

    let h = Arc::new(h.reexecuted().await);
    let after = h.manager.checks().await;
    assert!(same_last_success(&after, &before), "{after:?} {before:?}");
    assert_eq!(
        after.into_iter().map(listed).collect::<Vec<_>>(),
        before.into_iter().map(listed).collect::<Vec<_>>()
    );
    // The same change, its task still running, its log kept.
    let change = h.change(perform);
    assert_eq!(change.status, "Doing");
    assert_eq!(log_messages(&change), ["ERROR exit status 1; details"]);
    // The next run is when it was due (10 s after the last, 5.5 s from here), not at once
    // and not a whole period from the swap.
    pass(5.3).await;
    assert_eq!(h.runs("failing"), runs);
    pass(0.4).await;
    assert_eq!(h.runs("failing"), runs + 1);
    // That second failure is the threshold: the same change fails, a recover change starts.
    let view = h.view("failing").await;
    assert_eq!(view.status, CheckStatus::Down);
    assert_eq!(view.prev_change_id, perform);
    assert_eq!(h.change(perform).status, "Error");
    let recover = h.change(view.change_id);
    assert_eq!(
        (recover.kind.as_str(), recover.status.as_str()),
        ("recover-check", "Doing")
    );
    assert_eq!(h.firing(), Firing::from([("failing".into(), 1)]));
    // Stopped and disabled checks stay inactive.
    assert_eq!(h.view("stopped").await.status, CheckStatus::Inactive);
    assert_eq!(h.view("disabled").await.status, CheckStatus::Inactive);

    // Handed over again while recovering, it recovers under the next program.
    let h = h.reexecuted().await;
    assert_eq!(h.view("failing").await.change_id, view.change_id);
    h.set("failing", Outcome::Pass);
    pass(10.5).await;
    let recovered = h.view("failing").await;
    assert_eq!(recovered.status, CheckStatus::Up);
    assert_eq!(recovered.prev_change_id, view.change_id);
    assert_eq!(h.change(view.change_id).status, "Done");
    assert_eq!(h.change(recovered.change_id).kind, "perform-check");
    assert!(h.firing().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_check_disabled_while_running_runs_on_as_it_ran_under_the_new_program() {
    let mut first = check("chk");
    first.level = CheckLevel::Alive;
    first.threshold = 1;
    let h = Harness::new(vec![first.clone()]);
    h.set("chk", Outcome::Fail("exit status 1", ""));
    pass(10.5).await;
    let mut merged = first;
    merged.level = CheckLevel::Ready;
    merged.startup = Startup::Disabled;
    merged.threshold = 2;
    merged.period = secs(1);
    h.plan.send(plan(vec![merged])).unwrap();
    let before = h.view("chk").await;
    assert_eq!((before.level, before.threshold), (CheckLevel::Alive, 1));
    let runs = h.runs("chk");

    let h = h.reexecuted().await;
    let after = h.view("chk").await;
    assert_eq!(listed(after), listed(before.clone()));
    // Still every 10 s (its own period), not every second (the plan's): the next run is
    // due 10 s after the first, 9.5 s from the swap.
    pass(9.3).await;
    assert_eq!(h.runs("chk"), runs);
    pass(0.4).await;
    assert_eq!(h.runs("chk"), runs + 1);
    let view = h.view("chk").await;
    assert_eq!(
        (view.level, view.threshold, view.failures),
        (CheckLevel::Alive, 1, 2)
    );
    // Stopped and started again, it runs the plan's configuration.
    h.manager
        .act(CheckAction::Stop, vec!["chk".into()])
        .await
        .unwrap();
    h.manager
        .act(CheckAction::Start, vec!["chk".into()])
        .await
        .unwrap();
    let view = h.view("chk").await;
    assert_eq!((view.level, view.threshold), (CheckLevel::Ready, 2));
}

#[tokio::test(start_paused = true)]
async fn checks_taken_over_resume_as_they_stood_when_the_reexecution_fails() {
    let h = Harness::new(vec![check("chk")]);
    h.set("chk", Outcome::Fail("exit status 1", ""));
    pass(10.5).await;
    let before = h.view("chk").await;
    let carried = h.manager.take_over().await;
    pass(30.0).await;
    // Nothing runs while taken over.
    assert_eq!(h.runs("chk"), 1);
    assert_eq!(listed(h.view("chk").await), listed(before.clone()));
    h.manager.resume(carried);
    // Its next run as it was due when taken over: 9.5 s on, in the same change.
    pass(9.3).await;
    assert_eq!(h.runs("chk"), 1);
    pass(0.4).await;
    assert_eq!(h.runs("chk"), 2);
    let view = h.view("chk").await;
    assert_eq!((view.failures, view.change_id), (2, before.change_id));
}

#[tokio::test(start_paused = true)]
async fn a_run_in_flight_at_a_reexecution_runs_again_at_once_under_the_new_program() {
    let mut config = check("chk");
    config.timeout = secs(5);
    let h = Harness::new(vec![config]);
    h.set("chk", Outcome::Hang);
    pass(11.0).await;
    assert_eq!(h.runs("chk"), 1);
    let change = h.view("chk").await.change_id;
    let h = h.reexecuted().await;
    pass(0.1).await;
    assert_eq!(h.runs("chk"), 2);
    // Its timeout counts from that run: one failure, in the same change.
    pass(5.0).await;
    let view = h.view("chk").await;
    assert_eq!((view.failures, view.change_id), (1, change));
}
