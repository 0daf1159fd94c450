//! Reading service output back: the recent lines of several services merged in time order,
//! and following them as they are written.
//!
//! Each service's output lives in its [`ServiceLog`] ring. A request for the last `n` lines
//! takes the last `n` of each service, merges them by time and keeps the last `n` of the
//! whole, as Pebble does. Following keeps one [`Follower`] cursor per service, all waking
//! one [`Notify`]; each round takes what every cursor has not read yet and merges it. A
//! follower that fell so far behind that its lines were overwritten gets one
//! [`Line::Lost`] in their place, saying how many.

use std::sync::Arc;

use jiff::Timestamp;
use tokio::sync::Notify;

use super::persist::{LogFiles, read_back};
use super::ring::{Follower, LogEntry, ServiceLog};

/// Lines taken from one service per round while following: enough to amortise the
/// round, few enough to keep services interleaved when several are busy.
const FOLLOW_BATCH: usize = 1024;

/// What a reader sees, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Line {
    /// A line of output of `services[service]`.
    Output {
        service: usize,
        time: Timestamp,
        message: String,
    },
    /// `count` lines of `services[service]` were overwritten before this reader got them.
    Lost {
        service: usize,
        time: Timestamp,
        count: u64,
    },
}

impl Line {
    pub(crate) fn service(&self) -> usize {
        match self {
            Line::Output { service, .. } | Line::Lost { service, .. } => *service,
        }
    }

    pub(crate) fn time(&self) -> Timestamp {
        match self {
            Line::Output { time, .. } | Line::Lost { time, .. } => *time,
        }
    }
}

/// The marker text for lost lines: Pebble's truncation marker, with the count.
pub(crate) fn lost_message(count: u64) -> String {
    format!("(... output truncated: {count} lines lost ...)")
}

/// Merges per-service runs of lines (each in the order it was written) into one run ordered
/// by time; lines of equal time keep their service order. Time is compared to the
/// millisecond, the precision a line's time is shown with (and all Pebble keeps of it), so
/// lines of two services written within one millisecond come in the services' order, as
/// Pebble gives them, whichever was written first.
fn merge(runs: Vec<Vec<Line>>) -> Vec<Line> {
    let total = runs.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(total);
    let mut runs: Vec<std::iter::Peekable<std::vec::IntoIter<Line>>> =
        runs.into_iter().map(|r| r.into_iter().peekable()).collect();
    if runs.len() == 1 {
        out.extend(runs.pop().into_iter().flatten());
        return out;
    }
    loop {
        let next = runs
            .iter_mut()
            .enumerate()
            .filter_map(|(i, run)| run.peek().map(|line| (line.time().as_millisecond(), i)))
            .min();
        let Some((_, i)) = next else {
            break;
        };
        out.extend(runs[i].next());
    }
    out
}

fn output(service: usize, entries: Vec<LogEntry>) -> impl Iterator<Item = Line> {
    entries.into_iter().map(move |e| Line::Output {
        service,
        time: e.time,
        message: e.line,
    })
}

/// The last `n` lines (all of them for `None`) of `logs`, merged in time order. `older`
/// holds, per service, lines older than its ring holds (read back from its files), or is
/// empty.
pub(crate) fn recent(
    logs: &[ServiceLog],
    older: Vec<Vec<LogEntry>>,
    n: Option<usize>,
) -> Vec<Line> {
    let mut older = older.into_iter();
    let runs = logs
        .iter()
        .enumerate()
        .map(|(i, log)| {
            let mut entries = older.next().unwrap_or_default();
            entries.extend(log.last_entries(n));
            keep_last(output(i, entries).collect(), n)
        })
        .collect();
    keep_last(merge(runs), n)
}

fn keep_last(mut lines: Vec<Line>, n: Option<usize>) -> Vec<Line> {
    if let Some(n) = n {
        let excess = lines.len().saturating_sub(n);
        lines.drain(..excess);
    }
    lines
}

/// Follows the logs of several services.
pub(crate) struct Follow {
    followers: Vec<Follower>,
    wake: Arc<Notify>,
    /// The last `n` lines still to be served first, if any.
    initial: Option<Option<usize>>,
    /// Per service, lines older than its ring holds, served before the ring's.
    older: Vec<Vec<LogEntry>>,
}

impl Follow {
    /// Starts following `logs`: first the last `n` lines of all of them together (all that is
    /// held for `None`, counting the `older` lines read back from files), then every line
    /// written after.
    pub(crate) fn new(logs: &[ServiceLog], older: Vec<Vec<LogEntry>>, n: Option<usize>) -> Follow {
        let wake = Arc::new(Notify::new());
        let followers = logs.iter().map(|log| log.follow(n, wake.clone())).collect();
        Follow {
            followers,
            wake,
            initial: Some(n),
            older,
        }
    }

    /// The next lines, waiting until there are some. Cancel-safe: lines are taken only once
    /// the wait is over.
    pub(crate) async fn next(&mut self) -> Vec<Line> {
        if let Some(n) = self.initial.take() {
            let lines = keep_last(self.take(usize::MAX), n);
            if !lines.is_empty() {
                return lines;
            }
        }
        loop {
            let lines = self.take(FOLLOW_BATCH);
            if !lines.is_empty() {
                return lines;
            }
            self.wake.notified().await;
        }
    }

    fn take(&mut self, max: usize) -> Vec<Line> {
        let runs = self
            .followers
            .iter_mut()
            .enumerate()
            .map(|(i, follower)| {
                let batch = follower.take(max);
                let older = self
                    .older
                    .get_mut(i)
                    .map(std::mem::take)
                    .unwrap_or_default();
                let mut run = Vec::with_capacity(older.len() + batch.entries.len() + 1);
                run.extend(output(i, older));
                if batch.lost > 0 {
                    let time = batch
                        .entries
                        .first()
                        .map_or_else(Timestamp::now, |e| e.time);
                    run.push(Line::Lost {
                        service: i,
                        time,
                        count: batch.lost,
                    });
                }
                run.extend(output(i, batch.entries));
                run
            })
            .collect();
        merge(runs)
    }
}

/// Per service of `names`, whose rings are `logs`, the lines of its files older than its ring
/// holds: at most `n` of them, for the services in `persisted` (empty when no service has
/// persistent logs). The files are read on the blocking pool.
pub(crate) async fn older_than_rings(
    files: &LogFiles,
    names: &[String],
    logs: &[ServiceLog],
    persisted: &[String],
    n: Option<usize>,
) -> Vec<Vec<LogEntry>> {
    if persisted.is_empty() || n == Some(0) {
        return Vec::new();
    }
    let wanted: Vec<Option<(String, Option<Timestamp>)>> = names
        .iter()
        .zip(logs)
        .map(|(name, log)| {
            // Files hold millisecond times: the ring's own lines are those of its first
            // line's millisecond or later.
            let before = log
                .oldest_time()
                .and_then(|t| Timestamp::from_millisecond(t.as_millisecond()).ok());
            persisted.contains(name).then(|| (name.clone(), before))
        })
        .collect();
    let config = files.config().clone();
    tokio::task::spawn_blocking(move || {
        wanted
            .into_iter()
            .map(|wanted| match wanted {
                Some((name, before)) => read_back(&config, &name, before, n),
                None => Vec::new(),
            })
            .collect()
    })
    .await
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_700_000_000_000 + ms).unwrap()
    }

    fn messages(lines: &[Line]) -> Vec<String> {
        lines
            .iter()
            .map(|l| match l {
                Line::Output { message, .. } => message.clone(),
                Line::Lost { count, .. } => format!("lost {count}"),
            })
            .collect()
    }

    #[test]
    fn recent_lines_are_the_last_n_of_all_services_in_time_order() {
        let (a, b) = (ServiceLog::new(), ServiceLog::new());
        a.push(at(1), "a1".into());
        b.push(at(2), "b2".into());
        a.push(at(3), "a3".into());
        b.push(at(4), "b4".into());
        b.push(at(5), "b5".into());
        let logs = [a, b];
        assert_eq!(
            messages(&recent(&logs, Vec::new(), Some(3))),
            ["a3", "b4", "b5"]
        );
        assert_eq!(
            messages(&recent(&logs, Vec::new(), None)),
            ["a1", "b2", "a3", "b4", "b5"]
        );
        assert!(recent(&logs, Vec::new(), Some(0)).is_empty());
    }

    #[test]
    fn lines_of_one_millisecond_come_in_service_order() {
        let (a, b) = (ServiceLog::new(), ServiceLog::new());
        let base = at(7);
        b.push(
            base + jiff::SignedDuration::from_micros(100),
            "b first".into(),
        );
        a.push(
            base + jiff::SignedDuration::from_micros(900),
            "a later".into(),
        );
        a.push(at(8), "a next ms".into());
        b.push(
            at(8) + jiff::SignedDuration::from_micros(1),
            "b same ms".into(),
        );
        let logs = [a, b];
        assert_eq!(
            messages(&recent(&logs, Vec::new(), None)),
            ["a later", "b first", "a next ms", "b same ms"]
        );
        assert_eq!(messages(&recent(&logs, Vec::new(), Some(1))), ["b same ms"]);
    }

    #[tokio::test]
    async fn following_serves_the_last_n_then_new_lines_in_order() {
        let (a, b) = (ServiceLog::new(), ServiceLog::new());
        a.push(at(1), "a1".into());
        b.push(at(2), "b2".into());
        a.push(at(3), "a3".into());
        let mut follow = Follow::new(&[a.clone(), b.clone()], Vec::new(), Some(2));
        assert_eq!(messages(&follow.next().await), ["b2", "a3"]);
        b.push(at(4), "b4".into());
        a.push(at(5), "a5".into());
        assert_eq!(messages(&follow.next().await), ["b4", "a5"]);
        let waiting = tokio::spawn(async move { messages(&follow.next().await) });
        tokio::task::yield_now().await;
        a.push(at(6), "a6".into());
        assert_eq!(waiting.await.unwrap(), ["a6"]);
    }
}
