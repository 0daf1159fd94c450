//! `POST /v1/cobble/reexec`, cobble's own: re-executes the daemon in place (see
//! `daemon::reexec`). The handler hands the request to the daemon and waits: when the new
//! program has taken over, it answers on this very connection, which it was handed (a unix
//! socket's by its descriptor, an `--https` one with its session's keys, see
//! `tls_handoff`); when the re-execution is refused or fails, the old program answers here
//! with the reason.

use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::response::Response;
use cobble_client::types::ReexecRequest;
use tokio::sync::oneshot;

use super::{Admin, ApiError, Handable, Peer, Shared, json_body};
use crate::go_json::{GoField, GoPayload, GoStruct, GoType, STRING};

impl GoPayload for ReexecRequest {
    const GO: GoType = GoType::Struct(&GoStruct {
        name: "cobble.reexecPayload",
        fields: &[GoField::new("Binary", "binary", STRING)],
    });
}

/// A request for a re-execution, for the daemon to carry out.
#[derive(Debug)]
pub(crate) struct ReexecAsk {
    /// What the client named (empty for the daemon's own binary).
    pub binary: String,
    /// The asking client's connection, which the new program answers on.
    pub connection: Handable,
    /// Who asked, for the request's line in the log: the unix peer's credentials, or the
    /// TCP peer's address.
    pub uid: Option<u32>,
    pub pid: Option<i32>,
    pub addr: Option<std::net::SocketAddr>,
    /// When they asked.
    pub asked: jiff::Timestamp,
    /// Why the re-execution did not happen; never sent when it did.
    pub refused: oneshot::Sender<ApiError>,
}

/// Where the handler sends its requests: the daemon's loop.
pub(crate) type ReexecRequests = tokio::sync::mpsc::Sender<ReexecAsk>;

pub(super) async fn post_reexec(
    _: Admin,
    State(api): State<Shared>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    body: Body,
) -> Result<Response, ApiError> {
    let request: ReexecRequest = json_body(body, "cannot decode request body").await?;
    let Some(connection) = peer.handable else {
        // Plain HTTP grants no admin: never reached, but never a panic either.
        return Err(ApiError::bad_request(
            "cannot re-execute: ask over the unix socket or HTTPS, whose connections the new \
             program answers on",
        ));
    };
    let (refused, reason) = oneshot::channel();
    let ask = ReexecAsk {
        binary: request.binary,
        connection,
        uid: peer.uid,
        pid: peer.pid,
        addr: peer.addr,
        asked: jiff::Timestamp::now(),
        refused,
    };
    if api.reexec.try_send(ask).is_err() {
        return Err(ApiError::bad_request(
            "cannot re-execute: a re-execution is already under way",
        ));
    }
    match reason.await {
        Ok(error) => Err(error),
        // The daemon let go of the request without an answer: it is stopping.
        Err(_) => Err(ApiError::internal(
            "cannot re-execute: the daemon is stopping",
        )),
    }
}
