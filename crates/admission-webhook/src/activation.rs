//! Socket activation: a listening socket passed by a service manager (cobble, systemd)
//! instead of one the webhook binds itself.
//!
//! The variables are read as `sd_listen_fds_with_names(3)` reads them: the sockets are for
//! this process only when `LISTEN_PID` is its own pid (unset, or another pid, and they are
//! ignored entirely: they were meant for a parent that exec'd us without passing them on);
//! `LISTEN_FDS` says how many there are, at descriptors 3 and on; `LISTEN_FDNAMES` names
//! them, colon-separated (each `unknown` when it is unset). A value that is no number, or
//! names that do not match the count, is an error, as there.
//!
//! One socket is used: the one named by `-listen-fd-name`, else the one named `https`, else
//! the first. It must be a TCP socket (IPv4 or IPv6) that listens (`SO_TYPE` is
//! `SOCK_STREAM`, `SO_ACCEPTCONN` is set); anything else, or a name nobody passed, ends the
//! program with an error naming what was expected and what was passed. The socket is made
//! close-on-exec as it is adopted; the others are closed (the service manager keeps its own
//! copies, and the webhook has no use for them).
//!
//! The socket listens from the moment the service manager bound it, but the webhook accepts
//! nothing before its certificates load (see [`crate::run`]): until then clients wait in the
//! kernel's backlog, and are answered once TLS works.

use std::net::TcpListener;
use std::os::fd::RawFd;

use listenfd::ListenFd;
use nix::sys::socket::{SockType, getsockopt, sockopt};

/// The first passed descriptor (`SD_LISTEN_FDS_START`).
pub const LISTEN_FDS_START: RawFd = 3;
/// The name of the socket used when `-listen-fd-name` names none.
pub const DEFAULT_NAME: &str = "https";

/// What the environment says about passed sockets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Passed {
    /// No `LISTEN_PID` or no `LISTEN_FDS`: nothing was passed.
    Nothing,
    /// Passed to another process (`LISTEN_PID`), so not to this one.
    ForAnotherProcess { listen_pid: u32, own_pid: u32 },
    /// Sockets at descriptors 3 and on, with these names.
    Sockets { names: Vec<String> },
}

/// Why the passed sockets cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ActivationError {
    #[error("invalid LISTEN_PID {0:?}: not a process id")]
    BadPid(String),
    #[error("invalid LISTEN_FDS {0:?}: not a positive number of sockets")]
    BadCount(String),
    #[error("LISTEN_FDNAMES {names:?} names {named} sockets, but LISTEN_FDS passes {count}")]
    NamesDoNotMatch {
        names: String,
        named: usize,
        count: usize,
    },
    /// `LISTEN_FDS_FIRST_FD` moves the descriptors in `listenfd`'s variant of the protocol;
    /// systemd and cobble never set it, and honouring it would take other descriptors than
    /// the ones named here.
    #[error("LISTEN_FDS_FIRST_FD is set: passed sockets must start at descriptor 3")]
    FirstFdMoved,
    #[error(
        "no passed socket is named {wanted:?} (-listen-fd-name): the service manager passed {passed}"
    )]
    NoSuchName { wanted: String, passed: String },
    #[error("cannot use the passed socket {name:?} (fd {fd}): {reason}")]
    Unusable {
        name: String,
        fd: RawFd,
        reason: String,
    },
}

/// Reads the protocol's variables (`var` looks one up) for the process `own_pid`.
pub fn read(var: impl Fn(&str) -> Option<String>, own_pid: u32) -> Result<Passed, ActivationError> {
    let Some(listen_pid) = var("LISTEN_PID") else {
        return Ok(Passed::Nothing);
    };
    let listen_pid = listen_pid
        .parse::<u32>()
        .ok()
        .filter(|pid| *pid > 0)
        .ok_or(ActivationError::BadPid(listen_pid))?;
    if listen_pid != own_pid {
        return Ok(Passed::ForAnotherProcess {
            listen_pid,
            own_pid,
        });
    }
    let Some(count) = var("LISTEN_FDS") else {
        return Ok(Passed::Nothing);
    };
    let count = count
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=(i32::MAX - LISTEN_FDS_START) as usize).contains(n))
        .ok_or(ActivationError::BadCount(count))?;
    // An empty list names nothing, as an unset one (systemd splits "" into no names).
    let names: Vec<String> = match var("LISTEN_FDNAMES").filter(|names| !names.is_empty()) {
        None => vec!["unknown".into(); count],
        Some(names) => {
            let split: Vec<String> = names.split(':').map(str::to_owned).collect();
            if split.len() != count {
                return Err(ActivationError::NamesDoNotMatch {
                    named: split.len(),
                    names,
                    count,
                });
            }
            split
        }
    };
    Ok(Passed::Sockets { names })
}

/// The index of the socket to use among `names`: the one named `wanted`, else the one named
/// `https`, else the first.
pub fn choose(names: &[String], wanted: Option<&str>) -> Result<usize, ActivationError> {
    match wanted {
        Some(wanted) => {
            names
                .iter()
                .position(|n| n == wanted)
                .ok_or_else(|| ActivationError::NoSuchName {
                    wanted: wanted.to_owned(),
                    passed: describe(names),
                })
        }
        None => Ok(names.iter().position(|n| n == DEFAULT_NAME).unwrap_or(0)),
    }
}

/// `1 socket: fd 3 "https"`, `2 sockets: fd 3 "admin", fd 4 "metrics"`.
fn describe(names: &[String]) -> String {
    let list: Vec<String> = names
        .iter()
        .zip(LISTEN_FDS_START..)
        .map(|(name, fd)| format!("fd {fd} {name:?}"))
        .collect();
    format!(
        "{} socket{}: {}",
        names.len(),
        if names.len() == 1 { "" } else { "s" },
        list.join(", ")
    )
}

/// The socket the service manager passed, adopted.
#[derive(Debug)]
pub struct PassedListener {
    /// Listening, close-on-exec, still blocking (the runtime makes it non-blocking).
    pub listener: TcpListener,
    /// Its name in `LISTEN_FDNAMES`.
    pub name: String,
    /// The descriptor it was passed at.
    pub fd: RawFd,
}

/// What [`take`] found.
#[derive(Debug)]
pub enum Taken {
    /// Nothing passed: bind `-webhookPort`.
    Nothing,
    /// Sockets passed to another process: ignored, bind `-webhookPort`.
    ForAnotherProcess { listen_pid: u32, own_pid: u32 },
    /// The socket to accept on.
    Listener(PassedListener),
}

/// Reads the environment and adopts the chosen socket (see the module docs).
///
/// Call it while the process has one thread: when sockets are passed to this process,
/// `listenfd` unsets `LISTEN_PID` and `LISTEN_FDS` as it reads them, and changing the
/// environment while another thread reads it is undefined behaviour. Nothing else is unset
/// (`sd_listen_fds` with `unset_environment` would unset `LISTEN_FDNAMES` too, and the other two when they are
/// another process's): `std::env::remove_var` takes `unsafe` in this edition, which this crate
/// forbids, and what is left is harmless. The only processes the webhook starts, kubeconfig
/// credential plugins, get none of the descriptors (close-on-exec or closed) and have another
/// pid than `LISTEN_PID`, so `sd_listen_fds` in them, or in anything they start, finds
/// nothing.
pub fn take(wanted: Option<&str>) -> Result<Taken, ActivationError> {
    let names = match read(|name| std::env::var(name).ok(), std::process::id())? {
        Passed::Nothing => return Ok(Taken::Nothing),
        Passed::ForAnotherProcess {
            listen_pid,
            own_pid,
        } => {
            return Ok(Taken::ForAnotherProcess {
                listen_pid,
                own_pid,
            });
        }
        Passed::Sockets { names } => names,
    };
    if std::env::var_os("LISTEN_FDS_FIRST_FD").is_some() {
        return Err(ActivationError::FirstFdMoved);
    }
    let index = choose(&names, wanted)?;
    let name = names[index].clone();
    let fd = LISTEN_FDS_START + index as RawFd;
    let unusable = |reason: String| ActivationError::Unusable {
        name: name.clone(),
        fd,
        reason,
    };
    // Its own reading agrees with `read` whenever `read` found sockets: LISTEN_PID is ours
    // (listenfd also takes an unset one, which `read` already turned away).
    let mut fds = ListenFd::from_env();
    if fds.len() != names.len() {
        return Err(unusable(format!(
            "LISTEN_FDS passes {} sockets, read {}",
            names.len(),
            fds.len()
        )));
    }
    // Checks it is an IPv4 or IPv6 stream socket, marks it close-on-exec, and adopts it.
    let listener = fds
        .take_tcp_listener(index)
        .map_err(|e| unusable(e.to_string()))?
        .ok_or_else(|| unusable("already taken".into()))?;
    let kind = getsockopt(&listener, sockopt::SockType)
        .map_err(|e| unusable(format!("cannot read its type: {e}")))?;
    if kind != SockType::Stream {
        return Err(unusable(format!(
            "it is a {kind:?} socket, not a stream socket"
        )));
    }
    let listening = getsockopt(&listener, sockopt::AcceptConn)
        .map_err(|e| unusable(format!("cannot tell whether it listens: {e}")))?;
    if !listening {
        return Err(unusable(
            "it is not listening (the service manager must bind and listen on it)".into(),
        ));
    }
    // The others are closed (taken, then dropped) if they are sockets listenfd knows; the
    // service manager keeps its own copies.
    for other in (0..names.len()).filter(|i| *i != index) {
        let _closed = fds.take_tcp_listener(other).is_ok()
            || fds.take_unix_listener(other).is_ok()
            || fds.take_udp_socket(other).is_ok()
            || fds.take_unix_datagram(other).is_ok();
    }
    Ok(Taken::Listener(PassedListener { listener, name, fd }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_with(vars: &[(&str, &str)], own_pid: u32) -> Result<Passed, ActivationError> {
        read(
            |name| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            },
            own_pid,
        )
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_variables_as_sd_listen_fds_with_names_reads_them() {
        let sockets = |list: &[&str]| Ok(Passed::Sockets { names: names(list) });
        for (vars, want) in [
            (&[][..], Ok(Passed::Nothing)),
            (&[("LISTEN_FDS", "1")][..], Ok(Passed::Nothing)),
            (&[("LISTEN_PID", "42")], Ok(Passed::Nothing)),
            (
                &[("LISTEN_PID", "42"), ("LISTEN_FDS", "1")],
                sockets(&["unknown"]),
            ),
            (
                &[
                    ("LISTEN_PID", "42"),
                    ("LISTEN_FDS", "2"),
                    ("LISTEN_FDNAMES", "admin:https"),
                ],
                sockets(&["admin", "https"]),
            ),
            (
                &[
                    ("LISTEN_PID", "42"),
                    ("LISTEN_FDS", "2"),
                    ("LISTEN_FDNAMES", ""),
                ],
                sockets(&["unknown", "unknown"]),
            ),
            (
                &[
                    ("LISTEN_PID", "7"),
                    ("LISTEN_FDS", "1"),
                    ("LISTEN_FDNAMES", "https"),
                ],
                Ok(Passed::ForAnotherProcess {
                    listen_pid: 7,
                    own_pid: 42,
                }),
            ),
            // Not for us: what the rest says does not matter.
            (
                &[("LISTEN_PID", "7"), ("LISTEN_FDS", "x")],
                Ok(Passed::ForAnotherProcess {
                    listen_pid: 7,
                    own_pid: 42,
                }),
            ),
            (
                &[("LISTEN_PID", "me"), ("LISTEN_FDS", "1")],
                Err(ActivationError::BadPid("me".into())),
            ),
            (
                &[("LISTEN_PID", "42"), ("LISTEN_FDS", "0")],
                Err(ActivationError::BadCount("0".into())),
            ),
            (
                &[("LISTEN_PID", "42"), ("LISTEN_FDS", "-1")],
                Err(ActivationError::BadCount("-1".into())),
            ),
            (
                &[
                    ("LISTEN_PID", "42"),
                    ("LISTEN_FDS", "2"),
                    ("LISTEN_FDNAMES", "https"),
                ],
                Err(ActivationError::NamesDoNotMatch {
                    names: "https".into(),
                    named: 1,
                    count: 2,
                }),
            ),
        ] {
            assert_eq!(read_with(vars, 42), want, "{vars:?}");
        }
    }

    #[test]
    fn the_named_socket_else_https_else_the_first() {
        let passed = names(&["admin", "https", "metrics"]);
        assert_eq!(choose(&passed, None), Ok(1));
        assert_eq!(choose(&passed, Some("metrics")), Ok(2));
        assert_eq!(choose(&names(&["a", "b"]), None), Ok(0));
        assert_eq!(choose(&names(&["unknown"]), None), Ok(0));
        let err = choose(&names(&["admin", "https"]), Some("webhook")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no passed socket is named \"webhook\" (-listen-fd-name): the service manager passed 2 sockets: fd 3 \"admin\", fd 4 \"https\""
        );
    }
}
