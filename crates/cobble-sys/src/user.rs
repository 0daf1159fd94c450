//! Users and groups: the `/etc/passwd` and `/etc/group` files, and Pebble's
//! rules for turning a service's `user`/`user-id`/`group`/`group-id` into the
//! uid and gid it runs as.
//!
//! # Theory of operation
//!
//! Pebble is built with `CGO_ENABLED=0`, so Go's `os/user` never calls the C
//! library: it reads `/etc/passwd` and `/etc/group` itself. We do the same,
//! deliberately, rather than going through glibc's NSS (`getpwnam_r`, which is
//! what `nix::unistd::User::from_name` does):
//!
//! - **Fidelity.** A user that only LDAP/sssd knows, or an `nsswitch.conf`
//!   quirk, would make cobble accept a plan Pebble rejects, or the reverse.
//! - **Static builds.** glibc's NSS `dlopen`s modules at run time, which a
//!   static (musl or glibc) binary in a distroless image cannot do.
//! - **Testability.** [`UserDb`] reads any pair of files, so tests (here and in
//!   the daemon) use fixtures instead of depending on the host's users.
//!
//! The parser follows Go's `os/user` (`lookup_unix.go`): lines are trimmed of
//! surrounding white space; blank lines and lines starting with `#` are
//! skipped; a passwd row needs at least 7 fields and a group row at least 4;
//! rows whose name is empty or starts with `+` or `-` (NIS compat entries) are
//! skipped, as are rows whose ids are not numbers; the first matching row wins.
//! Lookups by id compare the decimal text, so `01000` is not uid 1000, as in
//! Go. One deliberate difference: ids must fit in `u32` (Go accepts any `int`),
//! since no other id can be used as a credential. Invalid UTF-8 is replaced
//! (U+FFFD) before matching.
//!
//! A missing file behaves as an empty one (the user is unknown), which is what
//! Pebble's workaround for golang/go#67912 achieves; any other read error is a
//! [`SysError::Io`]. [`UserDb::lookup_id`] alone says that the file is missing, as the
//! places where Pebble calls `user.LookupId` without that workaround do.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::SysError;

/// One row of `/etc/passwd`, the fields cobble uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// Login name (field 1); what Pebble puts in `USER`.
    pub name: String,
    /// User id (field 3).
    pub uid: u32,
    /// Primary group id (field 4); used when a service names a user but no group.
    pub gid: u32,
    /// Home directory (field 6); what Pebble puts in `HOME`.
    pub home: String,
}

/// One row of `/etc/group`, the fields cobble uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// Group name (field 1).
    pub name: String,
    /// Group id (field 3).
    pub gid: u32,
}

/// A pair of passwd and group files to resolve names against.
/// [`UserDb::system`] is the real one; the free functions of this module use it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserDb {
    /// The passwd-format file.
    passwd: PathBuf,
    /// The group-format file.
    group: PathBuf,
}

impl Default for UserDb {
    fn default() -> Self {
        Self::system()
    }
}

impl UserDb {
    /// `/etc/passwd` and `/etc/group`.
    pub fn system() -> Self {
        Self::new("/etc/passwd", "/etc/group")
    }

    /// Files at other paths (fixtures, a chroot, a container image's root).
    pub fn new(passwd: impl Into<PathBuf>, group: impl Into<PathBuf>) -> Self {
        UserDb {
            passwd: passwd.into(),
            group: group.into(),
        }
    }

    /// The first user named `name`, or `None` if there is none.
    pub fn user_by_name(&self, name: &str) -> Result<Option<User>, SysError> {
        self.find_user(|fields| fields[0] == name)
    }

    /// The first user with uid `uid`, or `None` if there is none.
    pub fn user_by_uid(&self, uid: u32) -> Result<Option<User>, SysError> {
        let uid = uid.to_string();
        self.find_user(|fields| fields[2] == uid)
    }

    /// Go's `user.LookupId` as Pebble is built (`os/user` reading the file itself): the
    /// first user with uid `uid`; `user: unknown userid 4242` when none has it, and, unlike
    /// the other lookups, `open /etc/passwd: no such file or directory` when there is no
    /// passwd file at all (the words of Pebble's `Cannot look up user` notices).
    pub fn lookup_id(&self, uid: u32) -> Result<User, SysError> {
        if let Err(source) = std::fs::metadata(&self.passwd)
            && source.kind() == io::ErrorKind::NotFound
        {
            return Err(SysError::Io {
                op: "open",
                path: self.passwd.clone(),
                source,
            });
        }
        self.user_by_uid(uid)?.ok_or(SysError::UnknownUserId(uid))
    }

    /// The first group named `name`, or `None` if there is none.
    pub fn group_by_name(&self, name: &str) -> Result<Option<Group>, SysError> {
        self.find_group(|fields| fields[0] == name)
    }

    /// The first group with gid `gid`, or `None` if there is none.
    pub fn group_by_gid(&self, gid: u32) -> Result<Option<Group>, SysError> {
        let gid = gid.to_string();
        self.find_group(|fields| fields[2] == gid)
    }

    /// Pebble's `NormalizeUidGid`: resolves a service's (or exec's) identity
    /// fields to the `(uid, gid)` to run as, or `None` when none is given (run
    /// as the daemon's own identity).
    ///
    /// - A `user` name is looked up; if `user_id` is also given it must match
    ///   (`user "bob" UID (1000) does not match user-id (1001)`).
    /// - With a user name but no group, the user's primary group is used.
    /// - A `group` name is looked up; if `group_id` is also given it must match.
    /// - A group without any user: `must specify user, not just group`.
    /// - A bare `user_id` without any group runs in that user's primary group, so the id is
    ///   looked up: `user: unknown userid 4242` when no user has it. (Pebble before v1.20
    ///   refused it with `must specify group, not just UID`.)
    /// - Unknown names: `user: unknown user bob`, `group: unknown group staff`.
    ///
    /// Empty names mean "not given", as in Pebble's plan.
    pub fn normalize_uid_gid(
        &self,
        user_id: Option<u32>,
        user: &str,
        group_id: Option<u32>,
        group: &str,
    ) -> Result<Option<(u32, u32)>, SysError> {
        let mut uid = user_id;
        let mut gid = group_id;
        if uid.is_none() && user.is_empty() && gid.is_none() && group.is_empty() {
            return Ok(None);
        }
        if !user.is_empty() {
            let found = self
                .user_by_name(user)?
                .ok_or_else(|| SysError::UnknownUser(user.to_owned()))?;
            if let Some(given) = uid.filter(|&given| given != found.uid) {
                return Err(SysError::UserIdMismatch {
                    name: user.to_owned(),
                    actual: found.uid,
                    given,
                });
            }
            uid = Some(found.uid);
            if gid.is_none() && group.is_empty() {
                gid = Some(found.gid);
            }
        }
        if !group.is_empty() {
            let found = self
                .group_by_name(group)?
                .ok_or_else(|| SysError::UnknownGroup(group.to_owned()))?;
            if let Some(given) = gid.filter(|&given| given != found.gid) {
                return Err(SysError::GroupIdMismatch {
                    name: group.to_owned(),
                    actual: found.gid,
                    given,
                });
            }
            gid = Some(found.gid);
        }
        if let (Some(id), None) = (uid, gid) {
            let found = self.user_by_uid(id)?.ok_or(SysError::UnknownUserId(id))?;
            gid = Some(found.gid);
        }
        match (uid, gid) {
            (Some(uid), Some(gid)) => Ok(Some((uid, gid))),
            (None, Some(_)) => Err(SysError::GroupWithoutUser),
            (_, None) => unreachable!("an empty request returned early; a uid gets a group"),
        }
    }

    fn find_user(&self, matches: impl Fn(&[&str]) -> bool) -> Result<Option<User>, SysError> {
        scan(&self.passwd, 7, |fields| {
            if !matches(fields) {
                return None;
            }
            Some(User {
                name: fields[0].to_owned(),
                uid: fields[2].parse().ok()?,
                gid: fields[3].parse().ok()?,
                home: fields[5].to_owned(),
            })
        })
    }

    fn find_group(&self, matches: impl Fn(&[&str]) -> bool) -> Result<Option<Group>, SysError> {
        scan(&self.group, 4, |fields| {
            if !matches(fields) {
                return None;
            }
            Some(Group {
                name: fields[0].to_owned(),
                gid: fields[2].parse().ok()?,
            })
        })
    }
}

/// Reads a colon-separated database file and returns the first row `select`
/// accepts. Rows with fewer than `min_fields` fields, or a name that is empty
/// or starts with `+`/`-`, are never offered. At most `min_fields` fields are
/// split off (the last holds the rest of the line), as Go's `SplitN` does.
fn scan<T>(
    path: &Path,
    min_fields: usize,
    select: impl Fn(&[&str]) -> Option<T>,
) -> Result<Option<T>, SysError> {
    let io_error = |op, source| SysError::Io {
        op,
        path: path.to_owned(),
        source,
    };
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(io_error("open", source)),
    };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|source| io_error("read", source))?;
    let text = String::from_utf8_lossy(&bytes);
    let found = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .find_map(|line| {
            let fields: Vec<&str> = line.splitn(min_fields, ':').collect();
            let name = fields[0];
            if fields.len() < min_fields
                || name.is_empty()
                || name.starts_with('+')
                || name.starts_with('-')
            {
                return None;
            }
            select(&fields)
        });
    Ok(found)
}

/// [`UserDb::user_by_name`] on the system files.
pub fn user_by_name(name: &str) -> Result<Option<User>, SysError> {
    UserDb::system().user_by_name(name)
}

/// [`UserDb::user_by_uid`] on the system files.
pub fn user_by_uid(uid: u32) -> Result<Option<User>, SysError> {
    UserDb::system().user_by_uid(uid)
}

/// [`UserDb::group_by_name`] on the system files.
pub fn group_by_name(name: &str) -> Result<Option<Group>, SysError> {
    UserDb::system().group_by_name(name)
}

/// [`UserDb::group_by_gid`] on the system files.
pub fn group_by_gid(gid: u32) -> Result<Option<Group>, SysError> {
    UserDb::system().group_by_gid(gid)
}

/// [`UserDb::normalize_uid_gid`] on the system files.
pub fn normalize_uid_gid(
    user_id: Option<u32>,
    user: &str,
    group_id: Option<u32>,
    group: &str,
) -> Result<Option<(u32, u32)>, SysError> {
    UserDb::system().normalize_uid_gid(user_id, user, group_id, group)
}
