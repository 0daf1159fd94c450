//! The reader of a `readiness: notify` service's socket: it reads what arrives, places each
//! sender among the service's processes and hands what a message says to the actor.
//!
//! Anything can be sent to the socket, by the service and by anyone who finds its name, so
//! nothing that arrives may end the reader or make the daemon hold more than the datagram
//! in hand: a datagram the protocol does not allow is ignored and said once per run of the
//! service and kind (see [`notify::read`]), descriptors passed along are never taken in, and
//! at most [`IN_FLIGHT`] messages wait for the actor, so a flood queues in the socket, whose
//! buffer the kernel bounds, and its sender waits. Should the reader fail all the same (an
//! error of the socket, a bug), it is started again on the same socket after a pause, so
//! the address the service was given keeps working; it ends only with the supervisor, or
//! when it is stopped between two datagrams for a re-execution, which hands the socket (and
//! what waits in it) to the new program.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Done, ProcessJobs};
use crate::process::notify::{self, DATAGRAM_MAX, Message, NotifySocket};

/// Messages read but not yet taken by the actor, per service.
pub(super) const IN_FLIGHT: usize = 8;

/// The leader while an instance is being spawned: its process may speak before the spawn
/// has come back with its pid (a `systemd-notify --ready` run at once, on a loaded machine),
/// and what it says waits for the pid rather than be dropped.
pub(super) const SPAWNING: u32 = u32::MAX;

/// The most datagrams read as queued in a handed-over socket before its reader says it has
/// caught up: more than a socket's buffer holds of what a service says in a swap.
const CATCH_UP_MAX: usize = 1024;

/// The pause before a failed reader is started again; it doubles with each failure in a
/// row, up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(10);

/// A reader that ran this long before it failed starts the pauses over.
const HEALTHY: Duration = Duration::from_secs(60);

/// A running reader: what stops it between two datagrams, its task, and its messages in
/// flight (all [`IN_FLIGHT`] permits are free once the actor has handled every one).
pub(super) struct Running {
    pub stop: CancellationToken,
    pub task: JoinHandle<()>,
    pub in_flight: Arc<Semaphore>,
}

/// Starts reading `socket` for service `name`, whose running instance is led by `leader`
/// (0: none, [`SPAWNING`]: one is being spawned). With `catch_up` (a socket handed over by a
/// re-execution), what is queued in it is read first, and [`Done::CaughtUp`] said once it
/// has all been handed on.
pub(super) fn start(
    name: String,
    socket: Arc<NotifySocket>,
    leader: watch::Receiver<u32>,
    done: mpsc::UnboundedSender<Done>,
    jobs: ProcessJobs,
    catch_up: bool,
) -> Running {
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    let stop = CancellationToken::new();
    let reader = Reader {
        name: name.clone(),
        socket,
        leader,
        done,
        jobs,
        in_flight: in_flight.clone(),
        stop: stop.clone(),
        catch_up,
    };
    let task = tokio::spawn(keep_running(name, move || reader.clone().run()));
    Running {
        stop,
        task,
        in_flight,
    }
}

/// Runs the reader `run` makes until one ends well (`Ok`: the supervisor is gone), starting
/// it again after a pause when it fails or panics.
async fn keep_running<F, R>(name: String, mut run: F)
where
    F: FnMut() -> R,
    R: Future<Output = io::Result<()>> + Send + 'static,
{
    let mut pause = RETRY_FIRST;
    loop {
        let started = Instant::now();
        let why = match tokio::spawn(run()).await {
            Ok(Ok(())) => return,
            Ok(Err(e)) => cobble_sys::os_error_text(&e),
            Err(e) if e.is_panic() => "its reader panicked".to_owned(),
            // The runtime is shutting down.
            Err(_) => return,
        };
        if started.elapsed() >= HEALTHY {
            pause = RETRY_FIRST;
        }
        tracing::warn!(
            "Service \"{name}\" notify socket failed: {why}; reading it again in {}",
            cobble_plan::format_duration(pause.as_nanos() as i64)
        );
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RETRY_MAX);
    }
}

/// What a reader needs; cloned for each start.
#[derive(Clone)]
struct Reader {
    name: String,
    socket: Arc<NotifySocket>,
    leader: watch::Receiver<u32>,
    done: mpsc::UnboundedSender<Done>,
    jobs: ProcessJobs,
    in_flight: Arc<Semaphore>,
    /// Ends the reader (`Ok`) before the next datagram.
    stop: CancellationToken,
    /// Read what is queued first, then say so ([`Done::CaughtUp`]).
    catch_up: bool,
}

impl Reader {
    /// Reads until the supervisor is gone (`Ok`) or the socket fails. One datagram at a
    /// time: its sender is placed among the service's processes before the next is read, so
    /// a `BARRIER=1` is answered only once every message before it has been.
    async fn run(mut self) -> io::Result<()> {
        let mut buf = vec![0u8; DATAGRAM_MAX];
        // The instance the complaints below were for, and what was said of it.
        let mut complained: (u32, Vec<&'static str>) = (0, Vec::new());
        let mut caught = 0;
        loop {
            let received = if self.catch_up {
                // Bounded, so that a service that never stops talking cannot hold its
                // deadlines off.
                caught += 1;
                let queued = if caught > CATCH_UP_MAX {
                    Err(io::ErrorKind::WouldBlock.into())
                } else {
                    self.socket.recv_queued(&mut buf)
                };
                match queued {
                    Ok(received) => received,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        // Everything queued is on its way to the actor, in order, before this.
                        self.catch_up = false;
                        let caught_up = Done::CaughtUp {
                            name: self.name.clone(),
                        };
                        if self.done.send(caught_up).is_err() {
                            return Ok(());
                        }
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            } else {
                // Receiving is cancel-safe: a datagram not taken stays queued in the socket.
                tokio::select! {
                    biased;
                    () = self.stop.cancelled() => return Ok(()),
                    received = self.socket.recv(&mut buf) => received?,
                }
            };
            let bytes = &buf[..received.len];
            injected_fault(bytes);
            let message = notify::read(bytes, received.truncated);
            // Sent by an instance whose spawn is under way: placed once the spawn has
            // ended, with the pid it gave or with none.
            let Ok(leader) = self
                .leader
                .wait_for(|leader| *leader != SPAWNING)
                .await
                .map(|leader| *leader)
            else {
                return Ok(()); // the supervisor is gone
            };
            let Some(sender) = received.sender.filter(|_| leader != 0) else {
                continue;
            };
            let fields = match message {
                Message::Fields(fields) if !fields.is_empty() => fields,
                Message::Fields(_) | Message::Barrier => continue,
                Message::Ignored(why) => {
                    if complained.0 != leader {
                        complained = (leader, Vec::new());
                    }
                    if !complained.1.contains(&why) {
                        complained.1.push(why);
                        tracing::info!(
                            "Service \"{}\" notify message from pid {} ignored: {why}",
                            self.name,
                            sender.pid
                        );
                    }
                    continue;
                }
            };
            let belongs = sender.pid == leader
                || self
                    .jobs
                    .run(move |processes| processes.belongs(leader, sender))
                    .await
                    .ok()
                    .flatten()
                    .unwrap_or(false);
            let Ok(permit) = self.in_flight.clone().acquire_owned().await else {
                return Ok(());
            };
            let message = Done::Notify {
                name: self.name.clone(),
                leader,
                sender: sender.pid,
                belongs,
                fields,
                permit: InFlight(permit),
            };
            if self.done.send(message).is_err() {
                return Ok(()); // the supervisor is gone
            }
        }
    }
}

/// A message on its way to the actor, counted against [`IN_FLIGHT`] until it is dropped.
pub(super) struct InFlight(#[allow(dead_code, reason = "held for its drop")] OwnedSemaphorePermit);

/// Fault injection for the test of a reader that dies: in debug builds with
/// `COBBLE_TEST_FAULTS=1` in the daemon's environment, the message
/// `<PANIC_SIGNAL>=1` panics the reader. Release builds have no such path.
#[cfg(debug_assertions)]
fn injected_fault(bytes: &[u8]) {
    if bytes.strip_suffix(b"=1") == Some(crate::services::PANIC_SIGNAL.as_bytes())
        && std::env::var_os("COBBLE_TEST_FAULTS").is_some()
    {
        panic!("injected fault");
    }
}

#[cfg(not(debug_assertions))]
fn injected_fault(_bytes: &[u8]) {}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_reader_that_fails_or_panics_is_started_again_until_one_ends_well() {
        let runs = Arc::new(Mutex::new(Vec::new()));
        let seen = runs.clone();
        let mut count = 0;
        keep_running("svc".into(), move || {
            count += 1;
            let (n, runs) = (count, seen.clone());
            async move {
                runs.lock().unwrap().push((n, Instant::now()));
                match n {
                    1 => panic!("a bug"),
                    // ENOMEM, a transient failure of recvmsg.
                    2 => Err(io::Error::from_raw_os_error(12)),
                    _ => Ok(()),
                }
            }
        })
        .await;
        let runs = runs.lock().unwrap();
        assert_eq!(runs.len(), 3, "{runs:?}");
        assert_eq!(runs[1].1 - runs[0].1, RETRY_FIRST);
        assert_eq!(runs[2].1 - runs[1].1, RETRY_FIRST * 2);
    }
}
