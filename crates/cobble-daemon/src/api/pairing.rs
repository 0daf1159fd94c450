//! `POST /v1/pairing`: how an HTTPS client would pair its certificate with the daemon.
//!
//! Pebble lets a client pair only during a pairing window, which a proof of ownership of the
//! machine (a button, a power cycle) would open; stock Pebble has nothing that opens one. So
//! the access check alone answers every request, with Pebble's `401 access denied`, whatever
//! the plan's `pairing: mode:` says (see [`PairingWindow`]); `GET` and other methods get
//! Pebble's `405`.

use super::ApiError;
use super::access::PairingWindow;

/// Never runs: no request gets past the pairing window.
pub(super) async fn post_pairing(window: PairingWindow) -> ApiError {
    match window {}
}
