//! cobble's service extensions: `requires-paths`, `on-file-change`, `requires-checks`, `start-grace`
//! and `readiness`.

use cobble_plan::{FileChangeAction, Layer, Plan, Readiness};

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
