//! `schedule:` on a real daemon and real time: a service scheduled every minute is started
//! at the next minute boundary, not when the schedule is added; its run is a Done change
//! that says the schedule started it; the listing, `services` and `why` show its next run;
//! and a bad schedule is refused with the plan left as it was.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cobble_client::ChangeSelector;
use cobble_client::Method;

use crate::fixture::{Daemon, Test, client, details_of, lines, raw, rt, service, wait_for};

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn add(d: &Daemon, layer: &str) -> (u16, String) {
    let body = serde_json::json!({
        "action": "add", "combine": true, "label": "jobs", "format": "yaml", "layer": layer,
    });
    raw(d, Method::POST, "/v1/layers", Some(&body.to_string()))
}

#[test]
fn a_service_scheduled_every_minute_runs_at_the_next_boundary_as_a_done_change() {
    let d = Daemon::hold(&[(
        "001-base",
        "services:\n  web:\n    override: replace\n    command: sleep 1000\n",
    )]);
    // Without a schedule anywhere, nothing new: no `scheduled` field, no column.
    let (_, listing) = raw(&d, Method::GET, "/v1/services", None);
    assert!(!listing.contains("scheduled"), "{listing}");
    Test::daemon(&d)
        .args(&["services"])
        .stdout("Service  Startup   Current   Since\nweb      disabled  inactive  -\n")
        .run();

    let runs = d.scratch().join("runs");
    let job_runs = d.scratch().join("job-runs");
    // `tick` runs longer than the okay delay, so that its start is done while it runs;
    // `job` is a one-shot, done when it has completed, however quickly.
    let layer = format!(
        "services:\n  tick:\n    override: replace\n    \
         command: sh -c 'date +%s.%N >> {}; sleep 1.5'\n    \
         on-success: ignore\n    schedule: 00:00-24:00/1440\n  \
         job:\n    override: replace\n    type: oneshot\n    \
         command: sh -c 'date +%s.%N >> {}'\n    schedule: 00:00-24:00/1440\n",
        runs.display(),
        job_runs.display()
    );
    let added = now();
    let (status, answer) = add(&d, &layer);
    assert_eq!(status, 200, "{answer}");

    // Scheduled for the next minute boundary; nothing runs on adding it.
    let tick = service(&d, "tick");
    let scheduled = tick.scheduled.clone().expect("a next run");
    let next: jiff::Timestamp = scheduled.parse().unwrap();
    let next = next.as_millisecond() as f64 / 1000.0;
    assert_eq!(next % 60.0, 0.0, "{scheduled}");
    assert!(next > added - 1.0 && next <= added + 61.0, "{scheduled}");
    assert_eq!(tick.current, "inactive");
    assert!(service(&d, "web").scheduled.is_none());
    let (_, listing) = raw(&d, Method::GET, "/v1/services?names=web", None);
    assert!(!listing.contains("scheduled"), "{listing}");
    let table = Test::daemon(&d)
        .args(&["services", "--abs-time"])
        .any_stdout()
        .run()
        .stdout;
    assert!(
        table.starts_with("Service  Startup   Current   Since  Scheduled\n"),
        "{table}"
    );
    let why = Test::daemon(&d)
        .args(&["why", "tick"])
        .any_stdout()
        .run()
        .stdout;
    assert!(
        why.contains("Schedule:       00:00-24:00/1440, next run "),
        "{why}"
    );
    assert!(
        why.contains("Last run:       none since the daemon started\n"),
        "{why}"
    );

    // The run: at the boundary (started within a few seconds of it on a loaded machine,
    // never before it).
    wait_for("the scheduled run", Duration::from_secs(75), || {
        !lines(&runs).is_empty()
    });
    let ran: f64 = lines(&runs)[0].parse().unwrap();
    assert!(ran >= next, "ran at {ran}, scheduled for {next}");
    assert!(ran < next + 30.0, "ran at {ran}, scheduled for {next}");

    let c = client(&d);
    let change = rt().block_on(async {
        let changes = c
            .changes(ChangeSelector::All, Some("tick"))
            .await
            .expect("changes");
        assert_eq!(changes.len(), 1, "{changes:?}");
        c.wait_change(&changes[0].id, Some(Duration::from_secs(30)))
            .await
            .expect("wait")
    });
    assert_eq!(change.status, "Done", "{change:?}");
    assert_eq!(change.kind, "start");
    assert_eq!(
        change.summary,
        "Start service \"tick\" on its schedule \"00:00-24:00/1440\""
    );
    assert_eq!(change.tasks.len(), 1, "{change:?}");
    assert_eq!(change.tasks[0].status, "Done");

    // The next run is the boundary after, and the details tell of the last.
    wait_for("the run's outcome", Duration::from_secs(10), || {
        details_of(&d, "tick")
            .schedule
            .is_some_and(|s| s.last_outcome == "done")
    });
    let schedule = details_of(&d, "tick").schedule.unwrap();
    assert_eq!(schedule.last_change_id, change.id);
    let following: jiff::Timestamp = schedule.next_run.clone().unwrap().parse().unwrap();
    assert_eq!(
        following.as_millisecond() as f64 / 1000.0,
        next + 60.0,
        "{schedule:?}"
    );
    assert_eq!(service(&d, "tick").scheduled, schedule.next_run);
    Test::daemon(&d)
        .args(&["why", "tick"])
        .stdout_contains(&format!("(change {}), done\n", change.id))
        .run();

    // The one-shot ran once at the same boundary, its change is done, and it stands
    // completed with its next run ahead.
    wait_for(
        "the one-shot's run to be done",
        Duration::from_secs(30),
        || {
            details_of(&d, "job")
                .schedule
                .is_some_and(|s| s.last_outcome == "done")
        },
    );
    let job_ran: Vec<f64> = lines(&job_runs)
        .iter()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(job_ran.len(), 1, "{job_ran:?}");
    assert!(
        job_ran[0] >= next,
        "ran at {}, scheduled for {next}",
        job_ran[0]
    );
    let job = service(&d, "job");
    assert_eq!(
        (job.current.as_str(), job.reason.as_deref()),
        ("inactive", Some("completed"))
    );
    assert_eq!(job.scheduled, schedule.next_run);
    let details = details_of(&d, "job");
    assert_eq!(details.last_completion.expect("a completion").exit_code, 0);
    let job_change = rt().block_on(async {
        let changes = c
            .changes(ChangeSelector::All, Some("job"))
            .await
            .expect("changes");
        assert_eq!(changes.len(), 1, "{changes:?}");
        changes.into_iter().next().unwrap()
    });
    assert_eq!(job_change.status, "Done", "{job_change:?}");
    assert_eq!(job_change.kind, "start");
    // Each scheduled service's runs and skips are counted in the metrics.
    let (status, metrics) = raw(&d, Method::GET, "/v1/metrics", None);
    assert_eq!(status, 200, "{metrics}");
    for service in ["job", "tick"] {
        assert!(
            metrics.contains(&format!(
                "cobble_service_scheduled_runs_total{{service=\"{service}\"}} 1\n"
            )),
            "{metrics}"
        );
        assert!(
            metrics.contains(&format!(
                "cobble_service_scheduled_skips_total{{service=\"{service}\"}} 0\n"
            )),
            "{metrics}"
        );
    }
    assert!(
        !metrics.contains("scheduled_runs_total{service=\"web\"}"),
        "{metrics}"
    );
}

#[test]
fn a_bad_schedule_refuses_the_layer_and_leaves_the_plan_as_it_was() {
    let d = Daemon::hold(&[(
        "001-base",
        "services:\n  job:\n    override: replace\n    command: sleep 1\n    schedule: \"10:00\"\n",
    )]);
    let (_, before) = raw(&d, Method::GET, "/v1/plan?format=yaml", None);
    assert!(
        before.contains("schedule: \\\"10:00\\\"") || before.contains("schedule:"),
        "{before}"
    );
    let (status, answer) = add(
        &d,
        "services:\n  job:\n    override: merge\n    schedule: mon-fri,9:00-17:00/0\n",
    );
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer.contains(
            r#"plan service \"job\" schedule \"mon-fri,9:00-17:00/0\" invalid: cannot parse \"9:00-17:00/0\": not a valid event count"#
        ),
        "{answer}"
    );
    let (_, after) = raw(&d, Method::GET, "/v1/plan?format=yaml", None);
    assert_eq!(before, after);
    assert_eq!(details_of(&d, "job").schedule.unwrap().schedule, "10:00");
}
