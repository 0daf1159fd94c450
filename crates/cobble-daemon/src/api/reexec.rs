//! `POST /v1/cobble/reexec`, cobble's own: re-executes the daemon in place (see
//! `daemon::reexec`). The handler hands the request to the daemon and waits: when the new
//! program has taken over, it answers on this very connection, which it was handed; when the
//! re-execution is refused or fails, the old program answers here with the reason.

use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::response::Response;
use cobble_client::types::ReexecRequest;
use tokio::sync::oneshot;

use super::{Admin, ApiError, Peer, Shared, Transport, json_body};
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
    pub connection: std::os::fd::RawFd,
    /// Who asked, for the request's line in the log.
    pub uid: Option<u32>,
    pub pid: Option<i32>,
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
    let connection = match (peer.transport, peer.fd) {
        (Transport::Unix, Some(fd)) => fd,
        _ => {
            return Err(ApiError::bad_request(
                "cannot re-execute: ask over the unix socket, whose connection the new program \
                 answers on",
            ));
        }
    };
    let (refused, reason) = oneshot::channel();
    let ask = ReexecAsk {
        binary: request.binary,
        connection,
        uid: peer.uid,
        pid: peer.pid,
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
