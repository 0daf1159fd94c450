//! The plan: layers loaded at startup plus those added through the API.
//!
//! The current plan is published on a `watch` channel; the service manager (and later the
//! check and log managers) read it from there, so a layer change reaches every subscriber
//! without a replan. Adding a layer validates the combined result first: a rejected layer
//! leaves the plan exactly as it was.

use std::sync::Arc;

use cobble_plan::{Layer, Plan, PlanError};
use tokio::sync::watch;

/// Owner of the current plan.
pub struct PlanManager {
    tx: watch::Sender<Arc<Plan>>,
}

impl PlanManager {
    pub fn new(plan: Plan) -> PlanManager {
        let (tx, _) = watch::channel(Arc::new(plan));
        PlanManager { tx }
    }

    /// The current plan.
    pub fn plan(&self) -> Arc<Plan> {
        self.tx.borrow().clone()
    }

    /// A receiver that always sees the current plan.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Plan>> {
        self.tx.subscribe()
    }

    /// Adds a parsed layer (`POST /v1/layers`), appending it or combining it into the layer
    /// with the same label.
    pub fn add_layer(&self, layer: Layer, combine: bool, inner: bool) -> Result<(), PlanError> {
        let mut result = Ok(());
        // The closure runs under the channel's lock, so concurrent adds are serialised.
        self.tx
            .send_if_modified(|plan| match plan.add_layer(layer, combine, inner) {
                Ok(new) => {
                    *plan = Arc::new(new);
                    true
                }
                Err(e) => {
                    result = Err(e);
                    false
                }
            });
        result
    }
}
