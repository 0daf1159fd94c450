//! `GET /v1/services`, and why a service is where it is: the plan joined with the
//! supervisor's view and with the checks that act on each service.
//!
//! The listing carries a one-line `reason` (Pebble clients ignore it) and, with
//! `details=true`, the facts behind it; `cobble why` prints them. The service manager knows
//! exits, backoff and waiting paths of the services it started; the check manager knows which
//! checks are down; the plan knows every service. This module joins the three without any of
//! them knowing about the others.
//!
//! Clients poll the listing and a plan may hold thousands of services, so the join writes the
//! JSON straight from the plan and the reports as it walks them, in one pass over both (they
//! are sorted the same way), copying no string of a service that has nothing to add.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::iter::Peekable;

use cobble_client::types::{
    CheckRestarts, Completion, FailingCheck, HeldAction, HeldSocketDetails, ScheduleDetails,
    ServiceDetails as WireDetails, ServiceUsage, WaitingOneshot, WatchdogDetails,
};
use cobble_plan::{Plan, Service};

use crate::checks::{CheckManager, CheckStatus, CheckView};
use crate::layers::PlanManager;
use crate::services::machine::Status;
use crate::services::scheduler::{RunOutcome, ScheduleStatus, ScheduleStatuses, Scheduler};
use crate::services::{ServiceManager, ServiceStatus};
use cobble_client::time::{format_rfc3339_nano, format_rfc3339_secs};

/// `GET /v1/services` as the managers report it now: the plan, the supervisor's reports on
/// the services in `names` (every service when empty), the scheduler's next runs and, only
/// when a listed service can be explained by a check, the checks. `answer` gets the
/// listing, which borrows what was gathered, and makes the response of it.
pub(crate) async fn current<R>(
    plan: &PlanManager,
    services: &ServiceManager,
    schedules: &Scheduler,
    checks: &CheckManager,
    names: Vec<String>,
    details: bool,
    answer: impl FnOnce(ServiceListing<'_>) -> R,
) -> R {
    let plan = plan.plan();
    let mut started = services.statuses(names.clone(), details).await;
    if details {
        started = services.with_process_details(started).await;
    }
    let selected: BTreeSet<&str> = names.iter().map(String::as_str).collect();
    let schedules = schedules.statuses_for(&plan).await;
    let listing = ServiceListing::new(
        &plan,
        (!names.is_empty()).then_some(&selected),
        &started,
        details,
    )
    .with_schedules(&schedules);
    // Skip the check snapshot on this hot path unless a check can explain a listed service.
    let checks = if listing.acts_on_checks() {
        checks.checks().await
    } else {
        Vec::new()
    };
    answer(listing.with_checks(&checks))
}

/// The `result` of `GET /v1/services`: the plan's services (those named, or all), sorted by
/// name, each with what the supervisor reports if it started it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServiceListing<'a> {
    plan: &'a Plan,
    /// The names asked for; `None` for every service.
    names: Option<&'a BTreeSet<&'a str>>,
    /// The supervisor's reports on the started ones, sorted by name.
    started: &'a [ServiceStatus],
    /// The checks, when some listed service acts on checks.
    checks: &'a [CheckView],
    /// What the scheduler knows of the services that have a schedule.
    schedules: Option<&'a ScheduleStatuses>,
    with_details: bool,
}

impl<'a> ServiceListing<'a> {
    /// The listing of `names` (every service when `None`), with `started` as reported by
    /// [`crate::services::ServiceManager::statuses`] for the same names.
    pub(crate) fn new(
        plan: &'a Plan,
        names: Option<&'a BTreeSet<&'a str>>,
        started: &'a [ServiceStatus],
        with_details: bool,
    ) -> ServiceListing<'a> {
        ServiceListing {
            plan,
            names,
            started,
            checks: &[],
            schedules: None,
            with_details,
        }
    }

    /// The same listing, with the scheduler's next runs.
    #[must_use]
    pub(crate) fn with_schedules(self, schedules: &'a ScheduleStatuses) -> ServiceListing<'a> {
        ServiceListing {
            schedules: Some(schedules),
            ..self
        }
    }

    /// What the scheduler knows of `name`, when the plan gives it a schedule.
    fn schedule_of(&self, name: &str, config: &Service) -> Option<&'a ScheduleStatus> {
        if config.schedule.is_empty() {
            return None;
        }
        self.schedules?.get(name)
    }

    /// Whether a listed service can be explained by a check: only then does the listing need
    /// the checks (see [`ServiceListing::with_checks`]).
    pub(crate) fn acts_on_checks(&self) -> bool {
        !self.plan.checks.is_empty()
            && self.started.iter().any(|status| {
                self.plan
                    .services
                    .get(&status.name)
                    .is_some_and(|config| !config.on_check_failure.is_empty())
            })
    }

    /// The same listing, explaining services by these checks.
    #[must_use]
    pub(crate) fn with_checks(self, checks: &'a [CheckView]) -> ServiceListing<'a> {
        ServiceListing { checks, ..self }
    }

    /// About the size of the listing's JSON, so it can be written without growing its buffer.
    pub(crate) fn size_hint(&self) -> usize {
        // `{"name":"","startup":"disabled","current":"inactive"},`, plus `current-since` and
        // the reason of a started service.
        let plain: usize = self.entries().map(|(name, _)| name.len() + 56).sum();
        let started: usize = self
            .started
            .iter()
            .map(|s| 52 + s.reason.as_ref().map_or(0, |r| r.len() + 12))
            .sum();
        let notes: usize = self.plan.notes.values().map(|n| n.len() + 12).sum();
        plain + started + notes
    }

    /// The listed services of the plan, sorted by name.
    fn entries(&self) -> Box<dyn Iterator<Item = (&'a String, &'a Service)> + 'a> {
        let services = &self.plan.services;
        match self.names {
            None => Box::new(services.iter()),
            Some(names) => Box::new(
                names
                    .iter()
                    .filter_map(|name| services.get_key_value(*name)),
            ),
        }
    }

    /// The down checks among those `config` acts on.
    fn failing(&self, config: &Service) -> Vec<&'a CheckView> {
        if config.on_check_failure.is_empty() {
            return Vec::new();
        }
        self.checks
            .iter()
            .filter(|c| c.status == CheckStatus::Down)
            .filter(|c| config.on_check_failure.contains_key(&c.name))
            .collect()
    }
}

impl ServiceListing<'_> {
    /// The listing's JSON (see [`ServiceListing::write_json`]).
    #[cfg(test)]
    pub(crate) fn to_json(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.size_hint());
        self.write_json(&mut out);
        out
    }

    /// Appends the listing's JSON to `out`, written directly: an entry of a service that was
    /// never started is a few copies of its name and fixed text, where a serializer would
    /// make a call per piece of punctuation and look at every byte of every string. The bytes
    /// are exactly what serde_json writes for the same entries (see the tests); details, rare
    /// and nested, still go through it.
    pub(crate) fn write_json(&self, out: &mut Vec<u8>) {
        out.push(b'[');
        let mut started = self.started.iter().peekable();
        // What the configuration says is wrong, for any service, started or not. Nearly
        // every plan has nothing: then this is one emptiness check for the whole listing.
        let notes = &self.plan.notes;
        let note_of = |name: &str| (!notes.is_empty()).then(|| notes.get(name)).flatten();
        for (index, (name, config)) in self.entries().enumerate() {
            if index > 0 {
                out.push(b',');
            }
            let report = report_of(&mut started, name);
            let note = note_of(name);
            let schedule = self.schedule_of(name, config);
            out.extend_from_slice(b"{\"name\":");
            json_str(out, name);
            if report.is_none() && note.is_none() && schedule.is_none() {
                // The entry of nearly every service of a large plan, in one piece.
                out.extend_from_slice(if config.is_enabled() {
                    INACTIVE_ENABLED
                } else {
                    INACTIVE_DISABLED
                });
                continue;
            }
            out.extend_from_slice(b",\"startup\":\"");
            out.extend_from_slice(startup(config).as_bytes());
            out.extend_from_slice(b"\",\"current\":\"");
            match report {
                None => {
                    out.extend_from_slice(Status::Inactive.as_str().as_bytes());
                    out.push(b'"');
                    write_scheduled(out, schedule);
                    if let Some(note) = note {
                        out.extend_from_slice(b",\"reason\":");
                        json_str(out, note);
                    }
                    if let Some(schedule) = schedule.filter(|_| self.with_details) {
                        let details = WireDetails {
                            schedule: Some(schedule_details(schedule)),
                            ..WireDetails::default()
                        };
                        out.extend_from_slice(b",\"details\":");
                        serde_json::to_writer(&mut *out, &details).expect("details serialise");
                    }
                }
                Some(status) => {
                    out.extend_from_slice(status.current.as_str().as_bytes());
                    out.push(b'"');
                    if let Some(since) = &status.since {
                        out.extend_from_slice(b",\"current-since\":");
                        json_str(out, since);
                    }
                    write_scheduled(out, schedule);
                    let failing = self.failing(config);
                    if let Some(reason) = with_note(reason(status, &failing), note) {
                        out.extend_from_slice(b",\"reason\":");
                        json_str(out, &reason);
                    }
                    if let Some(mut details) = self
                        .with_details
                        .then(|| wire_details(status, &failing, self.plan))
                        .flatten()
                    {
                        details.schedule = schedule.map(schedule_details);
                        out.extend_from_slice(b",\"details\":");
                        serde_json::to_writer(&mut *out, &details).expect("details serialise");
                    }
                }
            }
            out.push(b'}');
        }
        out.push(b']');
    }
}

/// `,"scheduled":"<next run>"` for a service with a schedule (and a next run).
fn write_scheduled(out: &mut Vec<u8>, schedule: Option<&ScheduleStatus>) {
    if let Some(next) = schedule.and_then(|s| s.next) {
        out.extend_from_slice(b",\"scheduled\":");
        json_str(out, &format_rfc3339_nano(next));
    }
}

/// The scheduler's facts on a service, for `details=true`.
fn schedule_details(status: &ScheduleStatus) -> ScheduleDetails {
    let last = status.last_run.as_ref();
    let (outcome, error) = match last.map(|run| &run.outcome) {
        None => ("", ""),
        Some(RunOutcome::Running) => ("running", ""),
        Some(RunOutcome::Done) => ("done", ""),
        Some(RunOutcome::Error(error)) => ("error", error.as_str()),
    };
    ScheduleDetails {
        schedule: status.schedule.clone(),
        next_run: status.next.map(format_rfc3339_nano),
        last_run: last.map(|run| format_rfc3339_nano(run.at)),
        last_change_id: last
            .and_then(|run| run.change_id)
            .map(|id| id.to_string())
            .unwrap_or_default(),
        last_outcome: outcome.into(),
        last_error: error.into(),
        last_skip: status.last_skip.map(format_rfc3339_nano),
        skips: status.skips,
    }
}

/// The rest of the entry of a service never started and with nothing to say, after its name.
const INACTIVE_ENABLED: &[u8] = b",\"startup\":\"enabled\",\"current\":\"inactive\"}";
const INACTIVE_DISABLED: &[u8] = b",\"startup\":\"disabled\",\"current\":\"inactive\"}";

/// Appends `text` as a JSON string, as serde_json writes it: as it is between quotes when
/// nothing in it needs escaping (names, times and most reasons), through serde_json when
/// something does.
fn json_str(out: &mut Vec<u8>, text: &str) {
    if text.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(&mut *out, text).expect("strings serialise");
    }
}

/// The report on `name`, if there is one; both sequences are sorted by name, so the reports
/// before it are of services that are not listed.
fn report_of<'s, I>(started: &mut Peekable<I>, name: &str) -> Option<&'s ServiceStatus>
where
    I: Iterator<Item = &'s ServiceStatus>,
{
    while started.next_if(|s| s.name.as_str() < name).is_some() {}
    started.next_if(|s| s.name == name)
}

fn startup(config: &Service) -> &'static str {
    if config.is_enabled() {
        "enabled"
    } else {
        "disabled"
    }
}

/// The supervisor's reason, with the failing checks that act on the service added.
fn reason<'s>(status: &'s ServiceStatus, failing: &[&CheckView]) -> Option<Cow<'s, str>> {
    if failing.is_empty() {
        return status.reason.as_deref().map(Cow::Borrowed);
    }
    let text = failing
        .iter()
        .map(|c| {
            let since = c
                .down_since
                .map(|t| format!(" since {}", format_rfc3339_secs(t)))
                .unwrap_or_default();
            let error = c
                .last_error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default();
            format!("check {} failing{since}{error}", c.name)
        })
        .collect::<Vec<_>>()
        .join("; ");
    Some(Cow::Owned(match &status.reason {
        Some(reason) => format!("{reason}; {text}"),
        None => text,
    }))
}

/// The reason with the plan's note on the service, if it has one, after it.
fn with_note<'s>(reason: Option<Cow<'s, str>>, note: Option<&'s String>) -> Option<Cow<'s, str>> {
    match (reason, note) {
        (reason, None) => reason,
        (None, Some(note)) => Some(Cow::Borrowed(note)),
        (Some(reason), Some(note)) => Some(Cow::Owned(format!("{reason}; {note}"))),
    }
}

/// The facts behind the reason, for `details=true`.
fn wire_details(
    status: &ServiceStatus,
    failing: &[&CheckView],
    plan: &Plan,
) -> Option<WireDetails> {
    let d = status.details.as_ref()?;
    let probes = if d.sockets.is_empty() {
        Vec::new()
    } else {
        plan.tcp_checks_on_sockets_of(&status.name)
    };
    Some(WireDetails {
        last_exit_code: d.last_exit,
        last_output: d.last_output.clone(),
        start_count: status.start_count,
        backoff_count: d.backoff_count,
        backoff_delay: if d.backoff_delay.is_zero() {
            String::new()
        } else {
            go_duration(d.backoff_delay)
        },
        backoff_until: d.backoff_until.map(format_rfc3339_nano),
        waiting_for: d.waiting_for.clone(),
        missing_paths: d.hints.clone(),
        failing_checks: failing
            .iter()
            .map(|c| FailingCheck {
                name: c.name.clone(),
                failures: c.failures,
                threshold: c.threshold,
                down_since: c.down_since.map(format_rfc3339_nano),
                last_error: c.last_error.clone().unwrap_or_default(),
                action_count: c.action_count,
            })
            .collect(),
        waiting_for_checks: d.waiting_checks.clone(),
        start_grace_until: d.grace_until.map(format_rfc3339_nano),
        held_actions: d
            .held
            .iter()
            .map(|(check, until)| HeldAction {
                check: check.clone(),
                until: format_rfc3339_nano(*until),
            })
            .collect(),
        check_restarts: d
            .check_restarts
            .iter()
            .map(|(check, restarts, next)| CheckRestarts {
                check: check.clone(),
                restarts: *restarts,
                next_after: format_rfc3339_nano(*next),
            })
            .collect(),
        last_exit_cause: d.last_exit_cause.clone().unwrap_or_default(),
        resources_not_enforced: d.unenforced.clone().unwrap_or_default(),
        usage: d.usage.as_ref().map(|u| ServiceUsage {
            memory_bytes: u.memory_bytes,
            cpu_seconds: u.cpu.as_secs_f64(),
            processes: u.processes,
            open_fds: u.open_fds,
            cgroup_memory_bytes: u.cgroup_memory_bytes,
            cgroup: u
                .cgroup
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
        }),
        last_completion: d.completed.map(|(at, ran_for)| Completion {
            exit_code: 0,
            at: format_rfc3339_nano(at),
            ran_for: go_duration(ran_for),
        }),
        waiting_for_oneshots: d
            .waiting_oneshots
            .iter()
            .map(|(name, state)| WaitingOneshot {
                name: name.clone(),
                state: state.clone(),
            })
            .collect(),
        watchdog: d.watchdog.as_ref().map(|w| WatchdogDetails {
            interval: go_duration(w.interval.unwrap_or_default()),
            last_ping: w.last_ping.map(format_rfc3339_nano),
            deadline: w.deadline.map(format_rfc3339_nano),
        }),
        sockets: d
            .sockets
            .iter()
            .map(|socket| HeldSocketDetails {
                name: socket.name.clone(),
                listen: socket.listen.clone(),
                error: socket.error.clone().unwrap_or_default(),
                probed_by: probes
                    .iter()
                    .filter(|probe| probe.socket == socket.name)
                    .map(|probe| probe.check.clone())
                    .collect(),
            })
            .collect(),
        schedule: None,
    })
}

/// `d` as Go prints a duration (`"4s"`).
fn go_duration(d: std::time::Duration) -> String {
    cobble_plan::format_duration(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use cobble_client::types::ServiceInfoRef;
    use cobble_plan::{Check, CheckLevel, ServiceAction, Startup};
    use proptest::prelude::*;

    use super::*;
    use crate::services::status::ServiceDetails;

    proptest! {
        /// Strings are written byte for byte as serde_json writes them, whatever they hold.
        #[test]
        fn strings_are_written_as_serde_json_writes_them(text in any::<String>()) {
            let mut out = Vec::new();
            json_str(&mut out, &text);
            prop_assert_eq!(out, serde_json::to_vec(&text).unwrap());
        }

        /// A listing of services never started, with any names and notes, is byte for byte
        /// what serde_json makes of the same entries.
        #[test]
        fn a_listing_is_what_serde_json_writes(
            services in proptest::collection::btree_map(
                any::<String>(),
                (any::<bool>(), proptest::option::of(any::<String>())),
                0..20,
            )
        ) {
            let mut plan = Plan::default();
            for (name, (enabled, note)) in &services {
                let startup = if *enabled { Startup::Enabled } else { Startup::Disabled };
                plan.services.insert(name.clone(), Service { startup, ..Service::default() });
                if let Some(note) = note {
                    plan.notes.insert(name.clone(), note.clone());
                }
            }
            let listing = ServiceListing::new(&plan, None, &[], false);
            let expected: Vec<ServiceInfoRef<'_>> = plan
                .services
                .iter()
                .map(|(name, config)| ServiceInfoRef {
                    name,
                    startup: startup(config),
                    current: "inactive",
                    current_since: None,
                    scheduled: None,
                    reason: plan.notes.get(name).map(String::as_str),
                    details: None,
                })
                .collect();
            prop_assert_eq!(listing.to_json(), serde_json::to_vec(&expected).unwrap());
        }
    }

    fn plan() -> Plan {
        let mut plan = Plan::default();
        for (name, startup) in [
            ("a", Startup::Enabled),
            ("b", Startup::Unknown),
            ("c", Startup::Enabled),
            ("d", Startup::Disabled),
        ] {
            let mut service = Service {
                startup,
                ..Service::default()
            };
            if name == "c" {
                service
                    .on_check_failure
                    .insert("up".into(), ServiceAction::Restart);
            }
            plan.services.insert(name.into(), service);
        }
        plan.checks.insert("up".into(), Check::default());
        plan
    }

    fn started(name: &str, current: Status, reason: Option<&str>) -> ServiceStatus {
        ServiceStatus {
            name: name.into(),
            current,
            since: Some("2024-01-01T00:00:00Z".into()),
            reason: reason.map(str::to_owned),
            start_count: 1,
            pid: None,
            details: None,
        }
    }

    fn down(name: &str) -> CheckView {
        CheckView {
            name: name.into(),
            level: CheckLevel::Unset,
            startup_enabled: true,
            status: CheckStatus::Down,
            successes: 0,
            failures: 3,
            threshold: 3,
            change_id: None,
            prev_change_id: None,
            success_count: 0,
            failure_count: 3,
            action_count: 1,
            last_error: Some("refused".into()),
            down_since: None,
            last_success: None,
            generation: 0,
        }
    }

    fn json(listing: ServiceListing<'_>) -> String {
        String::from_utf8(listing.to_json()).unwrap()
    }

    #[test]
    fn every_service_of_the_plan_is_listed_with_the_reports_of_the_started_ones() {
        let plan = plan();
        // Reports on services no longer in the plan are left out.
        let reports = [
            started("0-gone", Status::Active, None),
            started("b", Status::Backoff, Some("backing off")),
            started("c", Status::Active, None),
            started("e-gone", Status::Active, None),
        ];
        let listing = ServiceListing::new(&plan, None, &reports, false);
        assert!(listing.acts_on_checks());
        let checks = [down("up")];
        assert_eq!(
            json(listing.with_checks(&checks)),
            concat!(
                r#"[{"name":"a","startup":"enabled","current":"inactive"},"#,
                r#"{"name":"b","startup":"disabled","current":"backoff","#,
                r#""current-since":"2024-01-01T00:00:00Z","reason":"backing off"},"#,
                r#"{"name":"c","startup":"enabled","current":"active","#,
                r#""current-since":"2024-01-01T00:00:00Z","reason":"check up failing (refused)"},"#,
                r#"{"name":"d","startup":"disabled","current":"inactive"}]"#
            )
        );
        assert!(listing.size_hint() > 0);
    }

    #[test]
    fn names_select_sorted_without_repeats_and_unknown_names_are_skipped() {
        let plan = plan();
        let names: BTreeSet<&str> = ["d", "zz", "a", "d"].into_iter().collect();
        let reports = [started("d", Status::Error, Some("exited"))];
        let listing = ServiceListing::new(&plan, Some(&names), &reports, false);
        assert!(!listing.acts_on_checks());
        assert_eq!(
            json(listing),
            concat!(
                r#"[{"name":"a","startup":"enabled","current":"inactive"},"#,
                r#"{"name":"d","startup":"disabled","current":"error","#,
                r#""current-since":"2024-01-01T00:00:00Z","reason":"exited"}]"#
            )
        );
    }

    #[test]
    fn details_come_with_the_started_services_only() {
        let plan = plan();
        let mut report = started("c", Status::Active, None);
        report.details = Some(ServiceDetails {
            last_exit: None,
            last_output: vec!["hello".into()],
            backoff_count: 0,
            backoff_delay: std::time::Duration::ZERO,
            backoff_until: None,
            waiting_for: Vec::new(),
            hints: Vec::new(),
            waiting_checks: Vec::new(),
            grace_until: None,
            held: Vec::new(),
            check_restarts: Vec::new(),
            last_exit_cause: None,
            unenforced: None,
            usage: None,
            watchdog: None,
            completed: None,
            waiting_oneshots: Vec::new(),
            sockets: Vec::new(),
        });
        let names: BTreeSet<&str> = ["a", "c"].into_iter().collect();
        let reports = [report];
        let checks = [down("up")];
        let listing = ServiceListing::new(&plan, Some(&names), &reports, true).with_checks(&checks);
        assert_eq!(
            json(listing),
            concat!(
                r#"[{"name":"a","startup":"enabled","current":"inactive"},"#,
                r#"{"name":"c","startup":"enabled","current":"active","#,
                r#""current-since":"2024-01-01T00:00:00Z","reason":"check up failing (refused)","#,
                r#""details":{"last-output":["hello"],"start-count":1,"backoff-count":0,"#,
                r#""failing-checks":[{"name":"up","failures":3,"threshold":3,"#,
                r#""last-error":"refused","action-count":1}]}}]"#
            )
        );
    }

    #[test]
    fn a_scheduled_service_has_its_next_run_and_the_others_nothing_new() {
        use crate::services::scheduler::LastRun;
        let mut plan = plan();
        plan.services.get_mut("a").unwrap().schedule = "00:00-24:00/1440".into();
        plan.services.get_mut("d").unwrap().schedule = "mon,10:00".into();
        let next = |t: &str| t.parse::<jiff::Timestamp>().unwrap();
        let mut statuses = std::collections::BTreeMap::new();
        statuses.insert(
            "a".to_owned(),
            ScheduleStatus {
                schedule: "00:00-24:00/1440".into(),
                next: Some(next("2026-12-04T10:01:00Z")),
                last_run: Some(LastRun {
                    at: next("2026-12-04T10:00:00Z"),
                    change_id: Some(7),
                    outcome: RunOutcome::Error("cannot start".into()),
                }),
                last_skip: Some(next("2026-12-04T09:59:00Z")),
                skips: 1,
                runs: 1,
            },
        );
        statuses.insert(
            "d".to_owned(),
            ScheduleStatus {
                schedule: "mon,10:00".into(),
                next: Some(next("2026-12-07T10:00:00Z")),
                last_run: None,
                last_skip: None,
                skips: 0,
                runs: 0,
            },
        );
        // A status left over from a schedule the plan no longer has is not shown.
        statuses.insert("b".to_owned(), statuses["d"].clone());
        let schedules = Scheduler::fixed(std::sync::Arc::new(statuses));
        let statuses = schedules.statuses();
        let reports = [started("d", Status::Active, None)];
        let listing = ServiceListing::new(&plan, None, &reports, false).with_schedules(&statuses);
        let a_next = format_rfc3339_nano(next("2026-12-04T10:01:00Z"));
        let d_next = format_rfc3339_nano(next("2026-12-07T10:00:00Z"));
        assert_eq!(
            json(listing),
            format!(
                concat!(
                    r#"[{{"name":"a","startup":"enabled","current":"inactive","scheduled":"{}"}},"#,
                    r#"{{"name":"b","startup":"disabled","current":"inactive"}},"#,
                    r#"{{"name":"c","startup":"enabled","current":"inactive"}},"#,
                    r#"{{"name":"d","startup":"disabled","current":"active","#,
                    r#""current-since":"2024-01-01T00:00:00Z","scheduled":"{}"}}]"#
                ),
                a_next, d_next
            )
        );
        // With details, a scheduled service never started says what its schedule did.
        let names: BTreeSet<&str> = ["a"].into_iter().collect();
        let listing = ServiceListing::new(&plan, Some(&names), &[], true).with_schedules(&statuses);
        let entries: Vec<cobble_client::types::ServiceInfo> =
            serde_json::from_slice(&listing.to_json()).unwrap();
        let details = entries[0]
            .details
            .as_ref()
            .unwrap()
            .schedule
            .clone()
            .unwrap();
        assert_eq!(
            details,
            ScheduleDetails {
                schedule: "00:00-24:00/1440".into(),
                next_run: Some(a_next),
                last_run: Some(format_rfc3339_nano(next("2026-12-04T10:00:00Z"))),
                last_change_id: "7".into(),
                last_outcome: "error".into(),
                last_error: "cannot start".into(),
                last_skip: Some(format_rfc3339_nano(next("2026-12-04T09:59:00Z"))),
                skips: 1,
            }
        );
    }
}
