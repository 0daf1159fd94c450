//! The plan's listening sockets, held from the moment the plan names them.
//!
//! On every plan change the daemon brings what it holds in line with the plan (see
//! [`crate::process::sockets`]) on the blocking pool, so that clients of a service with
//! `sockets:` wait in the kernel's backlog from then on, before the service first starts. A
//! socket that cannot be bound is said once in the daemon's log, and is tried again at each
//! spawn of its service. A `tcp` check that probes a held address is said once too: it
//! succeeds while its service is down, so it cannot tell whether the service works.

use std::collections::BTreeSet;
use std::sync::Arc;

use cobble_plan::Plan;
use tokio::sync::watch;

use crate::process::OsProcesses;

/// Holds what each plan names, until the plan channel closes. What the plan names now is
/// bound before this returns: the daemon is not ready, and its API does not answer, before
/// the sockets of the plan it starts with are held, so that no client it tells of a service
/// is refused at the service's address.
pub(super) async fn hold(mut plan: watch::Receiver<Arc<Plan>>, processes: Arc<OsProcesses>) {
    let mut said = BTreeSet::new();
    sync(&mut plan, &processes, &mut said).await;
    tokio::spawn(async move {
        while plan.changed().await.is_ok() {
            sync(&mut plan, &processes, &mut said).await;
        }
    });
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
