//! The plan's listening sockets, held from the moment the plan names them.
//!
//! Whenever the plan changes (the daemon's first plan, and each layer added) the plan manager
//! brings what the daemon holds in line with it (see [`crate::process::sockets`]) on the
//! blocking pool before it goes on: the daemon does not answer before the sockets of the plan
//! it starts with are held, nor answers the adding of a layer before the sockets that layer
//! names are held, so that from then on clients of a service with `sockets:` wait in the
//! kernel's backlog, before the service first starts, and are never refused. A socket that
//! cannot be bound is said once in the daemon's log (before that answer) and shown with its
//! service, and is tried again at each spawn of its service. A `tcp` check that probes a
//! held address is said once too: it succeeds while its service is down, so it cannot tell
//! whether the service works.

use std::collections::BTreeSet;
use std::sync::Arc;

use cobble_plan::Plan;
use tokio::sync::watch;

use crate::process::OsProcesses;

/// Holds what the plan names. Cheap to clone.
#[derive(Clone)]
pub(crate) struct SocketHolder {
    inner: Arc<Inner>,
}

struct Inner {
    processes: Arc<OsProcesses>,
    /// The plan, and what was said of the last plan synced. Syncs take turns under this
    /// lock, each with the plan that is current when its turn comes.
    state: tokio::sync::Mutex<(watch::Receiver<Arc<Plan>>, BTreeSet<String>)>,
}

impl SocketHolder {
    pub(crate) fn new(plan: watch::Receiver<Arc<Plan>>, processes: Arc<OsProcesses>) -> Self {
        SocketHolder {
            inner: Arc::new(Inner {
                processes,
                state: tokio::sync::Mutex::new((plan, BTreeSet::new())),
            }),
        }
    }

    /// Brings what is held in line with the plan as it is when this sync's turn comes, and
    /// says what is new to say. Once this returns, every socket the plan named when it was
    /// called is bound, or its failure logged and kept with its service. The sync runs to
    /// its end even if the caller stops waiting (a client that hangs up).
    pub(crate) async fn sync(&self) {
        let inner = self.inner.clone();
        let synced = tokio::spawn(async move {
            let mut state = inner.state.lock().await;
            let (plan, said) = &mut *state;
            sync(plan, &inner.processes, said).await;
        });
        let _ = synced.await;
    }
}

/// Brings what is held in line with the plan as it is now, and says what is new to say.
async fn sync(
    plan: &mut watch::Receiver<Arc<Plan>>,
    processes: &Arc<OsProcesses>,
    said: &mut BTreeSet<String>,
) {
    let current = plan.borrow_and_update().clone();
    // A plan that names no socket, with none held, has nothing to sync: most plans, and
    // every daemon's first, need no thread of the blocking pool for it.
    let names_sockets = current.services.values().any(|s| !s.sockets.is_empty());
    let synced = if names_sockets || !processes.sockets().is_idle_and_empty() {
        let (processes, current) = (processes.clone(), current.clone());
        tokio::task::spawn_blocking(move || processes.sockets().sync(&current))
            .await
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let mut now = BTreeSet::new();
    for (service, _socket, error) in synced {
        now.insert(format!("Service \"{service}\": {error}"));
    }
    for probe in current.tcp_checks_on_held_sockets() {
        now.insert(format!(
            "Check \"{}\" (TCP) probes {}, which cobble holds for service \"{}\" \
             (socket \"{}\"): it succeeds while the service is down; an http or exec \
             check, or the service's watchdog, tells whether the service answers",
            probe.check, probe.target, probe.service, probe.socket
        ));
    }
    for line in now.difference(said) {
        tracing::info!("{line}");
    }
    *said = now;
}
