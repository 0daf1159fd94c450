use cobble_sys::SysError;
use cobble_sys::user::{self, Group, User, UserDb};

use crate::fixture;

fn db() -> UserDb {
    UserDb::new(fixture("passwd"), fixture("group"))
}

fn user(name: &str, uid: u32, gid: u32, home: &str) -> User {
    User {
        name: name.into(),
        uid,
        gid,
        home: home.into(),
    }
}

#[test]
fn passwd_lookups_follow_go_rules() {
    let db = db();
    assert_eq!(
        db.user_by_name("root").unwrap(),
        Some(user("root", 0, 0, "/root"))
    );
    // Leading and trailing white space is trimmed.
    assert_eq!(
        db.user_by_name("daemon").unwrap(),
        Some(user("daemon", 1, 1, "/usr/sbin"))
    );
    // First match wins (a later alice exists), comments are skipped.
    assert_eq!(
        db.user_by_name("alice").unwrap(),
        Some(user("alice", 1000, 1000, "/home/alice"))
    );
    assert_eq!(
        db.user_by_uid(1001).unwrap(),
        Some(user("bob", 1001, 1000, "/home/bob"))
    );
    // NIS compat rows, empty names and short rows never match.
    assert_eq!(db.user_by_name("+nisuser").unwrap(), None);
    assert_eq!(db.user_by_name("nisuser").unwrap(), None);
    assert_eq!(db.user_by_uid(5001).unwrap(), None);
    assert_eq!(db.user_by_uid(5002).unwrap(), None);
    assert_eq!(db.user_by_name("short").unwrap(), None);
    // A row with a non-numeric id is skipped and the search goes on.
    assert_eq!(
        db.user_by_name("badid").unwrap(),
        Some(user("badid", 3001, 100, "/home/badid"))
    );
    // Ids are matched as text, as Go does: 01002 is not uid 1002.
    assert_eq!(
        db.user_by_name("padded").unwrap(),
        Some(user("padded", 1002, 1000, "/home/padded"))
    );
    assert_eq!(db.user_by_uid(1002).unwrap(), None);
    // Ids beyond u32 are skipped.
    assert_eq!(db.user_by_name("huge").unwrap(), None);
    // Extra fields and CRLF line endings are tolerated.
    assert_eq!(
        db.user_by_name("extra").unwrap(),
        Some(user("extra", 1003, 1003, "/home/extra"))
    );
    assert_eq!(
        db.user_by_uid(1004).unwrap(),
        Some(user("crlf", 1004, 1004, "/home/crlf"))
    );
    assert_eq!(db.user_by_name("nobody-here").unwrap(), None);
}

#[test]
fn group_lookups_follow_go_rules() {
    let db = db();
    let group = |name: &str, gid| {
        Some(Group {
            name: name.into(),
            gid,
        })
    };
    assert_eq!(db.group_by_name("staff").unwrap(), group("staff", 50));
    assert_eq!(db.group_by_gid(0).unwrap(), group("root", 0));
    assert_eq!(db.group_by_name("dup").unwrap(), group("dup", 70));
    assert_eq!(db.group_by_gid(71).unwrap(), group("dup", 71));
    assert_eq!(db.group_by_name("nis").unwrap(), None);
    assert_eq!(db.group_by_name("threefields").unwrap(), None);
    assert_eq!(db.group_by_name("badgid").unwrap(), None);
    assert_eq!(db.group_by_gid(12345).unwrap(), None);
}

#[test]
fn missing_files_mean_unknown_and_unreadable_files_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = UserDb::new(dir.path().join("passwd"), dir.path().join("group"));
    assert_eq!(missing.user_by_name("root").unwrap(), None);
    assert_eq!(missing.group_by_gid(0).unwrap(), None);
    assert_eq!(
        missing
            .normalize_uid_gid(None, "root", None, "")
            .unwrap_err()
            .to_string(),
        "user: unknown user root"
    );

    // A directory opens but cannot be read.
    let unreadable = UserDb::new(dir.path(), dir.path());
    let err = unreadable.user_by_name("root").unwrap_err();
    assert!(matches!(err, SysError::Io { op: "read", .. }));
    assert_eq!(
        err.to_string(),
        format!("read {}: is a directory", dir.path().display())
    );
}

#[test]
fn lookup_id_words_a_missing_passwd_file_as_go_does() {
    let dir = tempfile::tempdir().unwrap();
    let passwd = dir.path().join("passwd");
    let missing = UserDb::new(&passwd, dir.path().join("group"));
    assert_eq!(
        missing.lookup_id(0).unwrap_err().to_string(),
        format!("open {}: no such file or directory", passwd.display())
    );
    // The same words as Pebble's notice in an image without /etc.
    let system_words = UserDb::new("/nonexistent/etc/passwd", "/nonexistent/etc/group")
        .lookup_id(0)
        .unwrap_err()
        .to_string();
    assert_eq!(
        system_words,
        "open /nonexistent/etc/passwd: no such file or directory"
    );
    // A file without the user: Go's unknown userid.
    let db = db();
    assert_eq!(
        db.lookup_id(4242).unwrap_err().to_string(),
        "user: unknown userid 4242"
    );
    assert_eq!(
        db.lookup_id(1001).unwrap(),
        user("bob", 1001, 1000, "/home/bob")
    );
}

#[test]
fn normalize_uid_gid_matches_pebble() {
    let db = db();
    let ok = |uid: Option<u32>, user: &str, gid: Option<u32>, group: &str| {
        db.normalize_uid_gid(uid, user, gid, group).unwrap()
    };
    let err = |uid: Option<u32>, user: &str, gid: Option<u32>, group: &str| {
        db.normalize_uid_gid(uid, user, gid, group)
            .unwrap_err()
            .to_string()
    };

    assert_eq!(ok(None, "", None, ""), None);
    // A user alone takes its primary group.
    assert_eq!(ok(None, "alice", None, ""), Some((1000, 1000)));
    assert_eq!(ok(None, "bob", None, ""), Some((1001, 1000)));
    assert_eq!(ok(Some(1000), "alice", None, ""), Some((1000, 1000)));
    assert_eq!(ok(None, "alice", None, "staff"), Some((1000, 50)));
    assert_eq!(ok(None, "alice", Some(7), ""), Some((1000, 7)));
    assert_eq!(ok(None, "alice", Some(50), "staff"), Some((1000, 50)));
    // Ids are not looked up.
    assert_eq!(ok(Some(4242), "", None, "staff"), Some((4242, 50)));
    assert_eq!(ok(Some(4242), "", Some(4343), ""), Some((4242, 4343)));

    assert_eq!(
        err(Some(1001), "alice", None, ""),
        r#"user "alice" UID (1000) does not match user-id (1001)"#
    );
    assert_eq!(
        err(None, "alice", Some(51), "staff"),
        r#"group "staff" GID (50) does not match group-id (51)"#
    );
    assert_eq!(
        err(None, "", None, "staff"),
        "must specify user, not just group"
    );
    assert_eq!(
        err(None, "", Some(50), ""),
        "must specify user, not just group"
    );
    // A bare uid runs in its user's primary group (Pebble v1.20 and later).
    assert_eq!(ok(Some(1000), "", None, ""), Some((1000, 1000)));
    assert_eq!(err(Some(4242), "", None, ""), "user: unknown userid 4242");
    assert_eq!(
        err(None, "nobody-here", None, ""),
        "user: unknown user nobody-here"
    );
    assert_eq!(
        err(None, "alice", None, "nogroup"),
        "group: unknown group nogroup"
    );
    // The user is checked before the group, as in Pebble.
    assert_eq!(
        err(None, "nobody-here", None, "nogroup"),
        "user: unknown user nobody-here"
    );
}

#[test]
fn the_real_root_user() {
    let root = user::user_by_name("root").unwrap().expect("root exists");
    assert_eq!((root.uid, root.gid), (0, 0));
    assert_eq!(user::user_by_uid(0).unwrap().unwrap().name, "root");
    assert_eq!(user::group_by_gid(0).unwrap().unwrap().name, "root");
    assert_eq!(user::group_by_name("root").unwrap().unwrap().gid, 0);
    assert_eq!(
        user::normalize_uid_gid(None, "root", None, "").unwrap(),
        Some((0, 0))
    );
    // The daemon's own identity resolves too.
    let uid = cobble_sys::current_uid();
    assert!(user::user_by_uid(uid).unwrap().is_some());
    assert_eq!(cobble_sys::current_euid(), uid);
}
