//! Listening sockets held for services (`sockets:`), as systemd holds them for socket
//! activation.
//!
//! A socket is bound when the plan names it ([`HeldSockets::sync`], run on every plan
//! change), kept open across every stop and start of its service, and passed to each run
//! ([`HeldSockets::for_service`], at spawn). While the service is down, clients wait in the
//! kernel's backlog and the next run accepts them; nobody is refused. A socket the plan no
//! longer names is closed (and a unix socket's file removed); one whose address changed is
//! bound anew; a new backlog, mode or owner is applied to the socket as it is.
//!
//! A socket that cannot be bound (the address is in use, the port is privileged) is not
//! skipped: the failure is kept, logged, shown with the service, and tried again at each
//! spawn, which fails with the reason until the socket can be had.
//!
//! Binding blocks (and may look up users): call from the blocking pool.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use cobble_plan::{HeldSocket, ListenAddress, Plan, Service};

use super::launch::PassedFd;

/// The sockets held for every service of the plan.
#[derive(Debug, Default)]
pub(crate) struct HeldSockets {
    /// By service, then by socket name.
    held: Mutex<BTreeMap<String, BTreeMap<String, Slot>>>,
}

/// One socket of a service.
#[derive(Debug)]
struct Slot {
    /// As the plan gave it when it was last applied.
    config: HeldSocket,
    /// Where it listens.
    address: ListenAddress,
    /// The bound socket, unless it could not be bound.
    fd: Option<Arc<OwnedFd>>,
    /// Why it could not be bound, or why a change to it could not be applied (a socket
    /// that works is kept even so).
    error: Option<String>,
}

/// A held socket as the daemon reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SocketReport {
    /// Its name (`LISTEN_FDNAMES`).
    pub name: String,
    /// Where it listens, as the plan says.
    pub listen: String,
    /// Why it is not held, when it is not.
    pub error: Option<String>,
}

impl HeldSockets {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, BTreeMap<String, Slot>>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether nothing is held, and nobody is binding or releasing a socket now. Never
    /// blocks: a holder whose lock is taken is not known to be empty.
    pub(crate) fn is_idle_and_empty(&self) -> bool {
        match self.held.try_lock() {
            Ok(held) => held.is_empty(),
            Err(std::sync::TryLockError::Poisoned(held)) => held.into_inner().is_empty(),
            Err(std::sync::TryLockError::WouldBlock) => false,
        }
    }

    /// Holds what `plan` names: binds new sockets (and those that failed before), rebinds
    /// those whose address changed, applies other changes in place and closes the rest.
    /// Returns the failures, as `(service, socket, error)`. Blocking.
    pub(crate) fn sync(&self, plan: &Plan) -> Vec<(String, String, String)> {
        let mut held = self.lock();
        held.retain(|service, slots| {
            let keep = plan.services.contains_key(service);
            if !keep {
                slots.values().for_each(release);
            }
            keep
        });
        let mut failures = Vec::new();
        for (name, service) in &plan.services {
            if service.sockets.is_empty() && !held.contains_key(name) {
                continue;
            }
            let slots = held.entry(name.clone()).or_default();
            apply(slots, &service.sockets);
            for (socket, slot) in slots.iter() {
                if let Some(error) = &slot.error {
                    failures.push((name.clone(), socket.clone(), error.clone()));
                }
            }
            if slots.is_empty() {
                held.remove(name);
            }
        }
        failures
    }

    /// The sockets to pass to a run of service `name` as `config` names them, in the order of
    /// their names, holding any not held yet. Fails with the first that cannot be bound:
    /// `cannot listen on ADDRESS for socket "NAME": why`. Blocking.
    pub(crate) fn for_service(
        &self,
        name: &str,
        config: &Service,
    ) -> Result<Vec<PassedFd>, String> {
        let mut held = self.lock();
        if config.sockets.is_empty() && !held.contains_key(name) {
            return Ok(Vec::new());
        }
        let slots = held.entry(name.to_owned()).or_default();
        apply(slots, &config.sockets);
        let passed = slots
            .iter()
            .map(|(socket, slot)| match (&slot.fd, &slot.error) {
                (Some(fd), _) => Ok(PassedFd {
                    name: socket.clone(),
                    fd: fd.clone(),
                }),
                (None, error) => Err(error.clone().unwrap_or_default()),
            })
            .collect();
        if slots.is_empty() {
            held.remove(name);
        }
        passed
    }

    /// Every socket held, as `(service, socket, descriptor)`, for a re-execution to hand
    /// over: the daemon goes on owning them until its program is replaced. Blocking.
    pub(crate) fn carried(&self) -> Vec<(String, String, std::os::fd::RawFd)> {
        use std::os::fd::AsRawFd;
        self.lock()
            .iter()
            .flat_map(|(service, slots)| {
                slots.iter().filter_map(move |(socket, slot)| {
                    let fd = slot.fd.as_ref()?.as_raw_fd();
                    Some((service.clone(), socket.clone(), fd))
                })
            })
            .collect()
    }

    /// Holds the sockets a predecessor handed over, as `plan` names them, before anything
    /// is bound: the same open sockets, whose queued clients the services accept. One the
    /// plan no longer names as it was is closed (the next sync binds what it names).
    pub(crate) fn adopt(&self, plan: &Plan, sockets: Vec<(String, String, OwnedFd)>) {
        let mut held = self.lock();
        for (service, socket, fd) in sockets {
            let Some(config) = plan
                .services
                .get(&service)
                .and_then(|s| s.sockets.get(&socket))
            else {
                continue;
            };
            let Ok(address) = config.address() else {
                continue;
            };
            held.entry(service).or_default().insert(
                socket,
                Slot {
                    config: config.clone(),
                    address,
                    fd: Some(Arc::new(fd)),
                    error: None,
                },
            );
        }
    }

    /// What is held for service `name`, by socket name.
    pub(crate) fn report(&self, name: &str) -> Vec<SocketReport> {
        self.lock()
            .get(name)
            .map(|slots| {
                slots
                    .iter()
                    .map(|(socket, slot)| SocketReport {
                        name: socket.clone(),
                        listen: slot.config.listen.clone(),
                        error: slot.error.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Makes `slots` hold what `wanted` names.
fn apply(slots: &mut BTreeMap<String, Slot>, wanted: &BTreeMap<String, HeldSocket>) {
    slots.retain(|name, slot| {
        let keep = wanted.contains_key(name);
        if !keep {
            release(slot);
        }
        keep
    });
    for (name, config) in wanted {
        let Ok(address) = config.address() else {
            // The plan was validated: every socket it holds has an address.
            continue;
        };
        match slots.get_mut(name) {
            Some(slot) if slot.address == address => {
                match &slot.fd {
                    None => (slot.fd, slot.error) = split(bind(name, &address, config)),
                    Some(fd) if slot.config != *config => {
                        slot.error = adjust(name, &address, config, &slot.config, fd).err();
                    }
                    Some(_) => {}
                }
                slot.config = config.clone();
            }
            _ => {
                if let Some(old) = slots.remove(name) {
                    release(&old);
                }
                let (fd, error) = split(bind(name, &address, config));
                slots.insert(
                    name.clone(),
                    Slot {
                        config: config.clone(),
                        address,
                        fd,
                        error,
                    },
                );
            }
        }
    }
}

fn split(bound: Result<Arc<OwnedFd>, String>) -> (Option<Arc<OwnedFd>>, Option<String>) {
    match bound {
        Ok(fd) => (Some(fd), None),
        Err(error) => (None, Some(error)),
    }
}

/// Binds socket `name` at `address`, set up as `config` says.
fn bind(name: &str, address: &ListenAddress, config: &HeldSocket) -> Result<Arc<OwnedFd>, String> {
    let bound = match address {
        ListenAddress::Tcp(address) => cobble_sys::activation::listen_tcp(*address, config.backlog),
        ListenAddress::AnyTcp(port) => {
            cobble_sys::activation::listen_any_tcp(*port, config.backlog)
        }
        ListenAddress::Unix(path) => {
            cobble_sys::activation::listen_unix(Path::new(path), config.backlog)
        }
    };
    let fd = bound.map_err(|e| failure(name, address, &cobble_sys::os_error_text(&e)))?;
    if let ListenAddress::Unix(path) = address {
        set_file_attributes(Path::new(path), config).map_err(|why| failure(name, address, &why))?;
    }
    Ok(Arc::new(fd))
}

/// Applies a changed backlog, mode or owner to a socket bound at the same address.
fn adjust(
    name: &str,
    address: &ListenAddress,
    config: &HeldSocket,
    old: &HeldSocket,
    fd: &OwnedFd,
) -> Result<(), String> {
    if config.backlog != old.backlog {
        cobble_sys::activation::set_backlog(fd, config.backlog)
            .map_err(|e| failure(name, address, &cobble_sys::os_error_text(&e)))?;
    }
    if let ListenAddress::Unix(path) = address {
        set_file_attributes(Path::new(path), config).map_err(|why| failure(name, address, &why))?;
    }
    Ok(())
}

fn failure(name: &str, address: &ListenAddress, why: &str) -> String {
    format!("cannot listen on {address} for socket \"{name}\": {why}")
}

/// A unix socket file's mode and owner, as the socket's configuration gives them.
fn set_file_attributes(path: &Path, config: &HeldSocket) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(Some(mode)) = config.file_mode() {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("cannot set its mode: {}", cobble_sys::os_error_text(&e)))?;
    }
    if config.user.is_empty() && config.group.is_empty() {
        return Ok(());
    }
    let uid = lookup(&config.user, "user", |name| {
        cobble_sys::user::user_by_name(name).map(|u| u.map(|u| u.uid))
    })?;
    let mut gid = lookup(&config.group, "group", |name| {
        cobble_sys::user::group_by_name(name).map(|g| g.map(|g| g.gid))
    })?;
    if gid.is_none()
        && let Some(uid) = uid
    {
        gid = cobble_sys::user::user_by_uid(uid)
            .ok()
            .flatten()
            .map(|u| u.gid);
    }
    std::os::unix::fs::chown(path, uid, gid)
        .map_err(|e| format!("cannot set its owner: {}", cobble_sys::os_error_text(&e)))
}

/// A user or group given by name or numeric ID; `None` when empty.
fn lookup<E: std::fmt::Display>(
    text: &str,
    kind: &str,
    by_name: impl FnOnce(&str) -> Result<Option<u32>, E>,
) -> Result<Option<u32>, String> {
    if text.is_empty() {
        return Ok(None);
    }
    if let Ok(id) = text.parse::<u32>() {
        return Ok(Some(id));
    }
    match by_name(text) {
        Ok(Some(id)) => Ok(Some(id)),
        Ok(None) => Err(format!("{kind} \"{text}\" not found")),
        Err(e) => Err(format!("cannot look up {kind} \"{text}\": {e}")),
    }
}

/// Closes a socket no longer named, and removes a unix socket's file (only if it is still a
/// socket: whatever replaced it is not the daemon's).
fn release(slot: &Slot) {
    if let (ListenAddress::Unix(path), Some(_)) = (&slot.address, &slot.fd) {
        use std::os::unix::fs::FileTypeExt;
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
            let _ = std::fs::remove_file(path);
        }
    }
}
