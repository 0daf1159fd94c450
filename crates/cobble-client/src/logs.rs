//! The logs API: service output read as it streams in, one [`LogEntry`] at a time.

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::Method;

use crate::client::{Client, decode_envelope, with_query};
use crate::error::Error;
use crate::transport::{self, content_type_of};
use crate::types::LogEntry;

/// Which lines [`Client::logs`] asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogsOptions {
    /// The services whose output to read; empty means all of them.
    pub services: Vec<String>,
    /// How many of the most recent lines, across all the services: `Some(-1)` for every line
    /// held, `None` for the daemon's default (30, or none when following).
    pub n: Option<i64>,
    /// Keep the request open and receive new lines as they are written.
    pub follow: bool,
}

impl Client {
    /// `GET /v1/logs`: calls `write` for each line, oldest first, until the stream ends (or,
    /// when following, until the connection does or `write` fails, whose error is returned).
    pub async fn logs<E: From<Error>>(
        &self,
        options: &LogsOptions,
        mut write: impl FnMut(LogEntry) -> Result<(), E>,
    ) -> Result<(), E> {
        let n = options.n.map(|n| n.to_string());
        let mut query: Vec<(&str, &str)> = options
            .services
            .iter()
            .map(|s| ("services", s.as_str()))
            .collect();
        if let Some(n) = &n {
            query.push(("n", n));
        }
        if options.follow {
            query.push(("follow", "true"));
        }
        let path_and_query = with_query("/v1/logs", &query);
        let streamed = transport::send_streaming(
            self.endpoint(),
            Method::GET,
            &path_and_query,
            "application/x-ndjson",
            None,
            http_body_util::Empty::<Bytes>::new(),
        )
        .await?;
        let label = streamed.request_label;
        let status = streamed.response.status().as_u16();
        let content_type = content_type_of(&streamed.response).unwrap_or_default();
        let mut body = streamed.response.into_body();
        if status != 200 || content_type != "application/x-ndjson" {
            let bytes = body
                .collect()
                .await
                .map_err(|e| Error::broken(label, e))?
                .to_bytes();
            decode_envelope(status, &bytes)?;
            return Err(Error::Protocol(format!(
                "expected application/x-ndjson response, got {content_type:?}"
            ))
            .into());
        }
        let mut pending: Vec<u8> = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| Error::broken(label.clone(), e))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            pending.extend_from_slice(&data);
            let mut start = 0;
            while let Some(end) = pending[start..].iter().position(|&b| b == b'\n') {
                let line = &pending[start..start + end];
                start += end + 1;
                let entry: LogEntry = serde_json::from_slice(line)
                    .map_err(|e| Error::Protocol(format!("cannot unmarshal log: {e}")))?;
                write(entry)?;
            }
            pending.drain(..start);
        }
        Ok(())
    }
}
