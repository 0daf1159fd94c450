//! The one error type of this crate.
//!
//! Every `Display` text is Pebble's wording (`cannot ...`, lowercase, Go-style `%q` quoting),
//! because clients such as `ops` surface these messages and some tests match on them. The
//! variants carry the names involved as fields so the daemon can decide on a status code
//! without parsing text.

use crate::duration::{GoDuration, go_quote};
use crate::shell::ShellError;

/// Why a service's `command` could not be split into a base command and default arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// Quoting is unbalanced or the line ends in a backslash.
    #[error(transparent)]
    Split(#[from] ShellError),
    /// `[` is the very first word.
    #[error("cannot start command with [ ... ] group")]
    StartsWithGroup,
    /// A `[` inside a `[ ... ]` group.
    #[error("cannot nest [ ... ] groups")]
    NestedGroups,
    /// Words after the closing `]`.
    #[error("cannot have any arguments after [ ... ] group")]
    ArgumentsAfterGroup,
    /// A `]` with no group open.
    #[error("cannot have ] outside of [ ... ] group")]
    StrayClose,
}

/// An error from parsing, combining, validating, ordering or loading layers.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The layer is not well-formed YAML for the schema: a syntax error, an unknown or
    /// duplicate key, a value of the wrong type or an invalid duration.
    #[error(
        "cannot parse layer {}{}: {}{}",
        go_quote(.label),
        section_part(.section),
        line_part(.line),
        .message
    )]
    Parse {
        /// The layer's label.
        label: String,
        /// The top-level section (`services`, `checks`, `log-targets`) the error is in, if any.
        section: Option<String>,
        /// The 1-based line of the offending YAML, when known.
        line: Option<u64>,
        /// What is wrong, without location.
        message: String,
    },
    /// A `workloads:` or `pairing:` section that is not well-formed for its schema.
    #[error("cannot parse the {section} section: {}{}", line_part(.line), .message)]
    ParseSection {
        /// `"workloads"` (quoted, as Pebble writes it) or `pairing`.
        section: &'static str,
        /// The 1-based line of the offending YAML, when known.
        line: Option<u64>,
        /// What is wrong, without location.
        message: String,
    },
    /// A top-level key other than the known sections.
    #[error("cannot parse layer {}: unknown section {}", go_quote(.label), go_quote(.section))]
    UnknownSection {
        /// The layer's label.
        label: String,
        /// The unknown key.
        section: String,
    },
    /// Labels starting with `pebble-` are reserved for layers the daemon creates itself.
    #[error("cannot use reserved label prefix \"pebble-\"")]
    ReservedLabelPrefix,
    /// A service named `""`.
    #[error("cannot use empty string as service name")]
    EmptyServiceName,
    /// A check named `""`.
    #[error("cannot use empty string as check name")]
    EmptyCheckName,
    /// A service named `pebble`, which would be ambiguous in logs.
    #[error("cannot use reserved service name {}", go_quote(.name))]
    ReservedServiceName {
        /// The name.
        name: String,
    },
    /// A service name starting with `-`, which would read as a removal in log-target lists.
    #[error("cannot use service name {}: starting with \"-\" not allowed", go_quote(.name))]
    ServiceNameStartsWithDash {
        /// The name.
        name: String,
    },
    /// `name: ~` (or an empty body) in `services`, `checks` or `log-targets`.
    #[error("{kind} object cannot be null for {kind} {}", go_quote(.name))]
    NullObject {
        /// `service`, `check` or `log target`.
        kind: &'static str,
        /// The entry's name.
        name: String,
    },
    /// An entry without `override`, found when its layer is combined.
    #[error("layer {} must define \"override\" for {kind} {}", go_quote(.layer), go_quote(.name))]
    MissingOverride {
        /// The layer's label.
        layer: String,
        /// `service`, `check` or `log target`.
        kind: &'static str,
        /// The entry's name.
        name: String,
    },
    /// An `override` that is neither `merge` nor `replace`.
    #[error("layer {} has invalid \"override\" value for {kind} {}", go_quote(.layer), go_quote(.name))]
    InvalidOverride {
        /// The layer's label.
        layer: String,
        /// `service`, `check` or `log target`.
        kind: &'static str,
        /// The entry's name.
        name: String,
    },
    /// A service command that cannot be split (from [`crate::Service::parse_command`]).
    #[error("cannot parse service {} command: {error}", go_quote(.service))]
    Command {
        /// The service.
        service: String,
        /// What is wrong with the command.
        error: CommandError,
    },
    /// A service command rejected while validating a layer.
    #[error(
        "plan service {} command invalid: cannot parse service {} command: {error}",
        go_quote(.service),
        go_quote(.service)
    )]
    InvalidServiceCommand {
        /// The service.
        service: String,
        /// What is wrong with the command.
        error: CommandError,
    },
    /// An action not allowed in this field (`on-success`, `on-failure`, `on-check-failure`).
    #[error("plan service {} {field} action {} invalid", go_quote(.service), go_quote(.value))]
    InvalidAction {
        /// The service.
        service: String,
        /// The field name.
        field: &'static str,
        /// The rejected value.
        value: String,
    },
    /// A `requires-paths` or `on-file-change` path that is not absolute (cobble extension).
    #[error("plan service {} {field} path {} must be absolute", go_quote(.service), go_quote(.path))]
    RelativePath {
        /// The service.
        service: String,
        /// The field name.
        field: &'static str,
        /// The rejected path.
        path: String,
    },
    /// A `readiness` value other than `notify` (cobble extension).
    #[error(
        "plan service {} readiness {} invalid: must be \"notify\"",
        go_quote(.service),
        go_quote(.value)
    )]
    InvalidReadiness {
        /// The service.
        service: String,
        /// The rejected value.
        value: String,
    },
    /// A `type` value other than `daemon` or `oneshot` (cobble extension).
    #[error(
        "plan service {} type {} invalid: must be \"daemon\" or \"oneshot\"",
        go_quote(.service),
        go_quote(.value)
    )]
    InvalidServiceType {
        /// The service.
        service: String,
        /// The rejected value.
        value: String,
    },
    /// An `rlimits` key that names no resource `prlimit(1)` knows (cobble extension).
    #[error(
        "plan service {} rlimits names unknown resource {}: must be one of {}",
        go_quote(.service),
        go_quote(.name),
        crate::limits::Rlimit::ALL.map(|r| r.name()).join(", ")
    )]
    UnknownRlimit {
        /// The service.
        service: String,
        /// The unknown name.
        name: String,
    },
    /// An `rlimits` value that is not a limit (cobble extension).
    #[error(
        "plan service {} rlimit {} value {} invalid: {reason}",
        go_quote(.service),
        .name,
        go_quote(.value)
    )]
    InvalidRlimit {
        /// The service.
        service: String,
        /// The resource.
        name: crate::limits::Rlimit,
        /// The rejected value.
        value: String,
        /// What the value must be.
        reason: String,
    },
    /// A `resources` value that is not a limit (cobble extension).
    #[error(
        "plan service {} resources {field} value {} invalid: {reason}",
        go_quote(.service),
        go_quote(.value)
    )]
    InvalidResource {
        /// The service.
        service: String,
        /// The field.
        field: &'static str,
        /// The rejected value.
        value: String,
        /// What the value must be.
        reason: String,
    },
    /// A `sockets` name that cannot be passed in `LISTEN_FDNAMES` (cobble extension).
    #[error(
        "plan service {} socket name {} invalid: must be 1 to 255 characters, none of them a colon or a control character",
        go_quote(.service),
        go_quote(.socket)
    )]
    InvalidSocketName {
        /// The service.
        service: String,
        /// The rejected name.
        socket: String,
    },
    /// A field of a held socket that is not what it must be (cobble extension).
    #[error(
        "plan service {} socket {} {field} {} invalid: {reason}",
        go_quote(.service),
        go_quote(.socket),
        go_quote(.value)
    )]
    InvalidSocket {
        /// The service.
        service: String,
        /// The socket's name.
        socket: String,
        /// The field.
        field: &'static str,
        /// The rejected value.
        value: String,
        /// What the value must be.
        reason: String,
    },
    /// Two held sockets of the plan that cannot both be bound (cobble extension).
    #[error(
        "plan service {} socket {} listens on {address}, as service {} socket {} does",
        go_quote(.service),
        go_quote(.socket),
        go_quote(.other_service),
        go_quote(.other_socket)
    )]
    SocketAddressTwice {
        /// The service named second.
        service: String,
        /// Its socket.
        socket: String,
        /// The address.
        address: String,
        /// The service named first.
        other_service: String,
        /// Its socket.
        other_socket: String,
    },
    /// A `watchdog` of zero or less (cobble extension).
    #[error("plan service {} watchdog must be a positive duration, not {}", go_quote(.service), .value)]
    InvalidWatchdog {
        /// The service.
        service: String,
        /// The rejected duration.
        value: GoDuration,
    },
    /// A `watchdog` on a service that does not speak the notify protocol (cobble extension).
    #[error(
        "plan service {} watchdog needs readiness \"notify\": its pings come on the notify socket",
        go_quote(.service)
    )]
    WatchdogWithoutNotify {
        /// The service.
        service: String,
    },
    /// A `schedule` that is not in snapd's timer string format (cobble extension).
    #[error("plan service {} schedule {} invalid: {reason}", go_quote(.service), go_quote(.value))]
    InvalidSchedule {
        /// The service.
        service: String,
        /// The schedule as written.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A one-shot that would say it is ready: it is done when it exits (cobble extension).
    #[error(
        "plan service {} type \"oneshot\" cannot have readiness \"notify\": a one-shot is done when it exits",
        go_quote(.service)
    )]
    OneshotWithNotify {
        /// The service.
        service: String,
    },
    /// A negative `start-grace` (cobble extension).
    #[error("plan service {} start-grace must not be negative, not {}", go_quote(.service), .value)]
    NegativeStartGrace {
        /// The service.
        service: String,
        /// The rejected duration.
        value: GoDuration,
    },
    /// A `requires-checks` entry that names no check of the plan (cobble extension).
    #[error(
        "plan service {} requires-checks names {}, which is not a check of the plan",
        go_quote(.service),
        go_quote(.check)
    )]
    UnknownRequiredCheck {
        /// The service.
        service: String,
        /// The missing check.
        check: String,
    },
    /// An `on-file-change` action that is neither `restart`, `ignore` nor a signal name.
    #[error(
        "plan service {} on-file-change action {} invalid for {}: must be \"restart\", \"ignore\" or a signal name such as \"SIGHUP\"",
        go_quote(.service),
        go_quote(.value),
        go_quote(.path)
    )]
    InvalidFileChangeAction {
        /// The service.
        service: String,
        /// The watched path.
        path: String,
        /// The rejected action.
        value: String,
    },
    /// `backoff-factor` below 1.
    #[error(
        "plan service {} backoff-factor must be 1.0 or greater, not {}",
        go_quote(.service),
        crate::emit::go_float(*.value)
    )]
    BackoffFactorTooSmall {
        /// The service.
        service: String,
        /// The rejected factor.
        value: f64,
    },
    /// A check `level` other than `alive` or `ready`.
    #[error("plan check {} level must be \"alive\" or \"ready\"", go_quote(.check))]
    InvalidCheckLevel {
        /// The check.
        check: String,
    },
    /// A check `startup` other than `enabled` or `disabled`.
    #[error("plan check {} startup must be \"enabled\" or \"disabled\"", go_quote(.check))]
    InvalidCheckStartup {
        /// The check.
        check: String,
    },
    /// `period: 0` or `timeout: 0` on a check.
    #[error("plan check {} {field} must not be zero", go_quote(.check))]
    ZeroCheckDuration {
        /// The check.
        check: String,
        /// `period` or `timeout`.
        field: &'static str,
    },
    /// An exec check command that cannot be split.
    #[error("plan check {} command invalid: {error}", go_quote(.check))]
    InvalidCheckCommand {
        /// The check.
        check: String,
        /// What is wrong with the command.
        error: ShellError,
    },
    /// An exec check whose user and group settings cannot work together.
    #[error("plan check {} has invalid user/group: {reason}", go_quote(.check))]
    InvalidCheckUserGroup {
        /// The check.
        check: String,
        /// Why.
        reason: String,
    },
    /// A log-target label using the reserved `pebble_` prefix.
    #[error(
        "log target {}: label {} uses reserved prefix \"pebble_\"",
        go_quote(.target),
        go_quote(.label)
    )]
    ReservedLogLabel {
        /// The log target.
        target: String,
        /// The label name.
        label: String,
    },
    /// A log-target `type` cobble does not know.
    #[error(
        "log target {} has unsupported type {}, must be \"loki\", \"opentelemetry\" or \"syslog\"",
        go_quote(.target),
        go_quote(.kind)
    )]
    UnsupportedLogTargetType {
        /// The log target.
        target: String,
        /// The rejected type.
        kind: String,
    },
    /// A combined service without `command`.
    #[error("plan must define \"command\" for service {}", go_quote(.service))]
    MissingCommand {
        /// The service.
        service: String,
    },
    /// A combined check whose type section lacks its required field.
    #[error("plan must set \"{field}\" for {kind} check {}", go_quote(.check))]
    MissingCheckField {
        /// The check.
        check: String,
        /// `http`, `tcp` or `exec`.
        kind: &'static str,
        /// `url`, `port` or `command`.
        field: &'static str,
    },
    /// A combined check with none, or more than one, of `http`, `tcp` and `exec`.
    #[error("plan must specify one of \"http\", \"tcp\", or \"exec\" for check {}", go_quote(.check))]
    CheckTypeCount {
        /// The check.
        check: String,
    },
    /// An exec check whose `service-context` names no service in the plan.
    #[error(
        "plan check {} service context specifies non-existent service {}",
        go_quote(.check),
        go_quote(.service)
    )]
    UnknownServiceContext {
        /// The check.
        check: String,
        /// The missing service.
        service: String,
    },
    /// `service-context` of an exec request names no service in the plan.
    #[error("context service {} not found", go_quote(.0))]
    ContextServiceNotFound(String),
    /// A combined log target without `type`.
    #[error(
        "plan must define \"type\" (\"loki\", \"opentelemetry\" or \"syslog\") for log target {}",
        go_quote(.target)
    )]
    MissingLogTargetType {
        /// The log target.
        target: String,
    },
    /// A combined log target without `location`.
    #[error("plan must define \"location\" for log target {}", go_quote(.target))]
    MissingLogTargetLocation {
        /// The log target.
        target: String,
    },
    /// A log target listing a service the plan does not have.
    #[error("log target {} specifies unknown service {}", go_quote(.target), go_quote(.service))]
    UnknownLogTargetService {
        /// The log target.
        target: String,
        /// The missing service.
        service: String,
    },
    /// A service named in a request or in `requires` that the plan does not have.
    #[error("service {} does not exist", go_quote(.name))]
    ServiceNotFound {
        /// The missing service.
        name: String,
    },
    /// Services whose `after`/`before` constraints form a cycle (names sorted).
    #[error("services in before/after loop: {}", .names.join(", "))]
    OrderLoop {
        /// The services in the cycle.
        names: Vec<String>,
    },
    /// `name: ~` under `workloads:`.
    #[error("workload {}: cannot have a null value", go_quote(.name))]
    NullWorkload {
        /// The workload.
        name: String,
    },
    /// A workload named `""`.
    #[error("workload \"\": cannot have an empty name")]
    EmptyWorkloadName,
    /// A workload without `override`, found when its layer is combined.
    #[error("workload {}: must define an \"override\" policy", go_quote(.name))]
    WorkloadWithoutOverride {
        /// The workload.
        name: String,
    },
    /// A workload whose `override` is neither `merge` nor `replace`.
    #[error("workload {}: has an invalid \"override\" policy: {}", go_quote(.name), go_quote(.value))]
    WorkloadInvalidOverride {
        /// The workload.
        name: String,
        /// The rejected value.
        value: String,
    },
    /// A service whose `workload` names no entry of the `workloads:` section.
    #[error("workload {}: not defined for service {}", go_quote(.workload), go_quote(.service))]
    UndefinedWorkload {
        /// The missing workload.
        workload: String,
        /// The service that names it.
        service: String,
    },
    /// A service with both a workload and a user of its own.
    #[error(
        "plan service {} cannot have user information and a workload at the same time",
        go_quote(.service)
    )]
    WorkloadWithUser {
        /// The service.
        service: String,
    },
    /// A service with both a workload and a group of its own.
    #[error(
        "plan service {} cannot have group information and a workload at the same time",
        go_quote(.service)
    )]
    WorkloadWithGroup {
        /// The service.
        service: String,
    },
    /// A workload whose user and group cannot be resolved, or cannot work together.
    #[error("workload {}: {reason}", go_quote(.name))]
    WorkloadUserGroup {
        /// The workload.
        name: String,
        /// Why (`must specify user, not just group`, `user: unknown user bob`, ...).
        reason: String,
    },
    /// A layer that would change a section that is fixed once the daemon has loaded its
    /// layers (`workloads`).
    #[error("cannot change immutable section {}", go_quote(.section))]
    ImmutableSection {
        /// The section.
        section: &'static str,
    },
    /// A `pairing: mode:` other than `disabled`, `single` or `multiple`.
    #[error(
        "invalid pairing mode {}: should be \"disabled\", \"single\" or \"multiple\"",
        go_quote(.mode)
    )]
    InvalidPairingMode {
        /// The rejected mode.
        mode: String,
    },
    /// `pebble run --args` naming a service the plan does not have.
    #[error("service {} not found in plan", go_quote(.name))]
    ServiceArgsUnknownService {
        /// The missing service.
        name: String,
    },
    /// Adding a layer whose label is taken, without `combine`.
    #[error("layer {} already exists", go_quote(.label))]
    LayerExists {
        /// The label.
        label: String,
    },
    /// Adding a sub-directory layer that would land before later layers, without `inner`.
    #[error("cannot insert sub-directory layer without 'inner' attribute set")]
    InnerRequired,
    /// A file in the layers directory with a bad name.
    #[error("invalid layer filename: {} (must look like \"123-some-label.yaml\")", go_quote(.name))]
    InvalidLayerFileName {
        /// The file name.
        name: String,
    },
    /// A directory in the layers directory with a bad name.
    #[error(
        "invalid layer sub-directory name: {} (must look like \"123-some-label.d\")",
        go_quote(.name)
    )]
    InvalidLayerDirName {
        /// The directory name.
        name: String,
    },
    /// A directory inside a layer sub-directory.
    #[error("cannot have a layers sub-directory at this level")]
    NestedLayerDir,
    /// Two entries of one directory level sharing an order or a label.
    #[error(
        "invalid layer filename: {} not unique (have \"{order:03}-{label}.yaml\" already)",
        go_quote(.name)
    )]
    DuplicateLayerFile {
        /// The later entry's name.
        name: String,
        /// The order of the entry already seen.
        order: u64,
        /// The label of the entry already seen.
        label: String,
    },
    /// Reading the layers directory or a layer file failed.
    #[error("{context}: {message}")]
    Io {
        /// `cannot read layers directory` or `cannot read layer file`.
        context: &'static str,
        /// The OS error, with the path.
        message: String,
    },
}

fn section_part(section: &Option<String>) -> String {
    match section {
        Some(section) => format!(" section {}", go_quote(section)),
        None => String::new(),
    }
}

fn line_part(line: &Option<u64>) -> String {
    match line {
        Some(line) => format!("line {line}: "),
        None => String::new(),
    }
}
