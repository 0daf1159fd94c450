//! Log forwarding: service output sent to the plan's `log-targets` (Loki, OpenTelemetry,
//! syslog) as it is written.
//!
//! # Theory of operation
//!
//! Each output reader holds a [`ServiceTap`] and hands it every line as it produces it. The
//! tap looks up (once per plan change, through a generation counter) which targets want
//! this service, and pushes the line, with the service's labels for that target, onto each
//! target's bounded [`queue::TargetQueue`]. Pushing never waits: a full queue drops its
//! oldest entries and counts them. So however a receiver behaves, a service's output, the
//! API and the other targets go on.
//!
//! One sender task per target ([`send::run`]) drains its queue in batches and delivers them
//! with retries and backoff. The [`LogForwarder`] task follows the plan's `watch` channel:
//! a target added, removed or changed in the plan takes effect at once, without a replan,
//! for services already running too. Labels are expanded (`$VAR`, `${VAR}`) from each
//! service's `environment` in the plan when the plan changes; lines already queued keep the
//! labels they were written under.
//!
//! What is lost is visible: `/v1/metrics` shows `cobble_log_forward_dropped_total` and
//! `cobble_log_forward_sent_total` per target, and the daemon log says when a target starts
//! failing and when it works again.

pub(crate) mod encode;
pub(crate) mod queue;
pub(crate) mod send;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cobble_plan::{LogTarget, Plan};
use jiff::Timestamp;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use queue::{Entry, Labels, TargetQueue};
use send::Destination;

/// One target a service's lines go to.
struct Route {
    queue: Arc<TargetQueue>,
    labels: Arc<Labels>,
}

/// The routes of every service, replaced as a whole when the plan changes.
#[derive(Default)]
struct Routes {
    /// Bumped after every replacement of `by_service`.
    generation: AtomicU64,
    by_service: Mutex<HashMap<String, Arc<[Route]>>>,
}

/// Where output readers hand their lines. Cheap to clone; one per daemon.
#[derive(Clone, Default)]
pub(crate) struct Tap {
    routes: Arc<Routes>,
}

impl Tap {
    /// The tap for one reader of `service`'s output.
    pub(crate) fn service(&self, service: &str) -> ServiceTap {
        let mut tap = ServiceTap {
            routes: self.routes.clone(),
            service: service.into(),
            generation: 0,
            current: Arc::from([]),
        };
        tap.refresh();
        tap
    }
}

/// One output reader's handle on the forwarding routes.
pub(crate) struct ServiceTap {
    routes: Arc<Routes>,
    service: Arc<str>,
    /// The generation `current` was read at.
    generation: u64,
    current: Arc<[Route]>,
}

impl ServiceTap {
    fn refresh(&mut self) {
        let by_service = self
            .routes
            .by_service
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // Read under the lock that replacements hold, so a bump seen later is a later map.
        self.generation = self.routes.generation.load(Ordering::Acquire);
        self.current = by_service
            .get(&*self.service)
            .cloned()
            .unwrap_or_else(|| Arc::from([]));
    }

    /// Whether any target wants this service's lines now: a reader asks once per read, and
    /// makes no text for the lines when none does.
    pub(crate) fn wanted(&mut self) -> bool {
        if self.routes.generation.load(Ordering::Acquire) != self.generation {
            self.refresh();
        }
        !self.current.is_empty()
    }

    /// Forwards one line of output to every target that wants this service. Never waits.
    pub(crate) fn line(&mut self, time: Timestamp, line: &str) {
        if self.routes.generation.load(Ordering::Acquire) != self.generation {
            self.refresh();
        }
        for route in self.current.iter() {
            route.queue.push(Entry {
                time,
                service: self.service.clone(),
                message: line.to_owned(),
                labels: route.labels.clone(),
            });
        }
    }
}

/// Delivery counts of one target, for `/v1/metrics`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TargetStats {
    pub name: String,
    pub sent: u64,
    pub dropped: u64,
    pub queued: u64,
}

/// What a target held and had counted, handed from one program to the next by a
/// re-execution.
#[derive(Default)]
pub(crate) struct Carried {
    /// The entries not sent yet, oldest first.
    pub entries: Vec<Entry>,
    /// Its counters (`cobble_log_forward_sent_total`, `cobble_log_forward_dropped_total`),
    /// which go on from there.
    pub sent: u64,
    pub dropped: u64,
}

/// One running target.
struct Target {
    queue: Arc<TargetQueue>,
    /// Its sender has parked (see [`LogForwarder::pause`]).
    parked: watch::Receiver<bool>,
    destination: watch::Sender<Destination>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// Each running target's queue, and whether its sender has parked.
type Running = BTreeMap<String, (Arc<TargetQueue>, watch::Receiver<bool>)>;

/// Handle to the log forwarder. Cheap to clone.
#[derive(Clone)]
pub(crate) struct LogForwarder {
    targets: Arc<Mutex<Running>>,
    stop: CancellationToken,
    task: Arc<Mutex<Option<JoinHandle<()>>>>,
    /// Asks every sender to park, for a re-execution.
    paused: watch::Sender<bool>,
    /// Whether the first plan has been applied (its targets made and routed).
    applied: watch::Receiver<bool>,
}

impl LogForwarder {
    /// Starts following `plan`; lines handed to the returned [`Tap`] reach the targets.
    /// `carried` is what a predecessor's targets still held and had counted (a
    /// re-execution): queued first, and counted on from, at the targets of the same names.
    /// With something carried, the senders start paused, and send once
    /// [`LogForwarder::resume`]d: a program that fails to take over hands the same lines
    /// back to its predecessor, which must find none of them sent.
    pub(crate) fn spawn(
        plan: watch::Receiver<Arc<Plan>>,
        carried: BTreeMap<String, Carried>,
    ) -> (LogForwarder, Tap) {
        let tap = Tap::default();
        let (applied_tx, applied) = watch::channel(false);
        let forwarder = LogForwarder {
            targets: Arc::default(),
            stop: CancellationToken::new(),
            task: Arc::default(),
            paused: watch::Sender::new(!carried.is_empty()),
            applied,
        };
        let task = tokio::spawn(follow_plan(
            plan,
            tap.clone(),
            forwarder.targets.clone(),
            forwarder.stop.clone(),
            Following {
                paused: forwarder.paused.clone(),
                applied: applied_tx,
                carried,
            },
        ));
        *forwarder.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
        (forwarder, tap)
    }

    /// Counts per target in the plan, sorted by name.
    pub(crate) fn stats(&self) -> Vec<TargetStats> {
        let targets = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        targets
            .iter()
            .map(|(name, (queue, _))| TargetStats {
                name: name.clone(),
                sent: queue.sent(),
                dropped: queue.dropped(),
                queued: queue.len() as u64,
            })
            .collect()
    }

    /// Resolves once the first plan's targets are made and routed: lines read from then on
    /// are forwarded.
    pub(crate) async fn ready(&self) {
        let mut applied = self.applied.clone();
        let _ = applied.wait_for(|applied| *applied).await;
    }

    /// Parks every target's sender for a re-execution: each finishes the request it is
    /// making (so nothing is sent twice) and puts back what it did not deliver. Fails,
    /// naming them, for targets whose sender has not parked within `wait`; the senders stay
    /// asked to park until [`LogForwarder::resume`].
    pub(crate) async fn pause(&self, wait: std::time::Duration) -> Result<(), String> {
        self.paused.send_replace(true);
        let targets: Vec<(String, watch::Receiver<bool>)> = lock(&self.targets)
            .iter()
            .map(|(name, (_, parked))| (name.clone(), parked.clone()))
            .collect();
        let deadline = tokio::time::Instant::now() + wait;
        let mut busy = Vec::new();
        for (name, mut parked) in targets {
            let waited = tokio::time::timeout_at(deadline, parked.wait_for(|parked| *parked));
            if !matches!(waited.await, Ok(Ok(_))) {
                busy.push(format!("log target \"{name}\" is still sending"));
            }
        }
        if busy.is_empty() {
            Ok(())
        } else {
            Err(busy.join(", "))
        }
    }

    /// What each target holds, oldest first, its sender parked, and its counters.
    pub(crate) fn queued(&self) -> Vec<(String, Carried)> {
        lock(&self.targets)
            .iter()
            .map(|(name, (queue, _))| {
                let carried = Carried {
                    entries: queue.snapshot(),
                    sent: queue.sent(),
                    dropped: queue.dropped(),
                };
                (name.clone(), carried)
            })
            .collect()
    }

    /// Lets the senders a [`LogForwarder::pause`] parked go on.
    pub(crate) fn resume(&self) {
        self.paused.send_replace(false);
    }

    /// Sends what is queued (each target gets [`send::FINAL_FLUSH`]) and stops.
    pub(crate) async fn shutdown(&self) {
        self.stop.cancel();
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the forwarder's task keeps besides the targets.
struct Following {
    paused: watch::Sender<bool>,
    applied: watch::Sender<bool>,
    /// What a predecessor's targets held and counted, by target, until its target is made.
    carried: BTreeMap<String, Carried>,
}

/// The forwarder's task: applies each plan to the running targets and the routes.
async fn follow_plan(
    mut plan: watch::Receiver<Arc<Plan>>,
    tap: Tap,
    stats: Arc<Mutex<Running>>,
    stop: CancellationToken,
    mut following: Following,
) {
    // Read when the first plan with a log target comes: most daemons forward nothing, and
    // start-up need not wait for a thread of the blocking pool to learn a name no one sends.
    let mut host: Option<Arc<str>> = None;
    let mut targets: BTreeMap<String, Target> = BTreeMap::new();
    loop {
        let current = plan.borrow_and_update().clone();
        if host.is_none() && !current.log_targets.is_empty() {
            let name = tokio::task::spawn_blocking(hostname)
                .await
                .unwrap_or_else(|_| "-".to_owned());
            host = Some(name.into());
        }
        let hostname = host.clone().unwrap_or_else(|| Arc::from("-"));
        apply(&current, &mut targets, &tap, &hostname, &mut following);
        *stats.lock().unwrap_or_else(|e| e.into_inner()) = targets
            .iter()
            .map(|(name, target)| (name.clone(), (target.queue.clone(), target.parked.clone())))
            .collect();
        // What a predecessor queued for a target the plan no longer has is not sent.
        following.carried.clear();
        following.applied.send_replace(true);
        tokio::select! {
            changed = plan.changed() => if changed.is_err() { break },
            () = stop.cancelled() => break,
        }
    }
    // Nothing new is routed; every target sends what it holds, all at once.
    publish(&tap, HashMap::new());
    let stopping: Vec<JoinHandle<()>> = std::mem::take(&mut targets)
        .into_values()
        .map(|target| {
            target.stop.cancel();
            target.task
        })
        .collect();
    for task in stopping {
        let _ = task.await;
    }
}

fn apply(
    plan: &Plan,
    targets: &mut BTreeMap<String, Target>,
    tap: &Tap,
    hostname: &Arc<str>,
    following: &mut Following,
) {
    // A target that can never deliver (see `Plan::log_target_problems`) gets nothing: the
    // layer manager has said why, and the services it would serve say so in their notes.
    let usable = |name: &String| !plan.log_target_problems.contains_key(name);
    targets.retain(|name, target| {
        let keep = plan.log_targets.contains_key(name) && usable(name);
        if !keep {
            // Its sender gives what is queued a last chance, then ends on its own.
            target.stop.cancel();
        }
        keep
    });
    for (name, config) in plan.log_targets.iter().filter(|(name, _)| usable(name)) {
        let destination = Destination {
            kind: config.type_.clone(),
            location: config.location.clone(),
        };
        match targets.get(name) {
            Some(target) => {
                target.destination.send_if_modified(|current| {
                    let changed = *current != destination;
                    *current = destination;
                    changed
                });
            }
            None => {
                let queue = Arc::new(TargetQueue::default());
                if let Some(carried) = following.carried.remove(name) {
                    queue.count_on_from(carried.sent, carried.dropped);
                    queue.put_back(carried.entries);
                }
                let (destination_tx, destination_rx) = watch::channel(destination);
                let stop = CancellationToken::new();
                let (parked_tx, parked) = watch::channel(false);
                let task = tokio::spawn(send::run(
                    name.clone(),
                    queue.clone(),
                    destination_rx,
                    hostname.clone(),
                    stop.clone(),
                    send::Parking {
                        paused: following.paused.subscribe(),
                        parked: parked_tx,
                    },
                ));
                targets.insert(
                    name.clone(),
                    Target {
                        queue,
                        parked,
                        destination: destination_tx,
                        stop,
                        task,
                    },
                );
            }
        }
    }
    let mut routes: HashMap<String, Vec<Route>> = HashMap::new();
    for (name, config) in plan.log_targets.iter().filter(|(name, _)| usable(name)) {
        let target = &targets[name];
        for service in plan.services.values() {
            if service.logs_to(config) {
                routes.entry(service.name.clone()).or_default().push(Route {
                    queue: target.queue.clone(),
                    labels: Arc::new(labels(config, &service.environment)),
                });
            }
        }
    }
    publish(
        tap,
        routes
            .into_iter()
            .map(|(service, routes)| (service, routes.into()))
            .collect(),
    );
}

fn publish(tap: &Tap, by_service: HashMap<String, Arc<[Route]>>) {
    let mut current = tap
        .routes
        .by_service
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    *current = by_service;
    tap.routes.generation.fetch_add(1, Ordering::Release);
}

/// A target's labels for one service, `$VAR` and `${VAR}` expanded from its environment.
fn labels(target: &LogTarget, environment: &BTreeMap<String, String>) -> Labels {
    target
        .labels
        .iter()
        .map(|(key, value)| (key.clone(), expand(value, environment)))
        .collect()
}

/// Shell-style expansion as Go's `os.Expand` does it: `$NAME` and `${NAME}` become the
/// variable's value (empty when unset); a `$` that starts no name stays as it is.
fn expand(text: &str, environment: &BTreeMap<String, String>) -> String {
    let value = |name: &str| environment.get(name).map(String::as_str).unwrap_or("");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(braced) = after.strip_prefix('{') {
            match braced.find('}') {
                Some(0) | None => rest = braced.strip_prefix('}').unwrap_or(braced),
                Some(end) => {
                    out.push_str(value(&braced[..end]));
                    rest = &braced[end + 1..];
                }
            }
            continue;
        }
        let special = after
            .chars()
            .next()
            .filter(|c| "*#$@!?-".contains(*c) || c.is_ascii_digit());
        if let Some(c) = special {
            out.push_str(value(&c.to_string()));
            rest = &after[c.len_utf8()..];
            continue;
        }
        let end = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        if end == 0 {
            out.push('$');
        } else {
            out.push_str(value(&after[..end]));
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// This machine's name, for syslog's HOSTNAME field (`-` when unknown, as RFC 5424 says).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "-".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_follows_go_os_expand() {
        let env: BTreeMap<String, String> = [("JUJU_UNIT", "app/0"), ("A", "x"), ("A_1", "y")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let cases = [
            ("$JUJU_UNIT", "app/0"),
            ("unit-${JUJU_UNIT}-end", "unit-app/0-end"),
            ("$A_1.$A", "y.x"),
            ("$MISSING", ""),
            ("cost: 5$", "cost: 5$"),
            ("$ $A", "$ x"),
            ("${}x", "x"),
            ("${A", "A"),
            ("$1$A", "x"),
            ("plain", "plain"),
        ];
        for (text, want) in cases {
            assert_eq!(expand(text, &env), want, "{text}");
        }
    }

    #[tokio::test]
    async fn carried_lines_go_first_and_a_parked_sender_keeps_what_comes_until_resumed() {
        let receiver = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let port = receiver.local_addr().unwrap().port();
        let yaml = format!(
            "services:\n  a: {{override: replace, command: x}}\nlog-targets:\n  t:\n    \
             override: replace\n    type: syslog\n    location: udp://127.0.0.1:{port}\n    \
             services: [all]\n"
        );
        let plan = Plan::default()
            .add_layer(
                cobble_plan::Layer::parse(1, "base", &yaml).unwrap(),
                false,
                false,
            )
            .unwrap();
        let (_plan_tx, plan_rx) = watch::channel(Arc::new(plan));
        let carried = |message: &str| Entry {
            time: Timestamp::now(),
            service: "a".into(),
            message: message.into(),
            labels: Arc::default(),
        };
        let (forwarder, tap) = LogForwarder::spawn(
            plan_rx,
            [(
                "t".to_owned(),
                Carried {
                    entries: vec![carried("carried 1"), carried("carried 2")],
                    sent: 10,
                    dropped: 4,
                },
            )]
            .into(),
        );
        forwarder.ready().await;
        let mut a = tap.service("a");
        a.line(Timestamp::now(), "new 1");
        // Held until the program has taken over: a program that fails to would hand the
        // carried lines back, and they must not have gone out. The sender parks unasked,
        // before it sends anything.
        let mut parked = lock(&forwarder.targets)["t"].1.clone();
        tokio::time::timeout(std::time::Duration::from_secs(30), parked.wait_for(|p| *p))
            .await
            .expect("the sender parks from its start")
            .unwrap();
        let mut buf = vec![0u8; 4096];
        assert!(
            receiver.try_recv(&mut buf).is_err(),
            "nothing sent before the take-over"
        );
        assert_eq!(forwarder.stats()[0].queued, 3);
        forwarder.resume();
        let mut next = async || {
            let n = receiver.recv(&mut buf).await.unwrap();
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            // The message is the last two words.
            let words: Vec<&str> = text.split(' ').collect();
            words[words.len() - 2..].join(" ")
        };
        assert_eq!(next().await, "carried 1");
        assert_eq!(next().await, "carried 2");
        assert_eq!(next().await, "new 1");
        forwarder
            .pause(std::time::Duration::from_secs(30))
            .await
            .unwrap();
        a.line(Timestamp::now(), "new 2");
        let queued = forwarder.queued();
        assert_eq!(queued.len(), 1);
        let carried = &queued[0].1;
        let messages: Vec<&str> = carried.entries.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(messages, ["new 2"], "parked: nothing sent, the line kept");
        // Counted on from the predecessor's counts.
        assert_eq!((carried.sent, carried.dropped), (13, 4));
        assert_eq!(forwarder.stats()[0].sent, 13);
        assert_eq!(forwarder.stats()[0].dropped, 4);
        forwarder.resume();
        assert_eq!(next().await, "new 2");
        forwarder.shutdown().await;
    }

    #[tokio::test]
    async fn routes_follow_the_plan_without_a_restart_of_the_reader() {
        let layer = |label: &str, yaml: &str| cobble_plan::Layer::parse(1, label, yaml).unwrap();
        let plan = Plan::default()
            .add_layer(
                layer(
                    "base",
                    "services:\n  a: {override: replace, command: x, environment: {ZONE: z1}}\n  b: {override: replace, command: y}\n",
                ),
                false,
                false,
            )
            .unwrap();
        let (plan_tx, plan_rx) = watch::channel(Arc::new(plan.clone()));
        let (forwarder, tap) = LogForwarder::spawn(plan_rx, BTreeMap::new());
        let mut a = tap.service("a");
        a.line(Timestamp::now(), "before any target");
        let with_target = plan
            .add_layer(
                layer(
                    "forward",
                    "log-targets:\n  t:\n    override: replace\n    type: loki\n    location: http://127.0.0.1:9/\n    services: [all, -b]\n    labels: {zone: $ZONE}\n",
                ),
                false,
                false,
            )
            .unwrap();
        plan_tx.send(Arc::new(with_target)).unwrap();
        // The forwarder applies the plan on its own task.
        let mut queued = 0;
        for _ in 0..500 {
            a.line(Timestamp::now(), "routed");
            tap.service("b").line(Timestamp::now(), "not routed");
            queued = forwarder
                .stats()
                .first()
                .map_or(0, |s| s.queued + s.sent + s.dropped);
            if queued > 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(queued > 0);
        let routes = tap.routes.by_service.lock().unwrap();
        assert!(!routes.contains_key("b"));
        assert_eq!(routes["a"][0].labels["zone"], "z1");
    }
}
