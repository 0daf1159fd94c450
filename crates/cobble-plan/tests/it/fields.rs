//! Every field of an entry is in every list a field must be in: an entry with every field
//! set prints (as `cobble plan` does) and reads back the same, and the printer's fields are
//! the parser's. The entries are built without `..Default::default()`, so a field added to
//! `Service`, `Check` or `LogTarget` does not compile here until it is given a value, and
//! then fails the round trip until the parser, the merge and the printer all know it.
//! (`cobble_plan::fields`'s own tests hold the Go types' table to the parser, and
//! `cobble-fuzz`'s the generator.)

use std::collections::BTreeMap;

use cobble_plan::fields::{ENTRY_SECTIONS, parser_fields};
use cobble_plan::{
    Check, CheckLevel, ExecCheck, FileChangeAction, GoDuration, HeldSocket, HttpCheck, Layer,
    LogTarget, Override, Plan, Readiness, Resources, Rlimit, RlimitValue, Rlimits, Service,
    ServiceAction, ServiceType, Startup, TcpCheck,
};

use crate::strings;

fn secs(n: i64) -> Option<GoDuration> {
    Some(GoDuration(n * 1_000_000_000))
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A service with every field set to a value other than its default.
fn every_service_field() -> Service {
    let mut resources = Resources::default();
    for (field, value) in [
        ("memory-max", "64M"),
        ("memory-high", "48M"),
        ("pids-max", "100"),
        ("cpu-max", "50%"),
    ] {
        resources.parse_field(field, value).unwrap();
    }
    let mut rlimits = Rlimits::new();
    rlimits.insert(
        Rlimit::from_name("nofile").unwrap(),
        RlimitValue::parse("1024:4096").unwrap(),
    );
    Service {
        name: "web".into(),
        summary: "the web server".into(),
        description: "serves\nthe site\n".into(),
        startup: Startup::Enabled,
        override_: Override::Replace,
        command: "web --port 8080 [ --debug ]".into(),
        after: strings(&["db"]),
        before: strings(&["cache"]),
        requires: strings(&["db"]),
        workload: "app".into(),
        environment: map(&[("PORT", "8080"), ("MODE", "yes")]),
        user_id: Some(1000),
        user: "web".into(),
        group_id: Some(1000),
        group: "web".into(),
        working_dir: "/srv".into(),
        on_success: ServiceAction::Ignore,
        on_failure: ServiceAction::Shutdown,
        on_check_failure: BTreeMap::from([("up".into(), ServiceAction::Restart)]),
        backoff_delay: secs(1),
        backoff_factor: Some(1.5),
        backoff_limit: secs(20),
        kill_delay: secs(3),
        requires_paths: strings(&["/etc/certs/cert.pem"]),
        on_file_change: BTreeMap::from([
            (
                "/etc/app.conf".into(),
                FileChangeAction::Signal("SIGHUP".into()),
            ),
            ("/etc/certs/cert.pem".into(), FileChangeAction::Restart),
        ]),
        persist_logs: Some(true),
        requires_checks: strings(&["up"]),
        start_grace: secs(30),
        // `oneshot` cannot be combined with `readiness: notify`; `daemon` said outright
        // is a value other than the default all the same.
        type_: ServiceType::Daemon,
        readiness: Readiness::Notify,
        rlimits,
        resources,
        sockets: BTreeMap::from([(
            "http".into(),
            HeldSocket {
                listen: "/run/web.sock".into(),
                backlog: Some(64),
                mode: "0660".into(),
                user: "web".into(),
                group: "web".into(),
            },
        )]),
        watchdog: secs(10),
        schedule: "mon-fri,9:00-17:00/8".into(),
    }
}

/// A check with every field set (all three types at once: one layer may say that; the plan
/// refuses it, which is not what is tested here).
fn every_check_field() -> Check {
    Check {
        name: "up".into(),
        override_: Override::Merge,
        level: CheckLevel::Ready,
        startup: Startup::Disabled,
        period: secs(5),
        timeout: secs(2),
        threshold: 4,
        http: Some(HttpCheck {
            url: "http://localhost:8080/health".into(),
            headers: map(&[("X-Probe", "1")]),
        }),
        tcp: Some(TcpCheck {
            port: 8080,
            host: "localhost".into(),
        }),
        exec: Some(ExecCheck {
            command: "probe --fast".into(),
            service_context: "web".into(),
            environment: map(&[("A", "b")]),
            user_id: Some(1),
            user: "daemon".into(),
            group_id: Some(1),
            group: "daemon".into(),
            working_dir: "/tmp".into(),
            // Not a layer field: taken from the service context when the check runs.
            rlimits: Rlimits::new(),
        }),
    }
}

fn every_log_target_field() -> LogTarget {
    LogTarget {
        name: "loki".into(),
        override_: Override::Replace,
        type_: "loki".into(),
        location: "http://loki:3100/loki/api/v1/push".into(),
        services: strings(&["all", "-db"]),
        labels: map(&[("env", "prod")]),
    }
}

fn every_field() -> Plan {
    Plan {
        services: BTreeMap::from([("web".into(), every_service_field())]),
        checks: BTreeMap::from([("up".into(), every_check_field())]),
        log_targets: BTreeMap::from([("loki".into(), every_log_target_field())]),
        ..Plan::default()
    }
}

#[test]
fn an_entry_with_every_field_set_prints_and_reads_back_the_same() {
    let plan = every_field();
    let yaml = plan.to_yaml();
    let layer = Layer::parse(1, "again", &yaml)
        .unwrap_or_else(|e| panic!("the printed plan does not parse: {e}\n{yaml}"));
    assert_eq!(
        layer.services, plan.services,
        "a service field is lost between the printer and the parser:\n{yaml}"
    );
    assert_eq!(layer.checks, plan.checks, "{yaml}");
    assert_eq!(layer.log_targets, plan.log_targets, "{yaml}");
    let again = Plan {
        services: layer.services.clone(),
        checks: layer.checks.clone(),
        log_targets: layer.log_targets.clone(),
        ..Plan::default()
    };
    assert_eq!(again.to_yaml(), yaml, "printing is not stable");
}

#[test]
fn a_merge_entry_with_every_field_set_sets_every_field() {
    let full = Layer::parse(1, "full", &every_field().to_yaml()).unwrap();
    let mut bare = Layer::default();
    for (name, service) in &full.services {
        let entry = Service {
            name: name.clone(),
            override_: Override::Replace,
            command: "placeholder".into(),
            ..Service::default()
        };
        bare.services.insert(name.clone(), entry);
        assert_eq!(service.override_, Override::Replace);
    }
    for name in full.checks.keys() {
        let entry = Check {
            name: name.clone(),
            override_: Override::Replace,
            ..Check::default()
        };
        bare.checks.insert(name.clone(), entry);
    }
    for name in full.log_targets.keys() {
        let entry = LogTarget {
            name: name.clone(),
            override_: Override::Replace,
            ..LogTarget::default()
        };
        bare.log_targets.insert(name.clone(), entry);
    }
    // The full entries as merge entries over the bare ones.
    let mut over = full.clone();
    over.order = 2;
    for service in over.services.values_mut() {
        service.override_ = Override::Merge;
    }
    for check in over.checks.values_mut() {
        check.override_ = Override::Merge;
    }
    for target in over.log_targets.values_mut() {
        target.override_ = Override::Merge;
    }
    let combined = Layer::combine(&[bare, over]).unwrap();
    let mut want = full;
    for service in want.services.values_mut() {
        service.override_ = Override::Replace;
    }
    for check in want.checks.values_mut() {
        check.override_ = Override::Replace;
    }
    for target in want.log_targets.values_mut() {
        target.override_ = Override::Replace;
    }
    assert_eq!(
        combined.services, want.services,
        "a service field is lost by Service::merge"
    );
    assert_eq!(
        combined.checks, want.checks,
        "a check field is lost by merge"
    );
    assert_eq!(combined.log_targets, want.log_targets);
}

/// The keys an entry of `section` prints, in order.
fn printed_fields(yaml: &str, section: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut inside = false;
    for line in yaml.lines() {
        if !line.starts_with(' ') {
            inside = line == format!("{section}:");
            continue;
        }
        let field = line
            .strip_prefix("        ")
            .filter(|rest| !rest.starts_with(' ') && !rest.starts_with('-'));
        if let (true, Some(field)) = (inside, field) {
            keys.push(field.split(':').next().unwrap().to_owned());
        }
    }
    keys
}

#[test]
fn the_printer_prints_every_field_the_parser_reads_in_its_order() {
    let yaml = every_field().to_yaml();
    for section in ENTRY_SECTIONS {
        let printed = printed_fields(&yaml, section);
        let parser = parser_fields(section);
        assert!(parser.len() >= 5, "{section}: {parser:?}");
        assert_eq!(
            printed, parser,
            "{section}: the printer's fields (left) are not the parser's (right)"
        );
    }
}
