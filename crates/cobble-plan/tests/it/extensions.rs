//! cobble's service extensions: `requires-paths` and `on-file-change`.

use cobble_plan::{FileChangeAction, Layer, Plan};

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
