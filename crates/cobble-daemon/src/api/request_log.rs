//! The daemon log's line per API request ([`crate::daemon_log::RequestLine`]), taken around
//! the router for each request a connection serves ([`super::serve`]), so that it costs
//! no layer of boxing.
//!
//! The request's task only reads the clock twice and copies the method, the path and the
//! peer; the line is formatted and written by the log's writer thread. A request Pebble does
//! not log (the polled `GET`s), or any request while the log is silent, costs one check.
//!
//! Pebble logs when its handler returns, which for a streamed answer (`/v1/logs?follow=true`,
//! a file pull) is when the last byte is written. So an answer whose length is not known up
//! front is logged when its body is done with (finished, or dropped when the client goes
//! away); any other as soon as it is ready.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use hyper::body::{Body as _, Frame, SizeHint};

use super::{Peer, Transport};
use crate::daemon_log::{self, Remote, RequestLine};

/// The line of `request` from `peer`, begun now: `None` when it is not logged (a polled
/// `GET`, or a silent log), which then costs nothing more.
pub(crate) fn start(request: &Request, peer: &Peer) -> Option<Started> {
    (daemon_log::logs_requests()
        && daemon_log::request_is_logged(request.method(), request.uri().path()))
    .then(|| Started::of(request, peer))
}

/// What a request's line needs from the request itself.
#[derive(Debug)]
pub(crate) struct Started {
    at: Instant,
    method: axum::http::Method,
    target: String,
    transport: &'static str,
    remote: Remote,
}

impl Started {
    fn of(request: &Request, peer: &Peer) -> Started {
        let uri = request.uri();
        let target = uri
            .path_and_query()
            .map_or_else(|| uri.path(), |p| p.as_str())
            .to_owned();
        let remote = match peer.transport {
            Transport::Unix => Remote::Unix {
                pid: peer.pid,
                uid: peer.uid,
            },
            Transport::Http | Transport::Https => Remote::Tcp(peer.addr),
        };
        let transport = peer.transport;
        Started {
            at: Instant::now(),
            method: request.method().clone(),
            target,
            transport: transport.as_str(),
            remote,
        }
    }

    /// Logs the request, answered with `status`.
    fn finish(self, status: StatusCode) {
        let status = match status {
            // Pebble hands an upgraded connection over without writing a status itself.
            StatusCode::SWITCHING_PROTOCOLS => 200,
            other => other.as_u16(),
        };
        daemon_log::request(RequestLine {
            at: jiff::Timestamp::now(),
            method: self.method,
            target: self.target,
            elapsed: self.at.elapsed(),
            status,
            transport: self.transport,
            remote: self.remote,
        });
    }
}

/// A request's answer, logged when it is ready (or, when streamed, when its body ends).
pub(crate) struct Logged<F> {
    inner: F,
    started: Option<Started>,
}

impl<F> Logged<F> {
    /// `inner`, the answer to a request whose line is `started`.
    pub(crate) fn new(inner: F, started: Option<Started>) -> Logged<F> {
        Logged { inner, started }
    }
}

impl<F> Future for Logged<F>
where
    F: Future<Output = Result<Response, Infallible>> + Unpin,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let Ok(response) = std::task::ready!(Pin::new(&mut this.inner).poll(cx));
        let Some(started) = this.started.take() else {
            return Poll::Ready(Ok(response));
        };
        if response.body().size_hint().exact().is_some() {
            started.finish(response.status());
            return Poll::Ready(Ok(response));
        }
        let status = response.status();
        Poll::Ready(Ok(response.map(|body| {
            Body::new(LoggedBody {
                inner: body,
                pending: Some((started, status)),
            })
        })))
    }
}

/// A streamed answer's body, which logs its request when it is done with.
struct LoggedBody {
    inner: Body,
    pending: Option<(Started, StatusCode)>,
}

impl hyper::body::Body for LoggedBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for LoggedBody {
    fn drop(&mut self) {
        if let Some((started, status)) = self.pending.take() {
            started.finish(status);
        }
    }
}
