use cobble_plan::{Check, Layer, Plan, Service};

use crate::{dedent, plan};

#[test]
fn empty_plan_prints_empty_mapping() {
    assert_eq!(Plan::default().to_yaml(), "{}\n");
}

#[test]
fn sections_print_in_pebble_order() {
    let plan = plan(&[r#"
        checks:
            chk1:
                override: replace
                exec:
                    command: ping 8.8.8.8
        log-targets:
            lt1:
                override: replace
                type: loki
                location: http://192.168.1.2:3100/loki/api/v1/push
        services:
            srv1:
                override: replace
                command: cmd
    "#])
    .unwrap();
    let want = dedent(
        r#"
        services:
            srv1:
                override: replace
                command: cmd
        checks:
            chk1:
                override: replace
                threshold: 3
                exec:
                    command: ping 8.8.8.8
        log-targets:
            lt1:
                type: loki
                location: http://192.168.1.2:3100/loki/api/v1/push
                services: []
                override: replace
        "#,
    );
    assert_eq!(plan.to_yaml(), want);
}

const FULL: &str = r#"
    services:
        srv1:
            summary: Service summary
            description: |
                Two lines
                of text.
            startup: enabled
            override: replace
            command: cmd arg1 "arg2 arg3" [ --port 8080 ]
            after:
                - srv2
            before:
                - srv3
            requires:
                - srv2
                - srv3
            environment:
                EMPTY: ""
                PORT: "8080"
                URL: 'http://x:1/a #b'
                var0: val0
            user-id: 1000
            user: alice
            group-id: 2000
            group: staff
            working-dir: /workdir/srv1
            on-success: ignore
            on-failure: success-shutdown
            on-check-failure:
                chk1: restart
            backoff-delay: 1s
            backoff-factor: 1.5
            backoff-limit: 1m30s
            kill-delay: 10s
        srv2:
            override: merge
            command: srv2cmd
            backoff-factor: 2
        srv3:
            override: replace
            command: srv3cmd
    checks:
        chk1:
            override: replace
            level: alive
            startup: disabled
            period: 20s
            timeout: 500ms
            threshold: 7
            http:
                url: https://example.com/foo
                headers:
                    Authorization: Basic password
                    Foo: bar
        chk2:
            override: merge
            threshold: 3
            tcp:
                port: 7777
                host: somehost
        chk3:
            override: replace
            threshold: 3
            exec:
                command: sleep 1
                service-context: srv1
                environment:
                    FOO: bar
                user-id: 0
                user: root
                group-id: 0
                group: root
                working-dir: /root
    log-targets:
        tgt1:
            type: opentelemetry
            location: http://10.1.77.196:4318
            services:
                - all
                - -srv2
            override: merge
            labels:
                owner: $USER
"#;

#[test]
fn every_field_prints_in_declaration_order() {
    let plan = plan(&[FULL]).unwrap();
    assert_eq!(plan.to_yaml(), dedent(FULL));
}

#[test]
fn durations_and_defaults_print_like_go() {
    let plan = plan(&[r#"
        services:
            srv:
                override: replace
                command: cmd
                backoff-delay: 60s
                backoff-limit: 1.5h
                kill-delay: 1us
        checks:
            chk:
                override: replace
                period: 100ms
                timeout: 2s
                tcp: {port: 80}
    "#])
    .unwrap();
    let want = dedent(
        r#"
        services:
            srv:
                override: replace
                command: cmd
                backoff-delay: 1m0s
                backoff-limit: 1h30m0s
                kill-delay: 1µs
        checks:
            chk:
                override: replace
                period: 100ms
                timeout: 100ms
                threshold: 3
                tcp:
                    port: 80
        "#,
    );
    assert_eq!(plan.to_yaml(), want);
}

#[test]
fn output_parses_back_to_the_same_plan() {
    let original = plan(&[FULL]).unwrap();
    let yaml = original.to_yaml();
    let layer = Layer::parse(0, "layer-0", &yaml).unwrap();
    let reparsed = Plan::from_layers(vec![layer]).unwrap();
    assert_eq!(reparsed.services, original.services);
    assert_eq!(
        reparsed.checks.keys().collect::<Vec<_>>(),
        original.checks.keys().collect::<Vec<_>>()
    );
    for (name, check) in &original.checks {
        let mut expected = check.clone();
        // The threshold default is printed, so it comes back set.
        expected.threshold = check.threshold();
        assert_eq!(reparsed.checks[name], expected);
    }
    assert_eq!(reparsed.log_targets, original.log_targets);
    assert_eq!(reparsed.to_yaml(), yaml);
}

#[test]
fn each_check_reads_back_from_its_own_layer_document() {
    let original = plan(&[FULL]).unwrap();
    assert!(!original.checks.is_empty());
    for check in original.checks.values() {
        let yaml = check.to_layer_yaml();
        assert_eq!(Check::from_layer_yaml(&yaml).as_ref(), Ok(check), "{yaml}");
    }
    // One without `override:`, as a test builds one, too.
    let bare = Check {
        name: "bare".into(),
        tcp: Some(cobble_plan::TcpCheck {
            port: 80,
            host: String::new(),
        }),
        ..Check::default()
    };
    assert_eq!(Check::from_layer_yaml(&bare.to_layer_yaml()), Ok(bare));
    // Anything but exactly one check is refused.
    assert!(Check::from_layer_yaml("{}\n").is_err());
    assert!(Check::from_layer_yaml("checks: [").is_err());
}

#[test]
fn each_service_reads_back_from_its_own_layer_document() {
    let original = plan(&[FULL]).unwrap();
    assert!(!original.services.is_empty());
    for service in original.services.values() {
        let yaml = service.to_layer_yaml();
        assert_eq!(
            Service::from_layer_yaml(&yaml).as_ref(),
            Ok(service),
            "{yaml}"
        );
    }
    assert!(Service::from_layer_yaml("{}\n").is_err());
    assert!(
        Service::from_layer_yaml(
            "services:\n  a: {override: replace, command: x}\n  b: {override: replace, command: y}\n"
        )
        .is_err()
    );
}

#[test]
fn awkward_strings_round_trip() {
    let values = [
        "",
        "true",
        "yes",
        "~",
        "null",
        "8080",
        "0x1F",
        "1e3",
        "1.5",
        "12:30",
        "2001-12-14",
        "-",
        "- x",
        "?",
        ": x",
        "a: b",
        "a #b",
        "#c",
        "'q'",
        "\"dq\"",
        " lead",
        "trail ",
        "@at",
        "`tick`",
        "%p",
        "a\tb",
        "multi\nline\n",
        "multi\nline",
        "\nleading newline",
        "bell\u{7}",
        "ünïcödé",
        "[x]",
        "{y}",
        "*star",
        "&amp",
        "!bang",
        "|pipe",
        ">gt",
        "---",
        "...",
        "<<",
    ];
    let mut services = std::collections::BTreeMap::new();
    let mut env = std::collections::BTreeMap::new();
    for (i, value) in values.iter().enumerate() {
        env.insert(format!("K{i:02}"), value.to_string());
        env.insert(value.to_string(), format!("key{i}"));
    }
    services.insert(
        "svc".to_string(),
        Service {
            name: "svc".into(),
            override_: cobble_plan::Override::Replace,
            command: "cmd".into(),
            description: "first\n\nthird\n".into(),
            environment: env,
            after: values.iter().map(|v| v.to_string()).collect(),
            ..Default::default()
        },
    );
    let original = Plan {
        services,
        ..Plan::default()
    };
    let yaml = original.to_yaml();
    let layer = Layer::parse(0, "x", &yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    assert_eq!(layer.services, original.services, "\n{yaml}");
}
