//! Services: the processes the daemon supervises.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::duration::GoDuration;
use crate::error::{CommandError, PlanError};
use crate::limits::{Resources, Rlimits};
use crate::shell::{shell_join, shell_split};
use crate::sockets::HeldSocket;

/// Backoff before the first automatic restart.
pub const DEFAULT_BACKOFF_DELAY: Duration = Duration::from_millis(500);
/// Each further backoff is the previous one times this.
pub const DEFAULT_BACKOFF_FACTOR: f64 = 2.0;
/// Backoffs never exceed this; it is also how long a service must stay up to reset backoff.
pub const DEFAULT_BACKOFF_LIMIT: Duration = Duration::from_secs(30);
/// Time between SIGTERM and SIGKILL when stopping.
pub const DEFAULT_KILL_DELAY: Duration = Duration::from_secs(5);

/// `startup:` of a service or check. For services unset means disabled; for checks it means
/// enabled. The plan keeps the difference so it prints back what the layers said.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum Startup {
    /// Not given in any layer.
    #[default]
    Unknown,
    /// `enabled`.
    Enabled,
    /// `disabled`.
    Disabled,
    /// Any other text, on a service only. Pebble does not validate a service's `startup`: it
    /// keeps the text, prints it back in the plan, and treats the service as not enabled.
    /// So does cobble, and says so in the plan's notes ([`crate::Plan::notes`]). A check's
    /// `startup` is validated, so checks never have this.
    Other(Arc<str>),
}

impl Startup {
    /// The YAML spelling (`""` when unset).
    pub fn as_str(&self) -> &str {
        match self {
            Startup::Unknown => "",
            Startup::Enabled => "enabled",
            Startup::Disabled => "disabled",
            Startup::Other(text) => text,
        }
    }

    /// A check's `startup`: only the two values, or unset.
    pub(crate) fn parse(text: &str) -> Option<Startup> {
        Some(match text {
            "" => Startup::Unknown,
            "enabled" => Startup::Enabled,
            "disabled" => Startup::Disabled,
            _ => return None,
        })
    }

    /// A service's `startup`: any text.
    pub(crate) fn parse_lax(text: &str) -> Startup {
        Startup::parse(text).unwrap_or_else(|| Startup::Other(text.into()))
    }
}

/// `override:` — how an entry combines with the same-named entry of earlier layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Override {
    /// Not given; an error once the layer is combined.
    #[default]
    Unknown,
    /// Field-by-field merge over the existing entry.
    Merge,
    /// Replace the existing entry entirely.
    Replace,
    /// Anything else: an error once the layer is combined, as in Pebble (so a layer's other
    /// faults, and an existing label, are reported before it).
    Invalid,
}

impl Override {
    /// The YAML spelling (`""` when unset or invalid).
    pub fn as_str(self) -> &'static str {
        match self {
            Override::Unknown | Override::Invalid => "",
            Override::Merge => "merge",
            Override::Replace => "replace",
        }
    }

    pub(crate) fn parse(text: &str) -> Override {
        match text {
            "" => Override::Unknown,
            "merge" => Override::Merge,
            "replace" => Override::Replace,
            _ => Override::Invalid,
        }
    }
}

/// What to do when a service exits or one of its checks fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ServiceAction {
    /// Not given: `restart` for exits, nothing for checks.
    #[default]
    Unset,
    /// Restart after the backoff delay.
    Restart,
    /// Stop the daemon, exit code 0 on success and 10 on failure (11 for checks).
    Shutdown,
    /// Stop the daemon with exit code 10 (only in `on-success`).
    FailureShutdown,
    /// Stop the daemon with exit code 0 (only in `on-failure` and `on-check-failure`).
    SuccessShutdown,
    /// Leave the service stopped.
    Ignore,
}

impl ServiceAction {
    /// The YAML spelling (`""` when unset).
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceAction::Unset => "",
            ServiceAction::Restart => "restart",
            ServiceAction::Shutdown => "shutdown",
            ServiceAction::FailureShutdown => "failure-shutdown",
            ServiceAction::SuccessShutdown => "success-shutdown",
            ServiceAction::Ignore => "ignore",
        }
    }

    /// Parses the value of `field` (`on-success`, `on-failure` or `on-check-failure`),
    /// accepting only the actions that field allows.
    pub(crate) fn parse_for(field: &str, text: &str) -> Option<ServiceAction> {
        let action = match text {
            "" => ServiceAction::Unset,
            "restart" => ServiceAction::Restart,
            "shutdown" => ServiceAction::Shutdown,
            "ignore" => ServiceAction::Ignore,
            "failure-shutdown" if field == "on-success" => ServiceAction::FailureShutdown,
            "success-shutdown" if field != "on-success" => ServiceAction::SuccessShutdown,
            _ => return None,
        };
        Some(action)
    }
}

/// One service, as written in a layer or as combined in the plan.
///
/// Fields left empty (`""`, `None`, empty collections) mean "not set", which is what lets a
/// `merge` layer change only what it mentions. Defaults are applied by the accessor methods,
/// never stored, so the plan prints back only what layers said.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Service {
    /// The key under `services:`.
    pub name: String,
    /// One-line summary.
    pub summary: String,
    /// Longer description.
    pub description: String,
    /// Whether autostart and replan start it.
    pub startup: Startup,
    /// How this entry combines with earlier layers; kept in the combined plan.
    pub override_: Override,
    /// The command line, split with [`shell_split`]; may end in a `[ default args ]` group.
    pub command: String,
    /// Services to start before this one, if they are being started too.
    pub after: Vec<String>,
    /// Services to start after this one, if they are being started too.
    pub before: Vec<String>,
    /// Services that must be running for this one: started with it, stopped before it.
    pub requires: Vec<String>,
    /// The entry of the plan's `workloads:` section the service runs in: its user, group and
    /// environment (the service's own environment on top). Cannot be combined with `user`,
    /// `user-id`, `group` or `group-id`. See [`crate::Plan::service_to_run`].
    pub workload: String,
    /// Extra environment for the process.
    pub environment: BTreeMap<String, String>,
    /// Numeric user to run as.
    pub user_id: Option<u32>,
    /// User name to run as.
    pub user: String,
    /// Numeric group to run as.
    pub group_id: Option<u32>,
    /// Group name to run as.
    pub group: String,
    /// Working directory; the daemon's own when empty.
    pub working_dir: String,
    /// Action when the process exits with status 0.
    pub on_success: ServiceAction,
    /// Action when the process exits with a non-zero status or a signal.
    pub on_failure: ServiceAction,
    /// Action per check name when that check fails (names are not validated, like Pebble).
    pub on_check_failure: BTreeMap<String, ServiceAction>,
    /// First restart delay.
    pub backoff_delay: Option<GoDuration>,
    /// Multiplier between successive restart delays.
    pub backoff_factor: Option<f64>,
    /// Largest restart delay, and the uptime that resets backoff.
    pub backoff_limit: Option<GoDuration>,
    /// Grace period between SIGTERM and SIGKILL.
    pub kill_delay: Option<GoDuration>,
    /// cobble extension: absolute paths that must all exist before the service is spawned;
    /// until then a wanted service waits. Appended on merge.
    pub requires_paths: Vec<String>,
    /// cobble extension: what to do when a watched absolute path changes. Merged per key.
    pub on_file_change: BTreeMap<String, FileChangeAction>,
    /// cobble extension: also write the service's output to files under the daemon's log
    /// directory, rotated by size, readable across daemon restarts. Set values win on merge.
    pub persist_logs: Option<bool>,
    /// cobble extension: checks that must each have succeeded (since the check was last
    /// started) and not be down before the process is spawned; until then a wanted service
    /// waits. Every name must be a check of the plan. Appended on merge.
    pub requires_checks: Vec<String>,
    /// cobble extension: after each start, failures of the checks in `on-check-failure` do
    /// not act until that check has succeeded once since the start, or this long has passed.
    pub start_grace: Option<GoDuration>,
    /// cobble extension: whether the service is a daemon (unset: `daemon`, Pebble's only
    /// kind) or a one-shot, whose start runs its command to completion.
    pub type_: ServiceType,
    /// cobble extension: how the service says it is ready (`notify`); unset, the process is
    /// ready once it has survived the okay delay.
    pub readiness: Readiness,
    /// cobble extension: the kernel's per-process limits, set on the process before it
    /// runs (and on commands run in its context). Merged per resource.
    pub rlimits: Rlimits,
    /// cobble extension: the limits of the cgroup the daemon gives the service, where it can
    /// have one. Merged per field.
    pub resources: Resources,
    /// cobble extension: listening sockets the daemon holds for the service across its
    /// restarts and passes to each run (systemd's socket activation), by the name passed in
    /// `LISTEN_FDNAMES`. Merged per socket, then per field.
    pub sockets: BTreeMap<String, HeldSocket>,
    /// cobble extension: with `readiness: notify`, the longest the service may go without
    /// sending `WATCHDOG=1`; past it the service has failed.
    pub watchdog: Option<GoDuration>,
    /// cobble extension: when the daemon starts the service by itself, in snapd's timer
    /// string format ([`crate::Schedule`]), in the daemon's local time; empty for never.
    /// Checked when the layer is read; a later layer's replaces an earlier one's.
    pub schedule: String,
}

/// What kind of service it is (cobble extension, `type:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ServiceType {
    /// Not set: a daemon, as in Pebble.
    #[default]
    Unset,
    /// `daemon`, said outright: a process that keeps running (what unset means too).
    Daemon,
    /// `oneshot`: its start runs the command to completion; once it has exited 0 the service
    /// stays completed until it is started again, stopped or its configuration changes.
    Oneshot,
}

impl ServiceType {
    /// Parses `daemon` or `oneshot` (or nothing).
    pub fn parse(text: &str) -> Option<ServiceType> {
        match text {
            "" => Some(ServiceType::Unset),
            "daemon" => Some(ServiceType::Daemon),
            "oneshot" => Some(ServiceType::Oneshot),
            _ => None,
        }
    }

    /// The value as a layer writes it (`""` when unset).
    pub fn as_str(&self) -> &'static str {
        match self {
            ServiceType::Unset => "",
            ServiceType::Daemon => "daemon",
            ServiceType::Oneshot => "oneshot",
        }
    }

    /// Whether the service is a one-shot.
    pub fn is_oneshot(&self) -> bool {
        *self == ServiceType::Oneshot
    }
}

/// How a service tells cobble it has started (cobble extension, `readiness:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Readiness {
    /// Not set: started once the process has run for the okay delay, as in Pebble.
    #[default]
    Unset,
    /// The sd_notify protocol: the service sends `READY=1` to `$NOTIFY_SOCKET`.
    Notify,
}

impl Readiness {
    /// Parses `notify` (or nothing).
    pub fn parse(text: &str) -> Option<Readiness> {
        match text {
            "" => Some(Readiness::Unset),
            "notify" => Some(Readiness::Notify),
            _ => None,
        }
    }

    /// The value as a layer writes it (`""` when unset).
    pub fn as_str(&self) -> &'static str {
        match self {
            Readiness::Unset => "",
            Readiness::Notify => "notify",
        }
    }
}

/// What `on-file-change` does when a watched path changes (cobble extension).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileChangeAction {
    /// Restart the service (if it is running or waiting to run).
    Restart,
    /// Do nothing; the workload reloads by itself.
    Ignore,
    /// Send this signal (a name such as `SIGHUP`) to the service's main process.
    Signal(String),
}

/// The signal names services may be sent: the standard Linux signals, spelled as Pebble's
/// `/v1/signals` accepts them.
pub const SIGNAL_NAMES: &[&str] = &[
    "SIGHUP",
    "SIGINT",
    "SIGQUIT",
    "SIGILL",
    "SIGTRAP",
    "SIGABRT",
    "SIGBUS",
    "SIGFPE",
    "SIGKILL",
    "SIGUSR1",
    "SIGSEGV",
    "SIGUSR2",
    "SIGPIPE",
    "SIGALRM",
    "SIGTERM",
    "SIGSTKFLT",
    "SIGCHLD",
    "SIGCONT",
    "SIGSTOP",
    "SIGTSTP",
    "SIGTTIN",
    "SIGTTOU",
    "SIGURG",
    "SIGXCPU",
    "SIGXFSZ",
    "SIGVTALRM",
    "SIGPROF",
    "SIGWINCH",
    "SIGIO",
    "SIGPWR",
    "SIGSYS",
];

impl FileChangeAction {
    /// Parses `restart`, `ignore` or a signal name.
    pub fn parse(text: &str) -> Option<FileChangeAction> {
        match text {
            "restart" => Some(FileChangeAction::Restart),
            "ignore" => Some(FileChangeAction::Ignore),
            sig if SIGNAL_NAMES.contains(&sig) => Some(FileChangeAction::Signal(sig.to_owned())),
            _ => None,
        }
    }

    /// The action as written in a layer.
    pub fn as_str(&self) -> &str {
        match self {
            FileChangeAction::Restart => "restart",
            FileChangeAction::Ignore => "ignore",
            FileChangeAction::Signal(name) => name,
        }
    }
}

impl Service {
    /// Splits `command` into the base command and the default arguments given between
    /// `[` and `]` at its end. Both brackets must be words of their own.
    pub fn parse_command(&self) -> Result<(Vec<String>, Vec<String>), PlanError> {
        split_command(&self.command).map_err(|error| PlanError::Command {
            service: self.name.clone(),
            error,
        })
    }

    /// The first restart delay (500ms unless set).
    pub fn backoff_delay(&self) -> Duration {
        self.backoff_delay
            .map_or(DEFAULT_BACKOFF_DELAY, |d| d.as_std())
    }

    /// The backoff multiplier (2.0 unless set).
    pub fn backoff_factor(&self) -> f64 {
        self.backoff_factor.unwrap_or(DEFAULT_BACKOFF_FACTOR)
    }

    /// The largest restart delay (30s unless set).
    pub fn backoff_limit(&self) -> Duration {
        self.backoff_limit
            .map_or(DEFAULT_BACKOFF_LIMIT, |d| d.as_std())
    }

    /// The SIGTERM-to-SIGKILL grace period (5s unless set).
    pub fn kill_delay(&self) -> Duration {
        self.kill_delay.map_or(DEFAULT_KILL_DELAY, |d| d.as_std())
    }

    /// The start grace, if one is set (cobble extension).
    pub fn start_grace(&self) -> Option<Duration> {
        self.start_grace.map(|d| d.as_std())
    }

    /// Whether autostart and replan start this service (`startup: enabled`).
    pub fn is_enabled(&self) -> bool {
        self.startup == Startup::Enabled
    }

    /// Whether this service's logs go to `target`: the last entry of the target's `services`
    /// list that mentions this service (`name`, `-name`, `all`, `-all`) decides.
    pub fn logs_to(&self, target: &crate::LogTarget) -> bool {
        let negated = format!("-{}", self.name);
        for entry in target.services.iter().rev() {
            if *entry == self.name || entry == "all" {
                return true;
            }
            if *entry == negated || entry == "-all" {
                return false;
            }
        }
        false
    }

    /// Applies a `merge` entry: set scalars win, lists append, maps merge per key.
    ///
    /// Every field is named, and every name must be used: a field added to [`Service`] does
    /// not compile until its merge rule is written here.
    #[deny(unused_variables)]
    pub(crate) fn merge(&mut self, other: &Service) {
        let Service {
            name: _,
            summary,
            description,
            startup,
            // An entry's override says how it combines; the combined entry keeps its own.
            override_: _,
            command,
            after,
            before,
            requires,
            workload,
            environment,
            user_id,
            user,
            group_id,
            group,
            working_dir,
            on_success,
            on_failure,
            on_check_failure,
            backoff_delay,
            backoff_factor,
            backoff_limit,
            kill_delay,
            requires_paths,
            on_file_change,
            persist_logs,
            requires_checks,
            start_grace,
            type_,
            readiness,
            rlimits,
            resources,
            sockets,
            watchdog,
            schedule,
        } = other;
        merge_string(&mut self.summary, summary);
        merge_string(&mut self.description, description);
        if *startup != Startup::Unknown {
            self.startup = startup.clone();
        }
        merge_string(&mut self.command, command);
        self.after.extend(after.iter().cloned());
        self.before.extend(before.iter().cloned());
        self.requires.extend(requires.iter().cloned());
        merge_string(&mut self.workload, workload);
        merge_map(&mut self.environment, environment);
        merge_option(&mut self.user_id, *user_id);
        merge_string(&mut self.user, user);
        merge_option(&mut self.group_id, *group_id);
        merge_string(&mut self.group, group);
        merge_string(&mut self.working_dir, working_dir);
        if *on_success != ServiceAction::Unset {
            self.on_success = *on_success;
        }
        if *on_failure != ServiceAction::Unset {
            self.on_failure = *on_failure;
        }
        merge_map(&mut self.on_check_failure, on_check_failure);
        merge_option(&mut self.backoff_delay, *backoff_delay);
        merge_option(&mut self.backoff_factor, *backoff_factor);
        merge_option(&mut self.backoff_limit, *backoff_limit);
        merge_option(&mut self.kill_delay, *kill_delay);
        self.requires_paths.extend(requires_paths.iter().cloned());
        merge_map(&mut self.on_file_change, on_file_change);
        merge_option(&mut self.persist_logs, *persist_logs);
        self.requires_checks.extend(requires_checks.iter().cloned());
        merge_option(&mut self.start_grace, *start_grace);
        if *type_ != ServiceType::Unset {
            self.type_ = *type_;
        }
        if *readiness != Readiness::Unset {
            self.readiness = *readiness;
        }
        self.rlimits.extend(rlimits.iter().map(|(k, v)| (*k, *v)));
        self.resources.merge(resources);
        for (name, socket) in sockets {
            self.sockets.entry(name.clone()).or_default().merge(socket);
        }
        merge_option(&mut self.watchdog, *watchdog);
        merge_string(&mut self.schedule, schedule);
    }
}

pub(crate) fn merge_string(into: &mut String, from: &str) {
    if !from.is_empty() {
        from.clone_into(into);
    }
}

pub(crate) fn merge_option<T: Copy>(into: &mut Option<T>, from: Option<T>) {
    if from.is_some() {
        *into = from;
    }
}

pub(crate) fn merge_map<V: Clone>(into: &mut BTreeMap<String, V>, from: &BTreeMap<String, V>) {
    for (key, value) in from {
        into.insert(key.clone(), value.clone());
    }
}

/// The `[ ... ]` grammar: `base... [ extra... ]`, brackets as separate words, nothing after
/// the group, no nesting, and a non-empty base.
pub(crate) fn split_command(command: &str) -> Result<(Vec<String>, Vec<String>), CommandError> {
    let words = shell_split(command)?;
    let (mut base, mut extra) = (Vec::new(), Vec::new());
    let (mut in_group, mut seen_group) = (false, false);
    for (index, word) in words.into_iter().enumerate() {
        if in_group {
            match word.as_str() {
                "[" => return Err(CommandError::NestedGroups),
                "]" => in_group = false,
                _ => extra.push(word),
            }
            continue;
        }
        if seen_group {
            return Err(CommandError::ArgumentsAfterGroup);
        }
        match word.as_str() {
            "[" if index == 0 => return Err(CommandError::StartsWithGroup),
            "[" => (in_group, seen_group) = (true, true),
            "]" => return Err(CommandError::StrayClose),
            _ => base.push(word),
        }
    }
    Ok((base, extra))
}

/// Renders a command from its base and default arguments, the inverse of
/// [`Service::parse_command`]; the group is omitted when `extra` is empty.
pub fn command_string(base: &[String], extra: &[String]) -> String {
    let mut command = shell_join(base);
    if !extra.is_empty() {
        command.push_str(" [ ");
        command.push_str(&shell_join(extra));
        command.push_str(" ]");
    }
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn service(command: &str) -> Service {
        Service {
            name: "svc".into(),
            command: command.into(),
            ..Service::default()
        }
    }

    #[test]
    fn parse_command_splits_base_and_default_args() {
        /// (command, base, default args, substituted args, resulting command)
        type Case<'a> = (
            &'a str,
            &'a [&'a str],
            &'a [&'a str],
            &'a [&'a str],
            &'a str,
        );
        let cases: &[Case<'_>] = &[
            (
                "cmd --foo bar",
                &["cmd", "--foo", "bar"],
                &[],
                &[],
                "cmd --foo bar",
            ),
            (
                "cmd --foo bar",
                &["cmd", "--foo", "bar"],
                &[],
                &["-v", "--opt"],
                "cmd --foo bar [ -v --opt ]",
            ),
            ("cmd [ --foo bar ]", &["cmd"], &["--foo", "bar"], &[], "cmd"),
            (
                "cmd [ --foo bar ]",
                &["cmd"],
                &["--foo", "bar"],
                &["--bar", "foo"],
                "cmd [ --bar foo ]",
            ),
            (
                "cmd --foo bar [ ]",
                &["cmd", "--foo", "bar"],
                &[],
                &[],
                "cmd --foo bar",
            ),
            (
                "cmd -v [ --foo bar -e \"x [ y ] z\" ]",
                &["cmd", "-v"],
                &["--foo", "bar", "-e", "x [ y ] z"],
                &["a b"],
                "cmd -v [ 'a b' ]",
            ),
        ];
        for &(command, base, extra, args, new_command) in cases {
            let (got_base, got_extra) = service(command).parse_command().unwrap();
            assert_eq!(got_base, strings(base), "{command}");
            assert_eq!(got_extra, strings(extra), "{command}");
            let rendered = command_string(&got_base, &strings(args));
            assert_eq!(rendered, new_command);
            let (again_base, again_extra) = service(&rendered).parse_command().unwrap();
            assert_eq!(again_base, strings(base));
            assert_eq!(again_extra, strings(args));
        }
    }

    #[test]
    fn parse_command_bracket_errors() {
        let cases = [
            (
                "cmd [ --foo ] --bar",
                "cannot have any arguments after [ ... ] group",
            ),
            ("[ cmd --foo ]", "cannot start command with [ ... ] group"),
            ("cmd -v [ foo [ --bar ] ]", "cannot nest [ ... ] groups"),
            ("cmd -v ] foo", "cannot have ] outside of [ ... ] group"),
            ("foo '", "EOF found when expecting closing quote"),
        ];
        for (command, reason) in cases {
            let err = service(command).parse_command().unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("cannot parse service \"svc\" command: {reason}")
            );
        }
    }

    #[test]
    fn defaults_apply_when_unset() {
        let mut svc = Service::default();
        assert_eq!(svc.backoff_delay(), Duration::from_millis(500));
        assert_eq!(svc.backoff_factor(), 2.0);
        assert_eq!(svc.backoff_limit(), Duration::from_secs(30));
        assert_eq!(svc.kill_delay(), Duration::from_secs(5));
        assert!(!svc.is_enabled());
        svc.backoff_delay = Some(GoDuration(1_000_000_000));
        svc.backoff_factor = Some(1.5);
        svc.backoff_limit = Some(GoDuration(-1));
        svc.kill_delay = Some(GoDuration(10_000_000_000));
        svc.startup = Startup::Enabled;
        assert_eq!(svc.backoff_delay(), Duration::from_secs(1));
        assert_eq!(svc.backoff_factor(), 1.5);
        assert_eq!(svc.backoff_limit(), Duration::ZERO);
        assert_eq!(svc.kill_delay(), Duration::from_secs(10));
        assert!(svc.is_enabled());
    }

    #[test]
    fn actions_are_valid_per_field() {
        use ServiceAction::*;
        let table = [
            ("on-success", "failure-shutdown", Some(FailureShutdown)),
            ("on-success", "success-shutdown", None),
            ("on-failure", "success-shutdown", Some(SuccessShutdown)),
            ("on-failure", "failure-shutdown", None),
            (
                "on-check-failure",
                "success-shutdown",
                Some(SuccessShutdown),
            ),
            ("on-check-failure", "failure-shutdown", None),
            ("on-success", "restart", Some(Restart)),
            ("on-failure", "shutdown", Some(Shutdown)),
            ("on-check-failure", "ignore", Some(Ignore)),
            ("on-success", "", Some(Unset)),
            ("on-success", "foo", None),
        ];
        for (field, text, want) in table {
            assert_eq!(
                ServiceAction::parse_for(field, text),
                want,
                "{field}: {text}"
            );
        }
    }

    #[test]
    fn logs_to_scans_from_the_end() {
        /// (target services, then each service name with whether it is forwarded)
        type Case<'a> = (&'a [&'a str], &'a [(&'a str, bool)]);
        let cases: &[Case<'_>] = &[
            (&[], &[("svc1", false)]),
            (&["all"], &[("svc1", true), ("svc2", true)]),
            (&["svc1"], &[("svc1", true), ("svc2", false)]),
            (&["all", "-svc2"], &[("svc1", true), ("svc2", false)]),
            (
                &["svc1", "svc2", "-svc1", "all"],
                &[("svc1", true), ("svc3", true)],
            ),
            (
                &["svc1", "svc2", "-all"],
                &[("svc1", false), ("svc2", false)],
            ),
            (&["all", "-all"], &[("svc1", false)]),
            (
                &["svc1", "svc2", "-all", "svc3", "svc1", "-svc3"],
                &[("svc1", true), ("svc2", false), ("svc3", false)],
            ),
        ];
        for (services, expectations) in cases {
            let target = crate::LogTarget {
                services: strings(services),
                ..crate::LogTarget::default()
            };
            for &(name, want) in *expectations {
                let svc = Service {
                    name: name.into(),
                    ..Service::default()
                };
                assert_eq!(svc.logs_to(&target), want, "{name} in {services:?}");
            }
        }
    }
}
