//! The store's share of identities: read under the one lock, changed as one mutation, so a
//! request that changed them can wait for the state file like any other
//! ([`StateStore::durable`]).

use std::collections::BTreeMap;

use super::StateStore;
use crate::identities::{self, Action, Applied, Candidate, Credentials, Identity, RequestError};

impl StateStore {
    /// Every identity, by name.
    pub fn identities(&self) -> BTreeMap<String, Identity> {
        self.lock().identities.clone()
    }

    /// Applies a request's identities, all or nothing.
    pub fn change_identities(
        &self,
        action: Action,
        changes: BTreeMap<String, Option<Identity>>,
    ) -> Result<Applied, RequestError> {
        let mut data = self.lock();
        let mut current = std::mem::take(&mut data.identities);
        let result = identities::apply(&mut current, action, changes);
        data.identities = current;
        if result.is_ok() {
            data.dirty.touch_identities();
        }
        drop(data);
        if result.is_ok() {
            self.inner.version.send_modify(|v| *v += 1);
        }
        result
    }

    /// The identity that credentials name, before any password check.
    pub fn identity_candidate(&self, creds: &Credentials) -> Candidate {
        let data = self.lock();
        if data.identities.is_empty() {
            return Candidate::None;
        }
        identities::candidate(&data.identities, creds)
    }
}
