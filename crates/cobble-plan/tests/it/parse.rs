use std::collections::BTreeMap;

use cobble_plan::{
    CheckLevel, GoDuration, Layer, Override, Plan, PlanError, ServiceAction, Startup,
};

use crate::{dedent, parse, strings};

const SECOND: i64 = 1_000_000_000;

#[test]
fn full_service_parses_every_field() {
    let layer = parse(
        0,
        r#"
        summary: Simple layer
        description: A simple layer.
        services:
            srv1:
                override: replace
                summary: Service summary
                description: The service.
                command: cmd arg1 "arg2 arg3"
                kill-delay: 10s
                startup: enabled
                after:
                    - srv2
                before:
                    - srv3
                requires:
                    - srv2
                    - srv3
                environment:
                    var1: val1
                    var0: val0
                user-id: 1000
                user: alice
                group-id: 2000
                group: staff
                working-dir: /workdir/srv1
                on-success: failure-shutdown
                on-failure: success-shutdown
                on-check-failure:
                    chk1: restart
                    chk2: success-shutdown
                backoff-delay: 1s
                backoff-factor: 1.5
                backoff-limit: 10s
        "#,
    )
    .unwrap();
    assert_eq!(layer.summary, "Simple layer");
    assert_eq!(layer.description, "A simple layer.");
    let srv = &layer.services["srv1"];
    assert_eq!(srv.name, "srv1");
    assert_eq!(srv.override_, Override::Replace);
    assert_eq!(srv.summary, "Service summary");
    assert_eq!(srv.description, "The service.");
    assert_eq!(srv.command, r#"cmd arg1 "arg2 arg3""#);
    assert_eq!(srv.kill_delay, Some(GoDuration(10 * SECOND)));
    assert_eq!(srv.startup, Startup::Enabled);
    assert_eq!(srv.after, strings(&["srv2"]));
    assert_eq!(srv.before, strings(&["srv3"]));
    assert_eq!(srv.requires, strings(&["srv2", "srv3"]));
    assert_eq!(srv.environment.len(), 2);
    assert_eq!((srv.user_id, srv.user.as_str()), (Some(1000), "alice"));
    assert_eq!((srv.group_id, srv.group.as_str()), (Some(2000), "staff"));
    assert_eq!(srv.working_dir, "/workdir/srv1");
    assert_eq!(srv.on_success, ServiceAction::FailureShutdown);
    assert_eq!(srv.on_failure, ServiceAction::SuccessShutdown);
    assert_eq!(srv.on_check_failure["chk1"], ServiceAction::Restart);
    assert_eq!(srv.on_check_failure["chk2"], ServiceAction::SuccessShutdown);
    assert_eq!(srv.backoff_delay, Some(GoDuration(SECOND)));
    assert_eq!(srv.backoff_factor, Some(1.5));
    assert_eq!(srv.backoff_limit, Some(GoDuration(10 * SECOND)));
}

#[test]
fn checks_and_log_targets_parse() {
    let layer = parse(
        0,
        r#"
        checks:
            chk-http:
                override: replace
                level: alive
                period: 20s
                timeout: 500ms
                threshold: 7
                http:
                    url: https://example.com/foo
                    headers:
                        Foo: bar
            chk-tcp:
                override: merge
                level: ready
                startup: enabled
                tcp:
                    port: 7777
                    host: somehost
            chk-exec:
                override: replace
                startup: disabled
                exec:
                    command: sleep 1
                    service-context: srv1
                    environment:
                        FOO: bar
                    working-dir: /root
        log-targets:
            tgt1:
                override: merge
                type: loki
                location: http://10.1.77.196:3100/loki/api/v1/push
                services: [all, -svc1]
                labels:
                    owner: me
        "#,
    )
    .unwrap();
    let http = &layer.checks["chk-http"];
    assert_eq!(http.level, CheckLevel::Alive);
    assert_eq!(http.period, Some(GoDuration(20 * SECOND)));
    assert_eq!(http.timeout, Some(GoDuration(SECOND / 2)));
    assert_eq!(http.threshold, 7);
    assert_eq!(http.http.as_ref().unwrap().headers["Foo"], "bar");
    let tcp = &layer.checks["chk-tcp"];
    assert_eq!(
        (tcp.level, tcp.startup.clone()),
        (CheckLevel::Ready, Startup::Enabled)
    );
    assert_eq!(tcp.tcp.as_ref().unwrap().port, 7777);
    assert_eq!(tcp.threshold, 0, "unset threshold stays 0 in a layer");
    let exec = &layer.checks["chk-exec"];
    assert!(!exec.is_enabled());
    assert_eq!(exec.exec.as_ref().unwrap().service_context, "srv1");
    let target = &layer.log_targets["tgt1"];
    assert_eq!(target.type_, "loki");
    assert_eq!(target.services, strings(&["all", "-svc1"]));
    assert_eq!(target.labels["owner"], "me");
    assert_eq!(target.override_, Override::Merge);
}

#[test]
fn environment_scalars_are_stringified() {
    let layer = parse(
        0,
        r#"
        services:
            srv1:
                override: replace
                command: cmd
                environment:
                    a: true
                    b: 1.10
                    c:
                    d: ~
                    e: 8080
                    f: yes
        "#,
    )
    .unwrap();
    let env = &layer.services["srv1"].environment;
    let want: BTreeMap<String, String> = [
        ("a", "true"),
        ("b", "1.10"),
        ("c", ""),
        ("d", ""),
        ("e", "8080"),
        ("f", "yes"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(*env, want);
}

#[test]
fn empty_and_null_documents_are_empty_layers() {
    for yaml in [
        "",
        "{}",
        "~",
        "# just a comment\n",
        "services: ~\nchecks: null\nsummary: ~\n",
    ] {
        let layer = Layer::parse(3, "base", yaml).unwrap();
        assert_eq!(layer.order, 3);
        assert_eq!(layer.label, "base");
        assert!(
            layer.services.is_empty() && layer.checks.is_empty(),
            "{yaml:?}"
        );
    }
}

#[test]
fn a_section_with_no_value_at_all_is_refused_as_pebble_refuses_it() {
    // Pebble writes the section out again and decodes nothing: yaml.v3's `EOF`.
    for (yaml, section) in [
        ("services:\n", "services"),
        ("summary: x\nchecks: # none\n", "checks"),
        ("log-targets:", "log-targets"),
    ] {
        assert_eq!(
            Layer::parse(3, "base", yaml).unwrap_err().to_string(),
            format!("cannot parse layer \"base\" section \"{section}\": EOF"),
            "{yaml:?}"
        );
    }
}

#[test]
fn override_is_not_required_until_combined() {
    let layer = parse(0, "services:\n    srv1:\n        command: cmd\n").unwrap();
    assert_eq!(layer.services["srv1"].override_, Override::Unknown);
}

/// Each case: the layer, then the exact error, which is Pebble v1.32.1's (each was checked
/// against it).
#[test]
fn invalid_layers_fail_with_pebble_messages() {
    let cases: &[(&str, &str)] = &[
        (
            "services:\n    srv1:\n        future: true\n        override: replace\n",
            // Numbered within the section as Pebble writes it out again.
            "cannot parse layer \"layer-0\" section \"services\": yaml: unmarshal errors:\n  line 2: field future not found in type plan.Service",
        ),
        (
            "checks:\n    chk1:\n        override: replace\n        http:\n            url: x\n            bogus: 1\n",
            "cannot parse layer \"layer-0\" section \"checks\": yaml: unmarshal errors:\n  line 5: field bogus not found in type plan.HTTPCheck",
        ),
        (
            "checks:\n    chk1:\n        tcp: {port: 1, hots: x}\n",
            "cannot parse layer \"layer-0\" section \"checks\": yaml: unmarshal errors:\n  line 2: field hots not found in type plan.TCPCheck",
        ),
        (
            "log-targets:\n    t:\n        typ: loki\n",
            "cannot parse layer \"layer-0\" section \"log-targets\": yaml: unmarshal errors:\n  line 2: field typ not found in type plan.LogTarget",
        ),
        (
            "bogus: 1\n",
            "cannot parse layer \"layer-0\": unknown section \"bogus\"",
        ),
        (
            "workload: {}\n",
            "cannot parse layer \"layer-0\": unknown section \"workload\"",
        ),
        (
            "services:\n    a: {command: x}\n    a: {command: y}\n",
            "cannot parse layer \"layer-0\" section \"services\": yaml: unmarshal errors:\n  line 2: mapping key \"a\" already defined at line 1",
        ),
        (
            "services: {}\nservices: {}\n",
            "cannot parse layer \"layer-0\": yaml: unmarshal errors:\n  line 2: mapping key \"services\" already defined at line 1",
        ),
        (
            "services:\n    a:\n        command: x\n        command: y\n",
            "cannot parse layer \"layer-0\" section \"services\": yaml: unmarshal errors:\n  line 3: mapping key \"command\" already defined at line 2",
        ),
        (
            "services:\n    svc1:\n        command: cmd\n        backoff-delay: foo\n",
            "cannot parse layer \"layer-0\" section \"services\": invalid duration \"foo\"",
        ),
        (
            "services:\n    svc1:\n        command: cmd\n        kill-delay: 10\n",
            "cannot parse layer \"layer-0\" section \"services\": invalid duration \"10\"",
        ),
        (
            "checks:\n    c:\n        period: 1d\n",
            "cannot parse layer \"layer-0\" section \"checks\": invalid duration \"1d\"",
        ),
        (
            "services:\n    svc1:\n        command: cmd\n        backoff-factor: foo\n",
            "cannot parse layer \"layer-0\" section \"services\": invalid floating-point number \"foo\"",
        ),
        (
            "@",
            "cannot parse layer \"layer-0\": yaml: found character that cannot start any token",
        ),
        (
            "services:\n    pebble:\n        command: cmd\n",
            "cannot use reserved service name \"pebble\"",
        ),
        (
            "services:\n    svc1: ~\n",
            "service object cannot be null for service \"svc1\"",
        ),
        (
            "services:\n    svc1:\n",
            "service object cannot be null for service \"svc1\"",
        ),
        (
            "checks:\n    chk1: ~\n",
            "check object cannot be null for check \"chk1\"",
        ),
        (
            "log-targets:\n    t1:\n",
            "log target object cannot be null for log target \"t1\"",
        ),
        (
            "services:\n    \"\":\n        command: cmd\n",
            "cannot use empty string as service name",
        ),
        (
            "checks:\n    \"\":\n        tcp: {port: 1}\n",
            "cannot use empty string as check name",
        ),
        (
            "services:\n    -svc1:\n        command: foo\n",
            "cannot use service name \"-svc1\": starting with \"-\" not allowed",
        ),
        (
            "services:\n    svc1:\n        command: cmd\n        on-success: foo\n",
            "plan service \"svc1\" on-success action \"foo\" invalid",
        ),
        (
            "services:\n    svc1:\n        command: cmd\n        on-success: success-shutdown\n",
            "plan service \"svc1\" on-success action \"success-shutdown\" invalid",
        ),
        (
            "services:\n    svc1:\n        command: cmd\n        on-failure: failure-shutdown\n",
            "plan service \"svc1\" on-failure action \"failure-shutdown\" invalid",
        ),
        (
            "services:\n    svc1:\n        command: cmd\n        on-check-failure:\n            test: failure-shutdown\n",
            "plan service \"svc1\" on-check-failure action \"failure-shutdown\" invalid",
        ),
        (
            "services:\n    svc1:\n        command: cmd\n        backoff-factor: 0\n",
            "plan service \"svc1\" backoff-factor must be 1.0 or greater, not 0",
        ),
        (
            "services:\n    svc1:\n        command: cmd\n        backoff-factor: 0.5\n",
            "plan service \"svc1\" backoff-factor must be 1.0 or greater, not 0.5",
        ),
        (
            "services:\n    svc1:\n        command: foo '\n",
            "plan service \"svc1\" command invalid: cannot parse service \"svc1\" command: EOF found when expecting closing quote",
        ),
        (
            "services:\n    svc1:\n        command: cmd -v [ --foo ] bar\n",
            "plan service \"svc1\" command invalid: cannot parse service \"svc1\" command: cannot have any arguments after [ ... ] group",
        ),
        (
            "services:\n    svc1:\n        command: cmd -v ] foo\n",
            "plan service \"svc1\" command invalid: cannot parse service \"svc1\" command: cannot have ] outside of [ ... ] group",
        ),
        (
            "services:\n    svc1:\n        command: cmd -v [ foo [ --bar ] ]\n",
            "plan service \"svc1\" command invalid: cannot parse service \"svc1\" command: cannot nest [ ... ] groups",
        ),
        (
            "checks:\n    chk1:\n        override: replace\n        startup: true\n        exec:\n            command: foo\n",
            "plan check \"chk1\" startup must be \"enabled\" or \"disabled\"",
        ),
        (
            "checks:\n    chk1:\n        level: sometimes\n",
            "plan check \"chk1\" level must be \"alive\" or \"ready\"",
        ),
        (
            "checks:\n    chk1:\n        period: 0\n",
            "plan check \"chk1\" period must not be zero",
        ),
        (
            "checks:\n    chk1:\n        timeout: 0s\n",
            "plan check \"chk1\" timeout must not be zero",
        ),
        (
            "checks:\n    chk1:\n        exec:\n            command: foo '\n",
            "plan check \"chk1\" command invalid: EOF found when expecting closing quote",
        ),
        (
            "checks:\n    chk1:\n        exec:\n            command: foo\n            group: staff\n",
            "plan check \"chk1\" has invalid user/group: must specify user, not just group",
        ),
        (
            "log-targets:\n    tgt1:\n        type: foobar\n",
            "log target \"tgt1\" has unsupported type \"foobar\", must be \"loki\", \"opentelemetry\" or \"syslog\"",
        ),
        (
            "log-targets:\n    tgt1:\n        labels:\n            pebble_service: illegal\n",
            "log target \"tgt1\": label \"pebble_service\" uses reserved prefix \"pebble_\"",
        ),
        // yaml.v3 lists every type error of a section, numbered within the section as
        // Pebble writes it out again (blank lines dropped); a field that reads itself, such
        // as a duration, stops the decode with its message alone.
        (
            "checks:\n    c:\n        override: merge\n        threshold: many\n",
            "cannot parse layer \"layer-0\" section \"checks\": yaml: unmarshal errors:\n  line 3: cannot unmarshal !!str `many` into int",
        ),
        (
            "services: [1, 2]\n",
            "cannot parse layer \"layer-0\" section \"services\": yaml: unmarshal errors:\n  line 1: cannot unmarshal !!seq into map[string]*plan.Service",
        ),
        (
            "services:\n    s: 5\n",
            "cannot parse layer \"layer-0\" section \"services\": yaml: unmarshal errors:\n  line 1: cannot unmarshal !!int `5` into plan.Service",
        ),
        (
            "services:\n    s:\n        environment: [a]\n        user-id: abc\n        after: a very long command text\n",
            "cannot parse layer \"layer-0\" section \"services\": yaml: unmarshal errors:\n  line 2: cannot unmarshal !!seq into map[string]string\n  line 3: cannot unmarshal !!str `abc` into int\n  line 4: cannot unmarshal !!str `a very ...` into []string",
        ),
        (
            "services:\n    a:\n        command: x\n\n    b:\n        command: y\n        bogus: 1\n",
            "cannot parse layer \"layer-0\" section \"services\": yaml: unmarshal errors:\n  line 5: field bogus not found in type plan.Service",
        ),
        (
            "services:\n    s:\n        bogus1: 1\n        backoff-delay: nope\n",
            "cannot parse layer \"layer-0\" section \"services\": invalid duration \"nope\"",
        ),
        (
            "summary: [x]\n",
            "cannot parse layer \"layer-0\" section \"summary\": yaml: unmarshal errors:\n  line 1: cannot unmarshal !!seq into string",
        ),
    ];
    for (yaml, want) in cases {
        let err = Layer::parse(0, "layer-0", yaml).expect_err(yaml);
        assert_eq!(err.to_string(), *want, "layer:\n{yaml}");
    }
}

#[test]
fn an_invalid_override_is_refused_when_the_layer_is_combined_as_in_pebble() {
    // Parsed (Pebble's ParseLayer takes it), refused by the combination, without the
    // parse prefix; so a layer's other faults are reported first.
    for (kind, yaml) in [
        (
            "service",
            "services:\n    x:\n        command: cmd\n        override: mrege\n",
        ),
        (
            "check",
            "checks:\n    x:\n        override: sideways\n        exec:\n            command: c\n",
        ),
        (
            "log target",
            "log-targets:\n    x:\n        override: up\n        type: loki\n",
        ),
    ] {
        let layer = Layer::parse(0, "layer-0", yaml).expect(yaml);
        let err = Plan::from_layers(vec![layer]).expect_err(yaml);
        assert_eq!(
            err.to_string(),
            format!("layer \"layer-0\" has invalid \"override\" value for {kind} \"x\"")
        );
    }
    let err = Layer::parse(
        0,
        "layer-0",
        "checks:\n    x:\n        override: sideways\n        level: sometimes\n",
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "plan check \"x\" level must be \"alive\" or \"ready\""
    );
}

#[test]
fn reserved_label_prefix_is_rejected() {
    let err = Layer::parse(0, "pebble-foo", "{}").unwrap_err();
    assert_eq!(err, PlanError::ReservedLabelPrefix);
    assert_eq!(
        err.to_string(),
        "cannot use reserved label prefix \"pebble-\""
    );
    // The YAML is read first, as Pebble reads it.
    let err = Layer::parse(0, "pebble-foo", "services: [").unwrap_err();
    assert!(matches!(err, PlanError::Parse { .. }), "{err}");
}

#[test]
fn a_section_error_names_the_label_and_section() {
    let err = Layer::parse(0, "x", &dedent("services:\n    a:\n        comand: x\n")).unwrap_err();
    match err {
        PlanError::Parse {
            label,
            section,
            message,
            ..
        } => {
            assert_eq!(label, "x");
            assert_eq!(section.as_deref(), Some("services"));
            assert_eq!(
                message,
                "yaml: unmarshal errors:\n  line 2: field comand not found in type plan.Service"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn user_and_group_combinations_that_need_a_lookup_are_accepted() {
    for exec in [
        "user: alice",
        "user: alice\n            group: staff",
        "user-id: 1\n            group-id: 2",
        "user-id: 1\n            group: staff",
        "user: alice\n            user-id: 1",
    ] {
        let yaml = format!(
            "checks:\n    chk1:\n        exec:\n            command: foo\n            {exec}\n"
        );
        Layer::parse(0, "l", &yaml).unwrap_or_else(|e| panic!("{exec}: {e}"));
    }
}

#[test]
fn an_unclosed_bracket_is_a_syntax_error_with_its_line_not_an_unknown_section() {
    // Wherever the `[` is left open (a list of a service, a top-level line, a flow list
    // swallowing the next section), the layer is reported as malformed YAML, never as a
    // layer with an unknown section: in Pebble v1.32.1's words, with yaml.v3's line (that
    // of the open `[`, counted from 0, or of what follows it).
    let cases: &[(&str, &str)] = &[
        (
            "services:\n  web:\n    override: replace\n    command: foo\n    after: [a, b\n",
            "line 4: did not find expected ',' or ']'",
        ),
        (
            "services:\n  web:\n    override: replace\n    command: foo\n    requires: [db\nchecks:\n  up:\n    override: replace\n    tcp:\n      port: 80\n",
            "line 4: did not find expected ',' or ']'",
        ),
        ("[services\n", "line 1: did not find expected ',' or ']'"),
        (
            "summary: demo\n[services\n",
            "line 2: could not find expected ':'",
        ),
        (
            "log-targets:\n  l:\n    override: replace\n    services: [all\n",
            "line 3: did not find expected ',' or ']'",
        ),
        (
            "services: {a: b\n",
            "line 1: did not find expected ',' or '}'",
        ),
        (
            "a: b: c\n",
            "mapping values are not allowed in this context",
        ),
        (
            "services:\n  a:\n    command: \"unclosed\n",
            "line 3: found unexpected end of stream",
        ),
    ];
    for (yaml, want) in cases {
        let err = Layer::parse(1, "bad", yaml).unwrap_err();
        assert!(
            matches!(&err, PlanError::Parse { section: None, .. }),
            "{yaml:?} gave {err:?}, not a YAML syntax error"
        );
        assert_eq!(
            err.to_string(),
            format!("cannot parse layer \"bad\": yaml: {want}"),
            "{yaml:?}"
        );
    }
}
