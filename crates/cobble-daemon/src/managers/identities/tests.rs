use super::*;

/// The sha512-crypt of "test" under the salt "saltsalt", 5000 rounds.
fn hash_of_test() -> String {
    use sha_crypt::CustomizedPasswordHasher;
    sha_crypt::ShaCrypt::default()
        .hash_password_customized(
            b"test",
            b"saltsalt",
            None,
            None,
            sha_crypt::Params::default(),
        )
        .unwrap()
        .to_string()
}

fn wire(json: serde_json::Value) -> wire::Identity {
    serde_json::from_value(json).unwrap()
}

fn local(access: Access, uid: u32) -> Identity {
    Identity {
        access,
        local: Some(uid),
        basic: None,
        cert: None,
    }
}

#[test]
fn malformed_identities_are_refused_in_pebbles_words() {
    let cases = [
        (
            serde_json::json!({"local": {"user-id": 1}}),
            r#"access value must be specified ("admin", "read", "metrics", or "untrusted")"#,
        ),
        (
            serde_json::json!({"access": "root", "local": {"user-id": 1}}),
            r#"invalid access value "root", must be "admin", "read", "metrics", or "untrusted""#,
        ),
        (
            serde_json::json!({"access": "read", "local": {}}),
            "local identity must specify user-id",
        ),
        (
            serde_json::json!({"access": "read", "basic": {"password": ""}}),
            "basic identity must specify password (hashed)",
        ),
        (
            serde_json::json!({"access": "read"}),
            r#"identity must have at least one type ("local", "basic", or "cert")"#,
        ),
        (
            serde_json::json!({"access": "read", "cert": {"pem": "not pem"}}),
            "cert identity must include a PEM-encoded certificate",
        ),
    ];
    for (json, message) in cases {
        assert_eq!(
            Identity::from_wire("alice", &wire(json.clone())),
            Err(message.into()),
            "{json}"
        );
    }
}

#[test]
fn the_wire_form_masks_the_password_and_keeps_the_uid() {
    let identity = Identity::from_wire(
        "alice",
        &wire(serde_json::json!({
            "access": "metrics", "basic": {"password": "$6$x$y"}, "local": {"user-id": 42}
        })),
    )
    .unwrap();
    assert_eq!(identity.basic.as_deref(), Some("$6$x$y"));
    assert_eq!(
        serde_json::to_value(identity.to_wire()).unwrap(),
        serde_json::json!({"access": "metrics", "local": {"user-id": 42}, "basic": {"password": "*****"}})
    );
}

#[test]
fn the_wire_form_masks_the_certificate_as_pebble_does() {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let pem = rcgen::CertificateParams::new(vec!["client".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap()
        .pem();
    let identity = Identity::from_wire(
        "alice",
        &wire(serde_json::json!({
            "access": "read", "cert": {"pem": pem}
        })),
    )
    .unwrap();
    assert!(identity.cert.is_some());
    assert_eq!(
        serde_json::to_value(identity.to_wire()).unwrap(),
        serde_json::json!({"access": "read", "cert": {"pem": "*****"}})
    );
}

#[test]
fn actions_check_names_existence_and_nulls() {
    let mut current = BTreeMap::from([("alice".to_owned(), local(Access::Admin, 42))]);
    let one = |name: &str, id: Option<Identity>| BTreeMap::from([(name.to_owned(), id)]);

    let err = apply(
        &mut current,
        Action::Add,
        one("alice", Some(local(Access::Read, 1))),
    );
    assert_eq!(
        err,
        Err(RequestError::Invalid(
            "identities already exist: alice".into()
        ))
    );
    let err = apply(
        &mut current,
        Action::Update,
        one("bob", Some(local(Access::Read, 1))),
    );
    assert_eq!(
        err,
        Err(RequestError::Invalid("identities do not exist: bob".into()))
    );
    let err = apply(&mut current, Action::Remove, one("bob", None));
    assert_eq!(
        err,
        Err(RequestError::Invalid("identities do not exist: bob".into()))
    );
    let err = apply(
        &mut current,
        Action::Add,
        one("bob", Some(local(Access::Read, 42))),
    );
    assert_eq!(
        err,
        Err(RequestError::Invalid(
            "cannot have multiple identities with user ID 42 (alice, bob)".into()
        ))
    );
    let err = apply(
        &mut current,
        Action::Add,
        one("1bob", Some(local(Access::Read, 7))),
    );
    assert!(
        matches!(err, Err(RequestError::Invalid(m)) if m.starts_with(r#"identity "1bob" invalid: identity name "1bob" invalid: must start"#))
    );
    // Nothing of the refused requests stuck.
    assert_eq!(current.len(), 1);
    assert_eq!(current["alice"], local(Access::Admin, 42));

    let done = apply(
        &mut current,
        Action::Replace,
        BTreeMap::from([
            ("alice".to_owned(), None),
            ("bob".to_owned(), Some(local(Access::Read, 42))),
            ("nobody".to_owned(), None),
        ]),
    )
    .unwrap();
    assert_eq!(done.created, vec![("bob".to_owned(), Access::Read)]);
    assert_eq!(done.deleted, vec!["alice".to_owned()]);
    assert_eq!(current.keys().collect::<Vec<_>>(), ["bob"]);
}

#[test]
fn nulls_must_fit_the_action() {
    let ids = BTreeMap::from([("a".to_owned(), None)]);
    assert_eq!(
        decode_request(Action::Add, &ids),
        Err(RequestError::Invalid(
            r#"identity value for "a" must not be null for add operation"#.into()
        ))
    );
    let ids = BTreeMap::from([(
        "a".to_owned(),
        Some(wire(
            serde_json::json!({"access": "read", "local": {"user-id": 1}}),
        )),
    )]);
    assert_eq!(
        decode_request(Action::Remove, &ids),
        Err(RequestError::Invalid(
            r#"identity value for "a" must be null for remove operation"#.into()
        ))
    );
    assert_eq!(
        Action::parse("drop"),
        Err(r#"invalid action "drop", must be "add", "update", "replace", or "remove""#.into())
    );
}

#[test]
fn credentials_name_identities_by_precedence() {
    let hash = hash_of_test();
    let ids = BTreeMap::from([
        ("alice".to_owned(), local(Access::Untrusted, 1000)),
        (
            "web".to_owned(),
            Identity {
                access: Access::Metrics,
                local: None,
                basic: Some(hash.clone()),
                cert: None,
            },
        ),
    ]);
    let by_uid = Credentials {
        uid: Some(1000),
        ..Default::default()
    };
    assert_eq!(
        candidate(&ids, &by_uid),
        Candidate::Matched {
            name: "alice".into(),
            access: Access::Untrusted
        }
    );
    // Basic auth, when given, is what counts, even from a uid that has an identity.
    let with_basic = Credentials {
        uid: Some(1000),
        basic: Some(("web".into(), "test".into())),
        cert: None,
    };
    assert_eq!(
        candidate(&ids, &with_basic),
        Candidate::Password {
            name: "web".into(),
            access: Access::Metrics,
            hash: hash.clone()
        }
    );
    let unknown_user = Credentials {
        basic: Some(("nobody".into(), "test".into())),
        ..by_uid.clone()
    };
    assert_eq!(candidate(&ids, &unknown_user), Candidate::None);
    let unknown_cert = Credentials {
        cert: Some(vec![1, 2, 3]),
        ..by_uid
    };
    assert_eq!(candidate(&ids, &unknown_cert), Candidate::None);

    assert!(verify_password("test", &hash));
    assert!(!verify_password("wrong", &hash));
    assert!(!verify_password("test", "*****"));
}

#[test]
fn defaults_without_an_identity() {
    assert_eq!(default_access(Some(0), 1000), Some(Access::Admin));
    assert_eq!(default_access(Some(1000), 1000), Some(Access::Admin));
    assert_eq!(default_access(Some(1001), 1000), Some(Access::Read));
    assert_eq!(default_access(None, 1000), None);
}

/// A self-signed certificate with these key usages, valid from `not_before` to `not_after`
/// (seconds since the epoch).
fn self_signed(
    usages: Vec<rcgen::ExtendedKeyUsagePurpose>,
    not_before: i64,
    not_after: i64,
) -> Vec<u8> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let mut params = rcgen::CertificateParams::new(vec![]).unwrap();
    params.extended_key_usages = usages;
    params.not_before =
        rcgen::date_time_ymd(1970, 1, 1) + std::time::Duration::from_secs(not_before as u64);
    params.not_after =
        rcgen::date_time_ymd(1970, 1, 1) + std::time::Duration::from_secs(not_after as u64);
    params.self_signed(&key).unwrap().der().to_vec()
}

fn utc(text: &str) -> jiff::ZonedDateTime {
    text.parse::<jiff::Timestamp>()
        .unwrap()
        .to_zoned_datetime(jiff::tz::TimeZone::UTC)
}

#[test]
fn a_stored_certificate_verifies_as_go_verifies_a_self_signed_client_root() {
    use rcgen::ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
    // 2026-01-01T00:00:00Z to 2027-01-01T00:00:00Z.
    let (from, to) = (1_767_225_600, 1_798_761_600);
    let now = utc("2026-06-01T12:00:00Z");
    assert_eq!(
        verify_self_signed(&self_signed(vec![ClientAuth], from, to), now.clone()),
        Ok(())
    );
    assert_eq!(
        verify_self_signed(&self_signed(vec![], from, to), now.clone()),
        Ok(())
    );
    assert_eq!(
        verify_self_signed(&self_signed(vec![ServerAuth], from, to), now.clone()),
        Err("x509: certificate specifies an incompatible key usage".into())
    );
    assert_eq!(
        verify_self_signed(&self_signed(vec![ClientAuth], from, to), utc("2027-01-01T00:00:01Z")),
        Err("x509: certificate has expired or is not yet valid: current time 2027-01-01T00:00:01Z is after 2027-01-01T00:00:00Z".into())
    );
    assert_eq!(
        verify_self_signed(&self_signed(vec![ClientAuth], from, to), utc("2025-12-31T23:59:59Z")),
        Err("x509: certificate has expired or is not yet valid: current time 2025-12-31T23:59:59Z is before 2026-01-01T00:00:00Z".into())
    );
    let zoned = "2027-01-01T02:00:01+02:00[Europe/Athens]"
        .parse::<jiff::ZonedDateTime>()
        .unwrap();
    assert_eq!(
        verify_self_signed(&self_signed(vec![ClientAuth], from, to), zoned),
        Err("x509: certificate has expired or is not yet valid: current time 2027-01-01T02:00:01+02:00 is after 2027-01-01T00:00:00Z".into())
    );
}
