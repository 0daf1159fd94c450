//! cobble's service extensions: `requires-paths`, `on-file-change`, `requires-checks`,
//! `start-grace`, `readiness`, `rlimits`, `resources`, `sockets`, `watchdog`, `schedule` and
//! `type`.

use cobble_plan::{
    CpuMax, FileChangeAction, GoDuration, HeldSocket, Layer, LimitValue, ListenAddress,
    MemoryLimit, Plan, Readiness, Rlimit, RlimitValue, ServiceType,
};

use crate::{dedent, parse, plan, strings};

#[test]
fn requires_paths_append_and_on_file_change_merges_per_key() {
    let p = plan(&[
        r#"
        services:
            web:
                override: replace
                command: webhook
                requires-paths: [/etc/certs/cert.pem]
                on-file-change:
                    /etc/certs/cert.pem: restart
                    /etc/app.conf: SIGHUP
        "#,
        r#"
        services:
            web:
                override: merge
                requires-paths: [/etc/certs/key.pem]
                on-file-change:
                    /etc/app.conf: ignore
                    /etc/certs/key.pem: restart
        "#,
    ])
    .unwrap();
    let web = &p.services["web"];
    assert_eq!(
        web.requires_paths,
        strings(&["/etc/certs/cert.pem", "/etc/certs/key.pem"])
    );
    assert_eq!(
        web.on_file_change["/etc/app.conf"],
        FileChangeAction::Ignore
    );
    assert_eq!(
        web.on_file_change["/etc/certs/cert.pem"],
        FileChangeAction::Restart
    );
    assert_eq!(web.on_file_change.len(), 3);
}

#[test]
fn extensions_round_trip_through_the_plan_yaml() {
    let p = plan(&[r#"
        services:
            web:
                override: replace
                command: webhook --port 8443
                kill-delay: 2s
                requires-paths: [/etc/certs/cert.pem, /etc/certs/key.pem]
                on-file-change:
                    /etc/certs/..data: restart
                    /etc/app.conf: SIGHUP
        "#])
    .unwrap();
    let yaml = p.to_yaml();
    assert_eq!(
        yaml,
        dedent(
            r#"
            services:
                web:
                    override: replace
                    command: webhook --port 8443
                    kill-delay: 2s
                    requires-paths:
                        - /etc/certs/cert.pem
                        - /etc/certs/key.pem
                    on-file-change:
                        /etc/app.conf: SIGHUP
                        /etc/certs/..data: restart
            "#
        )
    );
    let again = Plan::from_layers(vec![Layer::parse(0, "again", &yaml).unwrap()]).unwrap();
    assert_eq!(again.services, p.services);
}

#[test]
fn bad_extension_values_are_rejected_with_clear_errors() {
    let cases = [
        (
            "requires-paths: [certs/cert.pem]",
            r#"plan service "web" requires-paths path "certs/cert.pem" must be absolute"#,
        ),
        (
            "on-file-change: {certs/cert.pem: restart}",
            r#"plan service "web" on-file-change path "certs/cert.pem" must be absolute"#,
        ),
        (
            "on-file-change: {/etc/a: reboot}",
            r#"plan service "web" on-file-change action "reboot" invalid for "/etc/a": must be "restart", "ignore" or a signal name such as "SIGHUP""#,
        ),
        (
            "on-file-change: {/etc/a: HUP}",
            r#"plan service "web" on-file-change action "HUP" invalid for "/etc/a": must be "restart", "ignore" or a signal name such as "SIGHUP""#,
        ),
    ];
    for (field, want) in cases {
        let yaml = format!(
            "services:\n    web:\n        override: replace\n        command: webhook\n        {field}\n"
        );
        let err = parse(1, &yaml).unwrap_err();
        assert_eq!(err.to_string(), want, "{field}");
    }
}

#[test]
fn pebble_layers_without_extensions_print_as_before() {
    let p = plan(&["
        services:
            svc:
                override: replace
                command: sleep 1
        "])
    .unwrap();
    assert!(p.services["svc"].requires_paths.is_empty());
    assert!(!p.to_yaml().contains("requires-paths"));
    assert!(!p.to_yaml().contains("on-file-change"));
}

#[test]
fn requires_checks_append_and_start_grace_and_readiness_replace() {
    let p = plan(&[
        r#"
        services:
            app:
                override: replace
                command: app
                requires-checks: [db-ready]
                start-grace: 30s
                readiness: notify
        checks:
            db-ready:
                override: replace
                tcp: {port: 5432}
            cache-ready:
                override: replace
                tcp: {port: 6379}
        "#,
        r#"
        services:
            app:
                override: merge
                requires-checks: [cache-ready]
                start-grace: 1m
        "#,
    ])
    .unwrap();
    let app = &p.services["app"];
    assert_eq!(app.requires_checks, strings(&["db-ready", "cache-ready"]));
    assert_eq!(app.start_grace(), Some(std::time::Duration::from_secs(60)));
    assert_eq!(app.readiness, Readiness::Notify);
    // A merge that leaves them out changes nothing; a replace starts over.
    let p = plan(&[
        "services:\n    app:\n        override: replace\n        command: app\n        readiness: notify\n        start-grace: 5s\n",
        "services:\n    app:\n        override: merge\n        command: app2\n",
    ])
    .unwrap();
    assert_eq!(p.services["app"].readiness, Readiness::Notify);
    assert_eq!(
        p.services["app"].start_grace(),
        Some(std::time::Duration::from_secs(5))
    );
    let p = plan(&[
        "services:\n    app:\n        override: replace\n        command: app\n        readiness: notify\n",
        "services:\n    app:\n        override: replace\n        command: app2\n",
    ])
    .unwrap();
    assert_eq!(p.services["app"].readiness, Readiness::Unset);
    assert_eq!(p.services["app"].start_grace(), None);
}

#[test]
fn bad_values_of_the_check_and_readiness_fields_are_refused_with_clear_errors() {
    let cases = [
        (
            "readiness: fd 3",
            r#"plan service "web" readiness "fd 3" invalid: must be "notify""#,
        ),
        (
            "readiness: ready",
            r#"plan service "web" readiness "ready" invalid: must be "notify""#,
        ),
        (
            "start-grace: -1s",
            r#"plan service "web" start-grace must not be negative, not -1s"#,
        ),
    ];
    for (field, want) in cases {
        let yaml = format!(
            "services:\n    web:\n        override: replace\n        command: webhook\n        {field}\n"
        );
        let err = parse(1, &yaml).unwrap_err();
        assert_eq!(err.to_string(), want, "{field}");
    }
    let err = plan(&[
        "services:\n    web:\n        override: replace\n        command: webhook\n        requires-checks: [up, nope]\nchecks:\n    up:\n        override: replace\n        tcp: {port: 80}\n",
    ])
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"plan service "web" requires-checks names "nope", which is not a check of the plan"#
    );
}

#[test]
fn rlimits_merge_per_resource_and_resources_per_field() {
    let p = plan(&[
        r#"
        services:
            db:
                override: replace
                command: db
                rlimits:
                    nofile: 65536
                    core: unlimited
                    nproc: "512:1024"
                resources:
                    memory-max: 512M
                    pids-max: 100
        "#,
        r#"
        services:
            db:
                override: merge
                rlimits:
                    nofile: "1024:"
                    memlock: 64
                resources:
                    memory-max: 1G
                    cpu-max: 0.5
        "#,
    ])
    .unwrap();
    let db = &p.services["db"];
    let value = |soft, hard| RlimitValue { soft, hard };
    let n = |v| Some(LimitValue::Value(v));
    assert_eq!(
        db.rlimits.iter().map(|(r, v)| (*r, *v)).collect::<Vec<_>>(),
        vec![
            (
                Rlimit::Core,
                value(Some(LimitValue::Unlimited), Some(LimitValue::Unlimited))
            ),
            (Rlimit::Memlock, value(n(64), n(64))),
            (Rlimit::Nofile, value(n(1024), None)),
            (Rlimit::Nproc, value(n(512), n(1024))),
        ]
    );
    assert_eq!(db.resources.memory_max, Some(MemoryLimit::Bytes(1 << 30)));
    assert_eq!(db.resources.memory_high, None);
    assert_eq!(
        db.resources.pids_max,
        Some(cobble_plan::CountLimit::Count(100))
    );
    assert_eq!(
        db.resources.cpu_max,
        Some(CpuMax {
            quota_us: Some(50_000),
            period_us: 100_000
        })
    );
    // The plan prints them back, sorted, in one spelling, and reads its own output again.
    let yaml = p.to_yaml();
    assert!(
        yaml.contains(
            "        rlimits:\n            core: unlimited\n            memlock: \"64\"\n            nofile: '1024:'\n            nproc: 512:1024\n        resources:\n            memory-max: 1G\n            pids-max: \"100\"\n            cpu-max: 50000/100000\n"
        ),
        "{yaml}"
    );
    let again = Plan::from_layers(vec![Layer::parse(1, "plan", &yaml).unwrap()]).unwrap();
    assert_eq!(again.services["db"], *db);
    // A replace starts over.
    let p = plan(&[
        "services:\n    db:\n        override: replace\n        command: db\n        rlimits: {nofile: 10}\n        resources: {memory-max: 1M}\n",
        "services:\n    db:\n        override: replace\n        command: db\n",
    ])
    .unwrap();
    assert!(p.services["db"].rlimits.is_empty());
    assert!(p.services["db"].resources.is_empty());
}

#[test]
fn bad_rlimits_and_resources_refuse_the_layer_with_clear_errors() {
    let cases = [
        (
            "rlimits: {nofiles: 1024}",
            r#"plan service "web" rlimits names unknown resource "nofiles": must be one of as, core, cpu, data, fsize, locks, memlock, msgqueue, nice, nofile, nproc, rss, rtprio, rttime, sigpending, stack"#,
        ),
        (
            "rlimits: {NOFILE: 1024}",
            r#"plan service "web" rlimits names unknown resource "NOFILE": must be one of as, core, cpu, data, fsize, locks, memlock, msgqueue, nice, nofile, nproc, rss, rtprio, rttime, sigpending, stack"#,
        ),
        (
            "rlimits: {nofile: lots}",
            r#"plan service "web" rlimit nofile value "lots" invalid: must be an integer, "unlimited" or "SOFT:HARD" (for example "1024:4096")"#,
        ),
        (
            "rlimits: {nofile: -1}",
            r#"plan service "web" rlimit nofile value "-1" invalid: must be an integer, "unlimited" or "SOFT:HARD" (for example "1024:4096")"#,
        ),
        (
            r#"rlimits: {nofile: "4096:1024"}"#,
            r#"plan service "web" rlimit nofile value "4096:1024" invalid: the soft limit 4096 is greater than the hard limit 1024"#,
        ),
        (
            "resources: {memory-max: 64MB}",
            r#"plan service "web" resources memory-max value "64MB" invalid: must be a size in bytes, optionally with a unit K, M, G or T (1024 each), or "max""#,
        ),
        (
            "resources: {memory-high: lots}",
            r#"plan service "web" resources memory-high value "lots" invalid: must be a size in bytes, optionally with a unit K, M, G or T (1024 each), or "max""#,
        ),
        (
            "resources: {pids-max: -5}",
            r#"plan service "web" resources pids-max value "-5" invalid: must be an integer or "max""#,
        ),
        (
            "resources: {cpu-max: 500/100000}",
            r#"plan service "web" resources cpu-max value "500/100000" invalid: the quota must be at least 1000 microseconds, not 500"#,
        ),
        (
            "resources: {cpu-max: lots}",
            r#"plan service "web" resources cpu-max value "lots" invalid: must be "QUOTA/PERIOD" in microseconds, a fraction of a CPU such as 0.5, or a percentage such as "50%""#,
        ),
    ];
    for (field, want) in cases {
        let yaml = format!(
            "services:\n    web:\n        override: replace\n        command: webhook\n        {field}\n"
        );
        let err = parse(1, &yaml).unwrap_err();
        assert_eq!(err.to_string(), want, "{field}");
    }
    let yaml = "services:\n    web:\n        override: replace\n        command: webhook\n        resources: {memory-limit: 1M}\n";
    let err = parse(1, yaml).unwrap_err().to_string();
    assert!(err.contains("unknown field `memory-limit`"), "{err}");
    // A rejected layer leaves the plan as it was.
    let base = plan(&["services:\n    web:\n        override: replace\n        command: webhook\n        rlimits: {nofile: 10}\n"]).unwrap();
    let bad = parse(
        2,
        "services:\n    web:\n        override: merge\n        rlimits: {nofile: x}\n",
    );
    assert!(bad.is_err());
    assert_eq!(base.services["web"].rlimits.len(), 1);
}

#[test]
fn sockets_merge_per_socket_then_per_field_and_watchdog_replaces() {
    let p = plan(&[
        r#"
        services:
            web:
                override: replace
                command: webhook --port 4443
                readiness: notify
                watchdog: 30s
                sockets:
                    https:
                        listen: 0.0.0.0:4443
                    admin:
                        listen: /run/web/admin.sock
                        mode: "0660"
        "#,
        r#"
        services:
            web:
                override: merge
                watchdog: 1m
                sockets:
                    https:
                        backlog: 512
                    metrics:
                        listen: 127.0.0.1:9090
        "#,
    ])
    .unwrap();
    let web = &p.services["web"];
    assert_eq!(
        web.watchdog,
        Some(GoDuration::from_std(std::time::Duration::from_secs(60)))
    );
    assert_eq!(
        web.sockets["https"],
        HeldSocket {
            listen: "0.0.0.0:4443".into(),
            backlog: Some(512),
            ..HeldSocket::default()
        }
    );
    assert_eq!(web.sockets["admin"].mode, "0660");
    assert_eq!(
        web.sockets["metrics"].address(),
        Ok(ListenAddress::Tcp("127.0.0.1:9090".parse().unwrap()))
    );
    // Printed back in the plan, and read again to the same services.
    let yaml = p.to_yaml();
    assert!(
        yaml.contains(
            "        sockets:\n            admin:\n                listen: /run/web/admin.sock\n                mode: \"0660\"\n"
        ),
        "{yaml}"
    );
    assert!(yaml.contains("        watchdog: 1m0s\n"), "{yaml}");
    let again = Plan::from_layers(vec![Layer::parse(0, "again", &yaml).unwrap()]).unwrap();
    assert_eq!(again.services["web"].sockets, web.sockets);
    assert_eq!(again.services["web"].watchdog, web.watchdog);
}

#[test]
fn bad_sockets_and_watchdogs_are_refused_with_clear_errors() {
    let layer_cases = [
        (
            "sockets: {https: {listen: \"localhost:4443\"}}",
            r#"plan service "web" socket "https" listen "localhost:4443" invalid: must be HOST:PORT, [HOST]:PORT, :PORT or PORT with a numeric host, or the absolute path of a unix socket"#,
        ),
        (
            "sockets: {https: {listen: \":0\"}}",
            r#"plan service "web" socket "https" listen ":0" invalid: must name a port other than 0"#,
        ),
        (
            "sockets: {\"a:b\": {listen: \":80\"}}",
            r#"plan service "web" socket name "a:b" invalid: must be 1 to 255 characters, none of them a colon or a control character"#,
        ),
        (
            "sockets: {https: {listen: /run/a.sock, mode: rw}}",
            r#"plan service "web" socket "https" mode "rw" invalid: must be an octal file mode such as "0660""#,
        ),
        (
            "sockets: {https: {listen: \":80\", backlog: 0}}",
            r#"plan service "web" socket "https" backlog "0" invalid: must be at least 1"#,
        ),
        (
            "watchdog: 0s",
            r#"plan service "web" watchdog must be a positive duration, not 0s"#,
        ),
        (
            "watchdog: -5s",
            r#"plan service "web" watchdog must be a positive duration, not -5s"#,
        ),
    ];
    for (field, want) in layer_cases {
        let yaml = format!(
            "services:\n    web:\n        override: replace\n        command: webhook\n        {field}\n"
        );
        let err = parse(1, &yaml).unwrap_err();
        assert_eq!(err.to_string(), want, "{field}");
    }
    let sockets_err = parse(
        1,
        "services:\n    web:\n        override: replace\n        sockets: {https: {port: 80}}\n",
    )
    .unwrap_err();
    assert!(
        sockets_err.to_string().contains("unknown field `port`"),
        "{sockets_err}"
    );
    let plan_cases: [(&[&str], &str); 3] = [
        (
            &[
                "services:\n    web:\n        override: replace\n        command: webhook\n        watchdog: 10s\n",
            ],
            r#"plan service "web" watchdog needs readiness "notify": its pings come on the notify socket"#,
        ),
        (
            &[
                "services:\n    web:\n        override: replace\n        command: webhook\n        sockets: {https: {backlog: 5}}\n",
            ],
            r#"plan service "web" socket "https" listen "" invalid: must be set"#,
        ),
        (
            &[
                "services:\n    api:\n        override: replace\n        command: a\n        sockets: {http: {listen: \":8080\"}}\n",
                "services:\n    web:\n        override: replace\n        command: b\n        sockets: {main: {listen: \"127.0.0.1:8080\"}}\n",
            ],
            r#"plan service "web" socket "main" listens on 127.0.0.1:8080, as service "api" socket "http" does"#,
        ),
    ];
    for (layers, want) in plan_cases {
        let err = plan(layers).unwrap_err();
        assert_eq!(err.to_string(), want);
    }
    // A merge layer may add the watchdog to a notify service an earlier layer made.
    plan(&[
        "services:\n    web:\n        override: replace\n        command: webhook\n        readiness: notify\n",
        "services:\n    web:\n        override: merge\n        watchdog: 10s\n",
    ])
    .unwrap();
}

#[test]
fn a_later_schedule_replaces_and_prints_back() {
    let p = plan(&[
        r#"
        services:
            job:
                override: replace
                command: cleanup
                schedule: "mon,10:00"
            other:
                override: replace
                command: other
                schedule: 00:00-24:00/96
        "#,
        r#"
        services:
            job:
                override: merge
                schedule: mon-fri,9:00-17:00/8
            other:
                override: merge
                command: other --quiet
        "#,
    ])
    .unwrap();
    assert_eq!(p.services["job"].schedule, "mon-fri,9:00-17:00/8");
    // A merge that does not name it keeps it.
    assert_eq!(p.services["other"].schedule, "00:00-24:00/96");
    let yaml = p.to_yaml();
    assert!(
        yaml.contains(
            "        schedule: mon-fri,9:00-17:00/8
"
        ),
        "{yaml}"
    );
    let again = Plan::from_layers(vec![Layer::parse(0, "again", &yaml).unwrap()]).unwrap();
    assert_eq!(again.services["job"].schedule, p.services["job"].schedule);
    assert_eq!(
        again.services["other"].schedule,
        p.services["other"].schedule
    );
    // A replace without it drops it.
    let p = plan(&[
        "services:\n    job:\n        override: replace\n        command: a\n        schedule: \"10:00\"\n",
        "services:\n    job:\n        override: replace\n        command: b\n",
    ])
    .unwrap();
    assert_eq!(p.services["job"].schedule, "");
    assert!(!p.to_yaml().contains("schedule"));
}

#[test]
fn a_bad_schedule_refuses_the_layer_naming_the_service_the_field_and_the_text() {
    for (value, want) in [
        (
            "\"mon,25:00\"",
            r#"plan service "job" schedule "mon,25:00" invalid: cannot parse "25:00": not a valid time"#,
        ),
        (
            "monday",
            r#"plan service "job" schedule "monday" invalid: cannot parse "monday": "monday" is not a valid weekday"#,
        ),
        (
            "00:00-24:00/2880",
            r#"plan service "job" schedule "00:00-24:00/2880" invalid: cannot parse "00:00-24:00/2880": more events than the span has minutes"#,
        ),
    ] {
        let yaml = format!(
            "services:\n    job:\n        override: replace\n        command: cleanup\n        schedule: {value}\n"
        );
        assert_eq!(parse(1, &yaml).unwrap_err().to_string(), want, "{value}");
    }
    // Added to a plan, the bad layer leaves the plan as it was.
    let before = plan(&["services:\n    job:\n        override: replace\n        command: cleanup\n        schedule: \"10:00\"\n"]).unwrap();
    let bad = Layer::parse(
        2,
        "bad",
        "services:\n    job:\n        override: merge\n        schedule: \"10:00/3\"\n",
    );
    assert_eq!(
        bad.unwrap_err().to_string(),
        r#"plan service "job" schedule "10:00/3" invalid: cannot parse "10:00/3": an event count needs a span of time"#
    );
    assert_eq!(before.services["job"].schedule, "10:00");
    // Far too long: refused by its bound, the text still named.
    let long = "mon,".repeat(150) + "10:00";
    let yaml = format!(
        "services:\n    job:\n        override: replace\n        command: cleanup\n        schedule: \"{long}\"\n"
    );
    assert_eq!(
        parse(1, &yaml).unwrap_err().to_string(),
        format!(r#"plan service "job" schedule "{long}" invalid: longer than 512 bytes"#)
    );
}

#[test]
fn a_schedule_that_looks_like_a_number_reads_and_prints_as_text() {
    for written in ["10:00", "\"10:00\"", "23:00-01:00", "0:00"] {
        let p = plan(&[&format!(
            "services:\n    job:\n        override: replace\n        command: c\n        schedule: {written}\n"
        )])
        .unwrap();
        let text = written.trim_matches('"');
        assert_eq!(p.services["job"].schedule, text);
        let yaml = p.to_yaml();
        let again = Plan::from_layers(vec![Layer::parse(0, "again", &yaml).unwrap()]).unwrap();
        assert_eq!(again.services["job"].schedule, text, "{yaml}");
    }
}

#[test]
fn type_replaces_on_merge_and_prints_in_the_plan() {
    let p = plan(&[
        "services:\n    setup:\n        override: replace\n        command: setup\n        type: oneshot\n",
        "services:\n    setup:\n        override: merge\n        command: setup2\n",
    ])
    .unwrap();
    assert_eq!(p.services["setup"].type_, ServiceType::Oneshot);
    let yaml = p.to_yaml();
    assert!(yaml.contains("        type: oneshot\n"), "{yaml}");
    let again = Plan::from_layers(vec![Layer::parse(1, "again", &yaml).unwrap()]).unwrap();
    assert_eq!(again.services["setup"].type_, ServiceType::Oneshot);
    // A merge may make it a daemon again; a replace without it starts over.
    let p = plan(&[
        "services:\n    setup:\n        override: replace\n        command: setup\n        type: oneshot\n",
        "services:\n    setup:\n        override: merge\n        type: daemon\n",
    ])
    .unwrap();
    assert_eq!(p.services["setup"].type_, ServiceType::Daemon);
    assert!(!p.services["setup"].type_.is_oneshot());
    let p = plan(&[
        "services:\n    setup:\n        override: replace\n        command: setup\n        type: oneshot\n",
        "services:\n    setup:\n        override: replace\n        command: setup\n",
    ])
    .unwrap();
    assert_eq!(p.services["setup"].type_, ServiceType::Unset);
    // Unset, nothing is printed: a Pebble layer prints as before.
    assert!(!p.to_yaml().contains("type:"), "{}", p.to_yaml());
}

#[test]
fn bad_types_are_refused_naming_the_service_the_field_and_the_text() {
    for (value, quoted) in [
        ("simple", "\"simple\""),
        ("Oneshot", "\"Oneshot\""),
        ("\"one shot\"", "\"one shot\""),
    ] {
        let yaml = format!(
            "services:\n    setup:\n        override: replace\n        command: setup\n        type: {value}\n"
        );
        let err = parse(1, &yaml).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(r#"plan service "setup" type {quoted} invalid: must be "daemon" or "oneshot""#)
        );
    }
    let err = plan(&[
        "services:\n    setup:\n        override: replace\n        command: setup\n        type: oneshot\n        readiness: notify\n",
    ])
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"plan service "setup" type "oneshot" cannot have readiness "notify": a one-shot is done when it exits"#
    );
}
