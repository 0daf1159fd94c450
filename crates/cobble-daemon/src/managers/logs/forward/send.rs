//! One target's sender: batches its queue and delivers each batch, retrying with backoff.
//!
//! A batch goes out once it holds [`BATCH_ENTRIES`] entries or a second after its first
//! entry arrived, whichever comes first; a backlog goes out batch after batch without
//! waiting. A batch the receiver could not take (no connection, a timeout, 429 or 5xx) is
//! retried after a backoff that doubles up to [`MAX_BACKOFF`], while new output keeps
//! queueing behind it (and the queue drops its oldest entries if the receiver stays away).
//! A batch the receiver refuses for good (another 4xx) is dropped and counted. Each request
//! has [`REQUEST_TIMEOUT`], so a slow receiver holds up its own target and nothing else.

use std::sync::Arc;
use std::time::Duration;

use cobble_plan::SyslogTransport;
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::encode;
use super::queue::{BATCH_ENTRIES, Entry, TargetQueue};

/// How long a batch may wait for more entries.
pub(crate) const BATCH_DELAY: Duration = Duration::from_secs(1);
/// How long one request (or connection and write, for syslog) may take.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The first wait before a failed batch is sent again.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// The longest wait between attempts.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(8);
/// How long a removed target, or the daemon's exit, waits for the last batches to go out.
pub(crate) const FINAL_FLUSH: Duration = Duration::from_secs(2);

/// Where and how a target's entries go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Destination {
    /// `loki`, `opentelemetry` or `syslog` (the plan has checked it).
    pub kind: String,
    pub location: String,
}

/// Turns a batch into a request body.
type Encoder = fn(&[Entry]) -> Vec<u8>;

/// How a delivery attempt went.
#[derive(Debug)]
enum Outcome {
    Delivered,
    /// Try the same batch again later.
    Retry(String),
    /// The receiver will never take this batch.
    Refused(String),
}

/// The connection state of one destination.
enum Client {
    Http {
        client: Result<reqwest::Client, String>,
        url: String,
        body: Encoder,
    },
    Syslog {
        transport: SyslogTransport,
        address: String,
        hostname: Arc<str>,
        tcp: Option<tokio::net::TcpStream>,
        udp: Option<tokio::net::UdpSocket>,
    },
}

impl Client {
    fn new(destination: &Destination, hostname: Arc<str>) -> Client {
        if destination.kind == "syslog" {
            let (transport, address) = cobble_plan::syslog_address(&destination.location)
                .unwrap_or((SyslogTransport::Tcp, destination.location.as_str()));
            return Client::Syslog {
                transport,
                address: address.to_owned(),
                hostname,
                tcp: None,
                udp: None,
            };
        }
        let (url, body): (String, Encoder) = if destination.kind == "opentelemetry" {
            (
                format!("{}/v1/logs", destination.location),
                encode::opentelemetry,
            )
        } else {
            (destination.location.clone(), encode::loki)
        };
        let direct = reqwest::Url::parse(&url).is_ok_and(|u| crate::http_client::is_loopback(&u));
        Client::Http {
            client: crate::http_client::build_client(
                direct,
                &crate::http_client::TrustedRoots::system(),
            ),
            url,
            body,
        }
    }

    async fn deliver(&mut self, batch: &[Entry]) -> Outcome {
        match self {
            Client::Http { client, url, body } => {
                let client = match client {
                    Ok(client) => client,
                    Err(e) => return Outcome::Retry(e.clone()),
                };
                if crate::http_client::is_https(url) {
                    crate::http_client::TrustedRoots::system().load().await;
                }
                let request = client
                    .post(url.as_str())
                    .timeout(REQUEST_TIMEOUT)
                    .header("Content-Type", "application/json")
                    .header("User-Agent", concat!("cobble/", env!("CARGO_PKG_VERSION")))
                    .body(body(batch));
                match request.send().await {
                    Err(e) => Outcome::Retry(crate::http_client::root_cause(&e)),
                    Ok(response) => {
                        let status = response.status();
                        // Read the body so the connection can be reused.
                        let _ = response.bytes().await;
                        if status.is_success() {
                            Outcome::Delivered
                        } else if status.as_u16() == 429 || !status.is_client_error() {
                            Outcome::Retry(format!("server returned HTTP {status}"))
                        } else {
                            Outcome::Refused(format!("server returned HTTP {status}"))
                        }
                    }
                }
            }
            Client::Syslog {
                transport,
                address,
                hostname,
                tcp,
                udp,
            } => {
                let attempt = async {
                    match transport {
                        SyslogTransport::Tcp => {
                            if tcp.is_none() {
                                *tcp =
                                    Some(tokio::net::TcpStream::connect(address.as_str()).await?);
                            }
                            let stream = tcp.as_mut().expect("connected");
                            let frames = encode::syslog_octet_counted(batch, hostname);
                            stream.write_all(&frames).await
                        }
                        SyslogTransport::Udp => {
                            if udp.is_none() {
                                let target = tokio::net::lookup_host(address.as_str())
                                    .await?
                                    .next()
                                    .ok_or_else(|| std::io::Error::other("no address"))?;
                                let local = if target.is_ipv4() {
                                    "0.0.0.0:0"
                                } else {
                                    "[::]:0"
                                };
                                let socket = tokio::net::UdpSocket::bind(local).await?;
                                socket.connect(target).await?;
                                *udp = Some(socket);
                            }
                            let socket = udp.as_ref().expect("bound");
                            for entry in batch {
                                let message = encode::syslog_message(entry, hostname);
                                socket.send(message.as_bytes()).await?;
                            }
                            Ok(())
                        }
                    }
                };
                let result = match tokio::time::timeout(REQUEST_TIMEOUT, attempt).await {
                    Ok(result) => result.map_err(|e| cobble_sys::os_error_text(&e)),
                    Err(_) => Err("timed out".to_owned()),
                };
                match result {
                    Ok(()) => Outcome::Delivered,
                    Err(e) => {
                        // Whatever half of a frame went out is garbage: start afresh.
                        *tcp = None;
                        *udp = None;
                        Outcome::Retry(e)
                    }
                }
            }
        }
    }
}

/// What parks a sender for a re-execution: `paused` asks it to (it finishes the request it
/// is making, puts back what it did not deliver and sends nothing more while it holds),
/// `parked` is where it says it has.
pub(crate) struct Parking {
    pub paused: watch::Receiver<bool>,
    pub parked: watch::Sender<bool>,
}

impl Parking {
    /// What a sender does when stopped: gives what it holds [`FINAL_FLUSH`], unless it is
    /// parked. A sender is parked when stopped only in a new program that failed to take
    /// over before it resumed: what it holds goes back to its predecessor with the handover,
    /// and would be sent twice.
    async fn last(&self, name: &str, queue: &TargetQueue, client: &mut Client, batch: Vec<Entry>) {
        if *self.paused.borrow() {
            return;
        }
        final_flush(name, queue, client, batch).await;
    }

    /// Holds the sender while it is asked to, with `batch` back in `queue`.
    async fn hold(
        &mut self,
        queue: &TargetQueue,
        batch: &mut Vec<Entry>,
        stop: &CancellationToken,
    ) {
        if !*self.paused.borrow_and_update() {
            return;
        }
        queue.put_back(std::mem::take(batch));
        self.parked.send_replace(true);
        tokio::select! {
            _ = self.paused.wait_for(|paused| !paused) => {}
            () = stop.cancelled() => {}
        }
        self.parked.send_replace(false);
    }
}

/// Runs one target's sender until `stop`, then gives the last entries [`FINAL_FLUSH`].
pub(crate) async fn run(
    name: String,
    queue: Arc<TargetQueue>,
    mut destination: watch::Receiver<Destination>,
    hostname: Arc<str>,
    stop: CancellationToken,
    mut parking: Parking,
) {
    let mut client = Client::new(&destination.borrow_and_update(), hostname.clone());
    let mut backoff = FIRST_BACKOFF;
    // A batch taken from the queue that has not been delivered yet.
    let mut batch: Vec<Entry> = Vec::new();
    let mut failing = false;
    loop {
        parking.hold(&queue, &mut batch, &stop).await;
        if batch.is_empty() {
            // Wait for a first entry, then for a full batch or the batch delay.
            while queue.is_empty() {
                tokio::select! {
                    () = queue.wake.notified() => {}
                    Ok(()) = parking.paused.changed() => {
                        parking.hold(&queue, &mut batch, &stop).await;
                    }
                    () = stop.cancelled() => return parking.last(&name, &queue, &mut client, batch).await,
                    Ok(()) = destination.changed() => {
                        client = Client::new(&destination.borrow_and_update(), hostname.clone());
                    }
                }
            }
            let deadline = tokio::time::Instant::now() + BATCH_DELAY;
            while queue.len() < BATCH_ENTRIES {
                tokio::select! {
                    () = queue.wake.notified() => {}
                    () = tokio::time::sleep_until(deadline) => break,
                    () = stop.cancelled() => break,
                    Ok(()) = parking.paused.changed() => break,
                }
            }
            batch = queue.take(BATCH_ENTRIES);
            // Asked to park: the batch goes back at the top (a stop sends it instead).
            if *parking.paused.borrow() && !stop.is_cancelled() {
                continue;
            }
        }
        if stop.is_cancelled() {
            return parking.last(&name, &queue, &mut client, batch).await;
        }
        let outcome = tokio::select! {
            outcome = client.deliver(&batch) => outcome,
            () = stop.cancelled() => continue,
        };
        match outcome {
            Outcome::Delivered => {
                if failing {
                    tracing::info!("Sending logs to target \"{name}\" works again");
                    failing = false;
                }
                queue.count_sent(batch.len());
                batch.clear();
                backoff = FIRST_BACKOFF;
            }
            Outcome::Refused(why) => {
                tracing::info!(
                    "Target \"{name}\": request failed ({why}), dropping {} logs",
                    batch.len()
                );
                queue.count_dropped(batch.len());
                batch.clear();
            }
            Outcome::Retry(why) => {
                if !failing {
                    tracing::info!("Cannot flush logs to target \"{name}\": {why}");
                    failing = true;
                }
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = stop.cancelled() => {}
                    Ok(()) = parking.paused.changed() => {}
                    Ok(()) = destination.changed() => {
                        client = Client::new(&destination.borrow_and_update(), hostname.clone());
                    }
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Delivers what is left within [`FINAL_FLUSH`]; counts the rest as dropped.
async fn final_flush(name: &str, queue: &TargetQueue, client: &mut Client, mut batch: Vec<Entry>) {
    let flush = async {
        loop {
            if batch.is_empty() {
                batch = queue.take(BATCH_ENTRIES);
                if batch.is_empty() {
                    return;
                }
            }
            match client.deliver(&batch).await {
                Outcome::Delivered => queue.count_sent(batch.len()),
                Outcome::Refused(_) => queue.count_dropped(batch.len()),
                Outcome::Retry(_) => return,
            }
            batch.clear();
        }
    };
    if tokio::time::timeout(FINAL_FLUSH, flush).await.is_err() {
        tracing::debug!("Target \"{name}\": final flush timed out");
    }
    let lost = batch.len() + queue.take(usize::MAX).len();
    if lost > 0 {
        queue.count_dropped(lost);
        tracing::info!("Target \"{name}\": dropping {lost} logs that could not be sent");
    }
}
