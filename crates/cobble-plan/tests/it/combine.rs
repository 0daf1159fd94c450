use std::time::Duration;

use cobble_plan::{GoDuration, Override, Plan, PlanError, ServiceAction, Startup};

use crate::{parse, plan, strings};

const SECOND: i64 = 1_000_000_000;

const BASE: &str = r#"
    summary: Simple layer
    services:
        srv1:
            override: replace
            summary: Service summary
            command: cmd arg1 "arg2 arg3"
            kill-delay: 10s
            startup: enabled
            after: [srv2]
            before: [srv3]
            requires: [srv2, srv3]
            environment:
                var1: val1
                var0: val0
            backoff-delay: 1s
            backoff-factor: 1.5
            backoff-limit: 10s
            working-dir: /workdir/srv1
            user: alice
            user-id: 1000
        srv2:
            override: replace
            startup: enabled
            command: cmd
            before: [srv3]
            working-dir: /workdir/srv2
        srv3:
            override: replace
            command: cmd
        srv6:
            override: replace
            command: cmd6a
            on-success: ignore
"#;

const OVERRIDE: &str = r#"
    summary: Simple override layer.
    services:
        srv1:
            override: merge
            environment:
                var3: val3
                var0: changed
            after: [srv4, srv2]
            before: [srv5]
            working-dir: /workdir/srv1/override
            group: staff
        srv2:
            override: replace
            startup: disabled
            command: cmd
            summary: Replaced service
        srv4:
            override: replace
            command: cmd
            startup: enabled
        srv5:
            override: replace
            command: cmd
        srv6:
            override: merge
            command: cmd6b
            environment:
                foo: bar
            on-check-failure:
                chk1: restart
"#;

#[test]
fn merge_and_replace_of_every_field_kind() {
    let plan = plan(&[BASE, OVERRIDE]).unwrap();
    let srv1 = &plan.services["srv1"];
    // Scalars not mentioned by the merge layer survive; mentioned ones win.
    assert_eq!(srv1.summary, "Service summary");
    assert_eq!(srv1.command, r#"cmd arg1 "arg2 arg3""#);
    assert_eq!(
        srv1.override_,
        Override::Replace,
        "merge keeps the first override"
    );
    assert_eq!(srv1.working_dir, "/workdir/srv1/override");
    assert_eq!(srv1.startup, Startup::Enabled);
    assert_eq!(srv1.kill_delay, Some(GoDuration(10 * SECOND)));
    assert_eq!(srv1.backoff_factor, Some(1.5));
    assert_eq!((srv1.user.as_str(), srv1.user_id), ("alice", Some(1000)));
    assert_eq!(srv1.group, "staff");
    // Lists append without de-duplication.
    assert_eq!(srv1.after, strings(&["srv2", "srv4", "srv2"]));
    assert_eq!(srv1.before, strings(&["srv3", "srv5"]));
    assert_eq!(srv1.requires, strings(&["srv2", "srv3"]));
    // Maps merge per key.
    let env: Vec<(&str, &str)> = srv1
        .environment
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        env,
        [("var0", "changed"), ("var1", "val1"), ("var3", "val3")]
    );

    // Replace swaps the whole service.
    let srv2 = &plan.services["srv2"];
    assert_eq!(srv2.summary, "Replaced service");
    assert_eq!(srv2.startup, Startup::Disabled);
    assert!(srv2.working_dir.is_empty());
    assert!(srv2.before.is_empty());

    let srv6 = &plan.services["srv6"];
    assert_eq!(srv6.command, "cmd6b");
    assert_eq!(srv6.on_success, ServiceAction::Ignore);
    assert_eq!(srv6.on_check_failure["chk1"], ServiceAction::Restart);

    // Defaults are not stored, only applied by accessors.
    let srv3 = &plan.services["srv3"];
    assert_eq!(srv3.backoff_delay, None);
    assert_eq!(srv3.backoff_delay(), Duration::from_millis(500));
    assert_eq!(plan.default_services(), strings(&["srv1", "srv4"]));
    assert_eq!(plan.layers.len(), 2);
}

#[test]
fn merge_onto_nothing_inserts() {
    let plan = plan(&["services:\n    a:\n        override: merge\n        command: x\n"]).unwrap();
    assert_eq!(plan.services["a"].override_, Override::Merge);
}

#[test]
fn merge_cannot_unset_or_zero() {
    let plan = plan(&[
        "services:\n    a:\n        override: replace\n        command: x\n        summary: s\n        user-id: 5\n        group-id: 5\n",
        "services:\n    a:\n        override: merge\n        summary: \"\"\n        user-id: ~\n",
        "checks:\n    c:\n        override: replace\n        threshold: 5\n        tcp: {port: 1}\n",
        "checks:\n    c:\n        override: merge\n        threshold: 0\n",
    ])
    .unwrap();
    assert_eq!(plan.services["a"].summary, "s");
    assert_eq!(plan.services["a"].user_id, Some(5));
    assert_eq!(plan.checks["c"].threshold, 5);
}

#[test]
fn required_field_two_layers_deep() {
    let plan = plan(&[
        "services:\n    srv1:\n        override: replace\n        command: sleep 1000\n",
        "services:\n    srv1:\n        override: merge\n        environment:\n            VAR1: foo\n",
        "services:\n    srv1:\n        override: merge\n        environment:\n            VAR2: bar\n",
    ])
    .unwrap();
    let srv1 = &plan.services["srv1"];
    assert_eq!(srv1.command, "sleep 1000");
    assert_eq!(srv1.environment.len(), 2);
}

#[test]
fn checks_replace_and_merge() {
    let replaced = plan(&[
        r#"
        checks:
            chk-http:
                override: replace
                period: 20s
                http: {url: "https://example.com/foo", headers: {Foo: bar}}
            chk-tcp:
                override: replace
                level: ready
                tcp: {port: 7777, host: somehost}
        "#,
        r#"
        checks:
            chk-http:
                override: replace
                http: {url: "https://example.com/bar"}
            chk-tcp:
                override: replace
                tcp: {port: 8888}
        "#,
    ])
    .unwrap();
    let http = &replaced.checks["chk-http"];
    assert_eq!(http.period, None);
    assert!(http.http.as_ref().unwrap().headers.is_empty());
    let tcp = &replaced.checks["chk-tcp"];
    assert_eq!(tcp.tcp.as_ref().unwrap().host, "");
    assert_eq!(tcp.level, cobble_plan::CheckLevel::Unset);

    let merged = plan(&[
        r#"
        checks:
            chk-http:
                override: merge
                period: 1s
            chk-tcp:
                override: merge
                timeout: 300ms
                tcp: {host: foobar}
            chk-exec:
                override: merge
                threshold: 5
                exec: {working-dir: /root}
        "#,
        r#"
        checks:
            chk-http:
                override: merge
                http: {url: "https://example.com/bar", headers: {Foo: bar}}
            chk-tcp:
                override: merge
                tcp: {port: 80}
            chk-exec:
                override: merge
                timeout: 7s
                exec: {command: sleep 2, environment: {FOO: bar}}
        "#,
    ])
    .unwrap();
    let http = &merged.checks["chk-http"];
    assert_eq!(http.period, Some(GoDuration(SECOND)));
    // The default timeout (3s) is capped at the 1s period, and stays unset.
    assert_eq!(http.timeout, None);
    assert_eq!(http.timeout(), Duration::from_secs(1));
    assert_eq!(http.threshold(), 3);
    let tcp = merged.checks["chk-tcp"].tcp.as_ref().unwrap();
    assert_eq!((tcp.port, tcp.host.as_str()), (80, "foobar"));
    let exec = &merged.checks["chk-exec"];
    assert_eq!(exec.threshold, 5);
    assert_eq!(exec.timeout, Some(GoDuration(7 * SECOND)));
    let exec = exec.exec.as_ref().unwrap();
    assert_eq!(
        (exec.command.as_str(), exec.working_dir.as_str()),
        ("sleep 2", "/root")
    );
}

#[test]
fn set_timeout_above_period_is_lowered_in_the_plan() {
    let plan = plan(&[
        "checks:\n    chk1:\n        override: replace\n        period: 100ms\n        timeout: 2s\n        tcp: {host: foobar, port: 80}\n",
    ])
    .unwrap();
    let check = &plan.checks["chk1"];
    assert_eq!(check.timeout, Some(GoDuration(100_000_000)));
    assert_eq!(
        plan.layers[0].checks["chk1"].timeout,
        Some(GoDuration(2 * SECOND))
    );
}

#[test]
fn log_targets_merge_and_replace() {
    let plan = plan(&[
        r#"
        services:
            svc1: {command: foo, override: merge}
            svc2: {command: bar, override: merge}
        log-targets:
            tgt1:
                type: loki
                location: http://10.1.77.196:3100/loki/api/v1/push
                services: [all]
                override: merge
                labels: {label1: foo11, label2: foo12}
            tgt2:
                type: syslog
                location: udp://0.0.0.0:514
                services: [svc2]
                override: merge
        "#,
        r#"
        log-targets:
            tgt1:
                services: [-all, svc1]
                override: merge
                labels: {label2: bar12, label3: bar13}
            tgt2:
                type: opentelemetry
                location: http://1.2.3.4:4318
                services: []
                override: replace
        "#,
    ])
    .unwrap();
    let tgt1 = &plan.log_targets["tgt1"];
    assert_eq!(tgt1.services, strings(&["all", "-all", "svc1"]));
    assert_eq!(tgt1.type_, "loki");
    let labels: Vec<&str> = tgt1.labels.values().map(String::as_str).collect();
    assert_eq!(labels, ["foo11", "bar12", "bar13"]);
    let tgt2 = &plan.log_targets["tgt2"];
    assert_eq!(tgt2.type_, "opentelemetry");
    assert!(tgt2.services.is_empty());
    assert!(!plan.services["svc1"].logs_to(tgt2));
    assert!(plan.services["svc1"].logs_to(tgt1));
    assert!(!plan.services["svc2"].logs_to(tgt1));
}

#[test]
fn combined_summary_comes_from_the_last_layer_and_is_not_in_the_plan() {
    let plan = plan(&["summary: one\n", "summary: two\n"]).unwrap();
    assert_eq!(plan.to_yaml(), "{}\n");
}

/// Each case: the layers, then the exact error from combining and validating them.
#[test]
fn plan_validation_errors() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["{}", "services:\n    srv1:\n        command: cmd\n"],
            "layer \"layer-1\" must define \"override\" for service \"srv1\"",
        ),
        (
            &["checks:\n    chk1:\n        tcp: {port: 1}\n"],
            "layer \"layer-0\" must define \"override\" for check \"chk1\"",
        ),
        (
            &["log-targets:\n    t:\n        type: loki\n        location: x\n"],
            "layer \"layer-0\" must define \"override\" for log target \"t\"",
        ),
        (
            &[
                "services:\n    srv1:\n        override: replace\n",
                "services:\n    srv1:\n        override: merge\n        environment: {VAR1: foo}\n",
            ],
            "plan must define \"command\" for service \"srv1\"",
        ),
        (
            &["checks:\n    chk1:\n        override: replace\n"],
            "plan must specify one of \"http\", \"tcp\", or \"exec\" for check \"chk1\"",
        ),
        (
            &[
                "checks:\n    chk1:\n        override: replace\n        tcp: {port: 80}\n",
                "checks:\n    chk1:\n        override: merge\n        http: {url: \"http://x\"}\n",
            ],
            "plan must specify one of \"http\", \"tcp\", or \"exec\" for check \"chk1\"",
        ),
        (
            &["checks:\n    chk1:\n        override: replace\n        http: {}\n"],
            "plan must set \"url\" for http check \"chk1\"",
        ),
        (
            &["checks:\n    chk2:\n        override: replace\n        tcp: {}\n"],
            "plan must set \"port\" for tcp check \"chk2\"",
        ),
        (
            &["checks:\n    chk3:\n        override: replace\n        exec: {}\n"],
            "plan must set \"command\" for exec check \"chk3\"",
        ),
        (
            &[
                "checks:\n    chk1:\n        override: replace\n        exec: {command: foo, service-context: nosvc}\n",
            ],
            "plan check \"chk1\" service context specifies non-existent service \"nosvc\"",
        ),
        (
            &["log-targets:\n    tgt1:\n        location: http://x\n        override: merge\n"],
            "plan must define \"type\" (\"loki\", \"opentelemetry\" or \"syslog\") for log target \"tgt1\"",
        ),
        (
            &[
                "log-targets:\n    tgt1:\n        type: loki\n        services: [all]\n        override: merge\n",
            ],
            "plan must define \"location\" for log target \"tgt1\"",
        ),
        (
            &[
                "log-targets:\n    tgt1:\n        type: loki\n        location: http://x\n        services: [-nonexistent]\n        override: merge\n",
            ],
            "log target \"tgt1\" specifies unknown service \"nonexistent\"",
        ),
        (
            &[
                "services:\n    srv1:\n        override: replace\n        command: cmd\n        requires: [ghost]\n",
            ],
            "service \"ghost\" does not exist",
        ),
        (
            &[r#"
            services:
                srv1: {override: replace, command: cmd, after: [srv3]}
                srv2: {override: replace, command: cmd, after: [srv1], before: [srv3]}
                srv3: {override: replace, command: cmd}
            "#],
            "services in before/after loop: srv1, srv2, srv3",
        ),
        (
            // Each layer is fine; the combination has a cycle.
            &[
                "services:\n    srv1:\n        override: replace\n        command: cmd\n        after: [srv2]\n",
                "services:\n    srv2:\n        override: replace\n        command: cmd\n        after: [srv1]\n",
            ],
            "services in before/after loop: srv1, srv2",
        ),
    ];
    for (layers, want) in cases {
        let err = plan(layers).expect_err(want);
        assert_eq!(err.to_string(), *want);
    }
}

#[test]
fn unknown_after_and_before_names_are_ignored() {
    plan(&["services:\n    a:\n        override: replace\n        command: x\n        after: [ghost]\n        before: [phantom]\n"])
        .unwrap();
}

#[test]
fn from_layers_sorts_by_order() {
    let late = parse(
        5,
        "services:\n    a:\n        override: replace\n        command: late\n",
    )
    .unwrap();
    let early = parse(
        1,
        "services:\n    a:\n        override: replace\n        command: early\n",
    )
    .unwrap();
    let plan = Plan::from_layers(vec![late, early]).unwrap();
    assert_eq!(plan.services["a"].command, "late");
    assert_eq!(plan.layers[0].order, 1);
}

#[test]
fn service_args_layer_replaces_default_args() {
    let base = plan(&["services:\n    svc:\n        override: replace\n        command: cmd --x [ --default ]\n        environment: {A: b}\n"]).unwrap();
    let args = [("svc".to_string(), strings(&["--port", "8080 9090"]))].into();
    let layer = cobble_plan::service_args_layer(&base, &args).unwrap();
    assert_eq!(layer.label, "pebble-service-args");
    assert_eq!(layer.services["svc"].override_, Override::Merge);
    assert_eq!(
        layer.services["svc"].command,
        "cmd --x [ --port '8080 9090' ]"
    );
    let next = base.add_layer(layer, false, false).unwrap();
    let svc = &next.services["svc"];
    assert_eq!(svc.environment["A"], "b");
    let (base_args, extra) = svc.parse_command().unwrap();
    assert_eq!(base_args, strings(&["cmd", "--x"]));
    assert_eq!(extra, strings(&["--port", "8080 9090"]));
    assert_eq!(next.layers.last().unwrap().order, 1000);

    let unknown = [("nope".to_string(), vec![])].into();
    let err = cobble_plan::service_args_layer(&base, &unknown).unwrap_err();
    assert_eq!(
        err,
        PlanError::ServiceArgsUnknownService {
            name: "nope".into()
        }
    );
    assert_eq!(err.to_string(), "service \"nope\" not found in plan");
}
