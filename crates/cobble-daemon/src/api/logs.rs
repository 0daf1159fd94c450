//! `GET /v1/logs`: service output as JSON lines, optionally followed.
//!
//! The answer is not an envelope but one `{"time","service","message"}` object per line
//! (`application/x-ndjson`). Without `follow` it is written at once; with it, a task streams
//! each round of lines as soon as it is there, through a small channel that the connection
//! drains: a slow client holds its own cursors back (and later learns what it lost), never
//! the service or the daemon.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use cobble_client::types::LogEntryRef;
use jiff::Timestamp;

use super::query::{first, multi_comma_list};
use super::{ApiError, Read, Shared};
use crate::logs::{self, Follow, Line, ServiceLog};
use cobble_client::time::format_utc_millis;

/// Lines sent when `n` is not given and the request does not follow.
const DEFAULT_LINES: usize = 30;

pub(super) async fn get_logs(
    _: Read,
    State(api): State<Shared>,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let follow = match first(&query, "follow") {
        "" | "false" => false,
        "true" => true,
        _ => {
            return Err(ApiError::bad_request(
                "follow parameter must be \"true\" or \"false\"",
            ));
        }
    };
    // `None` is every line held.
    let n = match first(&query, "n") {
        "" if follow => Some(0),
        "" => Some(DEFAULT_LINES),
        text => match text.parse::<i64>() {
            Ok(-1) => None,
            Ok(n) if n >= 0 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
            _ => {
                return Err(ApiError::bad_request(
                    "n must be -1, 0, or a positive integer",
                ));
            }
        },
    };
    let plan = api.plan.plan();
    let mut names = multi_comma_list(&query, "services");
    if names.is_empty() {
        names = plan.services.keys().cloned().collect();
    }
    let persisted: Vec<String> = names
        .iter()
        .filter(|name| plan.services.get(*name).and_then(|s| s.persist_logs) == Some(true))
        .cloned()
        .collect();
    let mut started = api.services.logs(names).await;
    // A service with persistent logs has them even when this daemon never started it.
    for name in &persisted {
        if !started.iter().any(|(started, _)| started == name) {
            started.push((name.clone(), ServiceLog::new()));
        }
    }
    started.sort_by(|a, b| a.0.cmp(&b.0));
    let (names, logs): (Vec<String>, Vec<ServiceLog>) = started.into_iter().unzip();
    let older = logs::older_than_rings(&api.log_files, &names, &logs, &persisted, n).await;

    if !follow {
        let lines = logs::recent(&logs, older, n);
        let mut body = Vec::with_capacity(lines.len() * 96);
        for line in &lines {
            render(line, &names, &mut body);
        }
        return Ok(ndjson(Body::from(body)));
    }
    let mut follow = Follow::new(&logs, older, n);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, Infallible>>(2);
    let connections = api.connections.clone();
    tokio::spawn(async move {
        let mut chunk = Vec::new();
        loop {
            let lines = tokio::select! {
                lines = follow.next() => lines,
                () = tx.closed() => return,
                // A daemon about to re-execute ends the stream whole: the follower has every
                // line so far, and follows the new program when it asks again.
                () = connections.drained() => return,
            };
            chunk.clear();
            for line in &lines {
                render(line, &names, &mut chunk);
            }
            if tx.send(Ok(Bytes::copy_from_slice(&chunk))).await.is_err() {
                return;
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Ok(ndjson(Body::from_stream(stream)))
}

fn ndjson(body: Body) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    response
}

/// Appends one line of the stream: the entry's JSON and a newline.
fn render(line: &Line, names: &[String], out: &mut Vec<u8>) {
    let time = wire_time(line.time());
    let lost;
    let message = match line {
        Line::Output { message, .. } => message.as_str(),
        Line::Lost { count, .. } => {
            lost = logs::lost_message(*count);
            lost.as_str()
        }
    };
    let entry = LogEntryRef {
        time: &time,
        service: &names[line.service()],
        message,
    };
    serde_json::to_writer(&mut *out, &entry).expect("log entries serialise");
    out.push(b'\n');
}

/// The time as Pebble's clients get it: read back from the millisecond log prefix, then
/// written by Go as RFC 3339 with trailing zeros trimmed (`.660` is `.66`, `.000` nothing).
fn wire_time(time: Timestamp) -> String {
    let mut text = format_utc_millis(time);
    text.pop(); // the `Z`
    while text.ends_with('0') {
        text.pop();
    }
    if text.ends_with('.') {
        text.pop();
    }
    text.push('Z');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_as_go_writes_them() {
        let t = |ms: i64| Timestamp::from_millisecond(ms).unwrap();
        assert_eq!(wire_time(t(1_619_141_332_660)), "2021-04-23T01:28:52.66Z");
        assert_eq!(wire_time(t(1_619_141_332_000)), "2021-04-23T01:28:52Z");
        assert_eq!(wire_time(t(1_619_141_332_007)), "2021-04-23T01:28:52.007Z");
        assert_eq!(wire_time(t(1_619_141_332_100)), "2021-04-23T01:28:52.1Z");
    }
}
