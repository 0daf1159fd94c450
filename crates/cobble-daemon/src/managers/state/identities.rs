//! The store's share of identities: read under the one lock, changed as one mutation, so a
//! request that changed them can wait for the state file like any other
//! ([`StateStore::durable`]), and be undone when the file cannot be written.

use std::collections::BTreeMap;

use super::{NotRecorded, StateData, StateStore};
use crate::identities::{self, Action, Applied, Candidate, Credentials, Identity, RequestError};

/// Why a request's identities were not applied.
#[derive(Debug, thiserror::Error)]
pub(crate) enum IdentitiesError {
    /// The request itself is wrong (Pebble's wording).
    #[error(transparent)]
    Request(#[from] RequestError),
    /// The state file could not be written; nothing was changed.
    #[error("cannot record identities: {0}")]
    NotRecorded(NotRecorded),
}

impl StateStore {
    /// Every identity, by name.
    pub(crate) fn identities(&self) -> BTreeMap<String, Identity> {
        self.lock().identities.clone()
    }

    /// Applies a request's identities and returns once they are on disk. When the state
    /// file cannot be written, the identities are put back as they were (unless another
    /// request changed them meanwhile) and the request fails: who may do what never
    /// changes without a record of it.
    pub(crate) async fn change_identities_recorded(
        &self,
        action: Action,
        changes: BTreeMap<String, Option<Identity>>,
    ) -> Result<Applied, IdentitiesError> {
        let (applied, before) = self.apply_identities(action, changes)?;
        if let Err(e) = self.durable().await {
            self.mutate(|d| {
                if d.identities == before.after {
                    d.identities = before.before;
                    d.dirty.touch_identities();
                }
            });
            return Err(IdentitiesError::NotRecorded(e));
        }
        Ok(applied)
    }

    fn apply_identities(
        &self,
        action: Action,
        changes: BTreeMap<String, Option<Identity>>,
    ) -> Result<(Applied, Swap), RequestError> {
        self.mutate(|data| {
            let before = data.identities.clone();
            let applied = data.apply_identities(action, changes)?;
            Ok((
                applied,
                Swap {
                    before,
                    after: data.identities.clone(),
                },
            ))
        })
    }

    /// The identity that credentials name, before any password check.
    pub(crate) fn identity_candidate(&self, creds: &Credentials) -> Candidate {
        let data = self.lock();
        if data.identities.is_empty() {
            return Candidate::None;
        }
        identities::candidate(&data.identities, creds)
    }
}

impl StateData {
    /// Applies a request's identities, all or nothing. The daemon's own `--identities` are
    /// applied this way before the store exists (and so before anyone is answered); a
    /// client's go through [`StateStore::change_identities_recorded`], which waits for the
    /// state file.
    pub fn apply_identities(
        &mut self,
        action: Action,
        changes: BTreeMap<String, Option<Identity>>,
    ) -> Result<Applied, RequestError> {
        let mut current = std::mem::take(&mut self.identities);
        let result = identities::apply(&mut current, action, changes);
        self.identities = current;
        let applied = result?;
        self.dirty.touch_identities();
        Ok(applied)
    }
}

/// The identities before and after a request, to put back if it is not recorded.
struct Swap {
    before: BTreeMap<String, Identity>,
    after: BTreeMap<String, Identity>,
}
