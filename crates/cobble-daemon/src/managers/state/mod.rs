//! Changes and tasks: the API's record of what was asked and what happened.
//!
//! The store is a plain data structure behind one mutex, shared by the code that creates and
//! advances changes (the service manager's change runners) and the API (listing, waiting,
//! aborting). Critical sections are short and never await. Every mutation bumps a version
//! (under the lock) published on a `watch` channel, which both wakes
//! `/v1/changes/{id}/wait` and tells the persister there is something to write. The
//! persister coalesces bursts into one write (see [`persist`]), so the file is never
//! rewritten once per event.
//!
//! Change, task and notice IDs count up across restarts; changes left unfinished by a previous
//! daemon are closed at load so nothing waits on them forever.
//!
//! Notices ([`notices`]) live in the same data: every change's status change records a
//! `change-update` notice in the same critical section, and a second channel, bumped only
//! when a notice is new or repeated, wakes the long-pollers of `GET /v1/notices`.
//!
//! # On disk
//!
//! Two files in `$PEBBLE`, one format for both directions of a swap with Pebble:
//!
//! - `.pebble.state`, the checkpoint: the whole state in Pebble's own JSON shape
//!   ([`format`](mod@format)), so that Pebble (v1.7 on) and cobble can each start on what the other
//!   wrote. Written atomically and durably (temporary file, fsync, rename, fsync of the
//!   directory). What Pebble writes that cobble does not use is carried and written back;
//!   cobble's own fields map onto what Pebble's managers store, and cobble's one piece of
//!   bookkeeping, the journal generation, is a `data` entry Pebble carries.
//! - `.pebble.state.journal`, cobble's own file, which Pebble never reads: the records of
//!   what changed since the checkpoint, appended and flushed with `fdatasync`, each framed
//!   with a checksum and a sequence number, after a header that describes the checkpoint it
//!   continues ([`journal`]). It makes a durable answer cost one small append rather than a
//!   rewrite of the whole state; it is folded into the checkpoint when it grows, and at every
//!   clean stop, so a stopped daemon leaves the whole state in `.pebble.state` alone.
//!
//! No other state file is needed: everything cobble keeps fits Pebble's shape.
//!
//! # What a client is told is on disk
//!
//! A change or notice ID, or a change of identities, is answered only once the state file
//! holds it: the group commit of [`StateStore::durable`], many requests to one write. The API
//! answers a change ID only through a [`Recorded`], which only [`StateStore::recorded`] makes
//! after the write, and the managers that act for a client record first and act after (a
//! service action or an exec is carried out only once its change is on disk). When the write
//! fails (a full or read-only disk), every request waiting on it fails at once with the
//! cause, what it created is taken back ([`StateStore::discard_change`],
//! [`StateStore::add_notice_recorded`], [`StateStore::change_identities_recorded`]), and its
//! client may retry safely; reads, health, checks and running services go on, and the first
//! request after the disk heals succeeds. Notice long-pollers are answered only with notices
//! the state file holds, so none sees a notice before its `notify` could have been answered.
//!
//! # Damage
//!
//! At load, what is intact is used and what is not is detected ([`persist::load`]): a state
//! file that is empty or unreadable, a journal line that fails its checksum or sequence, a
//! state file older than its journal stop the daemon with the file named, what is known to be
//! lost and how to start anyway; a last record torn by a crash (never acknowledged) is left
//! out with a warning. Nothing is ever read as empty state in silence.

//! # Layout
//!
//! - `model`: the data ([`StateData`], [`Change`], [`Task`], [`TaskStatus`]) and the rules
//!   that only read or change it (a change's status, closing unfinished changes, pruning).
//! - `store`: [`StateStore`], the data behind one mutex, its versions and the group commit
//!   ([`Recorded`], [`NotRecorded`]).
//! - `render`: changes and tasks in the API's wire shape, and the streamed changes listing.
//! - [`notices`], `identities`: notices and identities, in the same data and store.
//! - [`format`](mod@format), `journal`, `persist`: the state file, the journal and the
//!   persister that writes them.

pub(crate) mod format;
mod identities;
mod journal;
mod model;
pub(crate) mod notices;
mod persist;
mod render;
mod smallmap;
mod store;

pub(crate) use identities::IdentitiesError;
pub use model::*;
pub(crate) use notices::{Notice, NoticeFilter, NoticeType, Occurrence};
pub(crate) use persist::{FlushError, Persister};
// Re-exported at the crate root, for the binary.
pub use persist::{PersistError, load};
pub(crate) use render::*;
pub(crate) use smallmap::SmallMap;
pub(crate) use store::*;

#[cfg(test)]
mod tests;
