//! The plan as YAML, laid out like Go's yaml.v3 prints Pebble's plan.
//!
//! The schema is small and fixed, so this is a hand-written emitter rather than a generic
//! serializer: that gives exact control over what Pebble's output depends on — 4-space
//! indentation, sequences indented under their key, struct fields in Go declaration order,
//! map keys sorted, unset fields omitted, Go-formatted durations and floats, and yaml.v3's
//! choice of scalar style (plain when that reads back as the same string, double quotes for
//! strings that would read back as another type, single quotes otherwise, literal blocks for
//! multi-line text).

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::duration::GoDuration;
use crate::{Check, Layer, LogTarget, Plan, Service, Workload};

impl Plan {
    /// The combined plan as YAML, as `GET /v1/plan?format=yaml` returns it.
    ///
    /// Backoff and check period/timeout defaults are not printed (they were never set); a
    /// check's threshold always is. The extension sections come after the built-in ones, in
    /// the order Pebble registers them (`workloads`, then `pairing`). An empty plan is `{}`.
    pub fn to_yaml(&self) -> String {
        let mut out = Emitter::default();
        out.sections(
            Sections {
                services: &self.services,
                checks: &self.checks,
                log_targets: &self.log_targets,
                workloads: &self.workloads,
                pairing: self.pairing.as_str(),
            },
            Threshold::Effective,
        );
        out.document()
    }
}

impl Layer {
    /// The layer as a document that [`Layer::parse`] reads back as this very layer (given
    /// its order and label again): what it set, and nothing it left unset. This is how a
    /// daemon's plan, layers added through the API included, reaches the program a
    /// re-execution starts.
    pub fn to_yaml(&self) -> String {
        let mut out = Emitter::default();
        out.string(0, "summary", &self.summary);
        out.string(0, "description", &self.description);
        out.sections(
            Sections {
                services: &self.services,
                checks: &self.checks,
                log_targets: &self.log_targets,
                workloads: &self.workloads,
                pairing: self.pairing.as_str(),
            },
            Threshold::AsSet,
        );
        out.document()
    }
}

impl Check {
    /// This check alone, as a layer document that [`Check::from_layer_yaml`] reads back as
    /// this very check. A re-execution hands over this way the configuration a running check
    /// runs when the plan has moved on from it (a layer that disabled the check while it ran
    /// leaves it running as it was, as Pebble does).
    pub fn to_layer_yaml(&self) -> String {
        Layer {
            checks: BTreeMap::from([(self.name.clone(), self.clone())]),
            ..Layer::default()
        }
        .to_yaml()
    }

    /// The one check of a document [`Check::to_layer_yaml`] wrote.
    pub fn from_layer_yaml(yaml: &str) -> Result<Check, String> {
        only_one(Layer::parse(0, "check", yaml).map(|l| l.checks), "check")
    }
}

impl Service {
    /// This service alone, as a layer document that [`Service::from_layer_yaml`] reads back
    /// as this very service. A re-execution hands over this way the configuration a service
    /// last ran when the plan has changed it since, so that a replan still sees the change.
    pub fn to_layer_yaml(&self) -> String {
        Layer {
            services: BTreeMap::from([(self.name.clone(), self.clone())]),
            ..Layer::default()
        }
        .to_yaml()
    }

    /// The one service of a document [`Service::to_layer_yaml`] wrote.
    pub fn from_layer_yaml(yaml: &str) -> Result<Service, String> {
        only_one(
            Layer::parse(0, "service", yaml).map(|l| l.services),
            "service",
        )
    }
}

/// The one entry of a section of a parsed layer.
fn only_one<T>(
    section: Result<BTreeMap<String, T>, crate::PlanError>,
    what: &str,
) -> Result<T, String> {
    let mut section = section.map_err(|e| e.to_string())?;
    match (section.pop_first(), section.is_empty()) {
        (Some((_, entry)), true) => Ok(entry),
        _ => Err(format!("the document does not hold exactly one {what}")),
    }
}

/// The sections a plan and a layer have alike.
struct Sections<'a> {
    services: &'a BTreeMap<String, Service>,
    checks: &'a BTreeMap<String, Check>,
    log_targets: &'a BTreeMap<String, LogTarget>,
    workloads: &'a BTreeMap<String, Workload>,
    pairing: &'a str,
}

/// How a check's threshold is printed.
#[derive(Clone, Copy)]
enum Threshold {
    /// Always, the default filling an unset one in: the combined plan, as Pebble prints it.
    Effective,
    /// Only when set: a layer, whose unset threshold leaves an earlier layer's in place.
    AsSet,
}

/// Every field is named, and every name must be used: a field added to [`Service`] does not
/// compile until it is printed here.
#[deny(unused_variables)]
fn emit_service(out: &mut Emitter, depth: usize, s: &Service) {
    // The name is the entry's key, printed by the caller.
    let Service {
        name: _,
        summary,
        description,
        startup,
        override_,
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
    } = s;
    let start = out.text.len();
    out.string(depth, "summary", summary);
    out.string(depth, "description", description);
    out.string(depth, "startup", startup.as_str());
    out.string(depth, "override", override_.as_str());
    out.string(depth, "command", command);
    out.list(depth, "after", after, false);
    out.list(depth, "before", before, false);
    out.list(depth, "requires", requires, false);
    out.string(depth, "workload", workload);
    out.map(depth, "environment", environment, |v| v.as_str());
    out.int(depth, "user-id", *user_id);
    out.string(depth, "user", user);
    out.int(depth, "group-id", *group_id);
    out.string(depth, "group", group);
    out.string(depth, "working-dir", working_dir);
    out.string(depth, "on-success", on_success.as_str());
    out.string(depth, "on-failure", on_failure.as_str());
    out.map(depth, "on-check-failure", on_check_failure, |a| a.as_str());
    out.duration(depth, "backoff-delay", *backoff_delay);
    if let Some(factor) = *backoff_factor {
        out.raw(depth, "backoff-factor", &go_float(factor));
    }
    out.duration(depth, "backoff-limit", *backoff_limit);
    out.duration(depth, "kill-delay", *kill_delay);
    // cobble extensions come last, after every field Pebble knows.
    out.list(depth, "requires-paths", requires_paths, false);
    out.map(depth, "on-file-change", on_file_change, |a| a.as_str());
    if let Some(persist) = *persist_logs {
        out.raw(
            depth,
            "persist-logs",
            if persist { "true" } else { "false" },
        );
    }
    out.list(depth, "requires-checks", requires_checks, false);
    out.duration(depth, "start-grace", *start_grace);
    out.string(depth, "type", type_.as_str());
    out.string(depth, "readiness", readiness.as_str());
    if !rlimits.is_empty() {
        out.key(depth, "rlimits");
        for (resource, value) in rlimits {
            out.string(depth + 1, resource.name(), &value.to_string());
        }
    }
    if !resources.is_empty() {
        out.key(depth, "resources");
        for (field, value) in resources.fields() {
            out.string(depth + 1, field, &value);
        }
    }
    if !sockets.is_empty() {
        out.key(depth, "sockets");
        for (name, socket) in sockets {
            out.key(depth + 1, name);
            let start = out.text.len();
            out.string(depth + 2, "listen", &socket.listen);
            out.int(depth + 2, "backlog", socket.backlog);
            out.string(depth + 2, "mode", &socket.mode);
            out.string(depth + 2, "user", &socket.user);
            out.string(depth + 2, "group", &socket.group);
            out.close_if_empty(start);
        }
    }
    out.duration(depth, "watchdog", *watchdog);
    out.string(depth, "schedule", schedule);
    out.close_if_empty(start);
}

/// Every field is named, and every name must be used: a field added to [`Check`] does not
/// compile until it is printed here.
#[deny(unused_variables)]
fn emit_check(out: &mut Emitter, depth: usize, c: &Check, threshold: Threshold) {
    let Check {
        name: _,
        override_,
        level,
        startup,
        period,
        timeout,
        threshold: _,
        http,
        tcp,
        exec,
    } = c;
    out.string(depth, "override", override_.as_str());
    out.string(depth, "level", level.as_str());
    out.string(depth, "startup", startup.as_str());
    out.duration(depth, "period", *period);
    out.duration(depth, "timeout", *timeout);
    match threshold {
        Threshold::Effective => out.raw(depth, "threshold", &c.threshold().to_string()),
        Threshold::AsSet => out.int(depth, "threshold", Some(c.threshold).filter(|t| *t != 0)),
    }
    if let Some(http) = http {
        out.key(depth, "http");
        let start = out.text.len();
        out.string(depth + 1, "url", &http.url);
        out.map(depth + 1, "headers", &http.headers, |v| v.as_str());
        out.close_if_empty(start);
    }
    if let Some(tcp) = tcp {
        out.key(depth, "tcp");
        let start = out.text.len();
        out.int(depth + 1, "port", Some(tcp.port).filter(|p| *p != 0));
        out.string(depth + 1, "host", &tcp.host);
        out.close_if_empty(start);
    }
    if let Some(exec) = exec {
        out.key(depth, "exec");
        let start = out.text.len();
        out.string(depth + 1, "command", &exec.command);
        out.string(depth + 1, "service-context", &exec.service_context);
        out.map(depth + 1, "environment", &exec.environment, |v| v.as_str());
        out.int(depth + 1, "user-id", exec.user_id);
        out.string(depth + 1, "user", &exec.user);
        out.int(depth + 1, "group-id", exec.group_id);
        out.string(depth + 1, "group", &exec.group);
        out.string(depth + 1, "working-dir", &exec.working_dir);
        out.close_if_empty(start);
    }
}

fn emit_workload(out: &mut Emitter, depth: usize, w: &Workload) {
    let start = out.text.len();
    out.string(depth, "override", &w.override_);
    out.map(depth, "environment", &w.environment, |v| v.as_str());
    out.int(depth, "user-id", w.user_id);
    out.string(depth, "user", &w.user);
    out.int(depth, "group-id", w.group_id);
    out.string(depth, "group", &w.group);
    out.close_if_empty(start);
}

/// Every field is named, and every name must be used: a field added to [`LogTarget`] does
/// not compile until it is printed here.
#[deny(unused_variables)]
fn emit_log_target(out: &mut Emitter, depth: usize, t: &LogTarget) {
    let LogTarget {
        name: _,
        override_,
        type_,
        location,
        services,
        labels,
    } = t;
    // `type`, `location` and `services` have no omitempty in Pebble: always printed.
    out.raw(depth, "type", &scalar(type_));
    out.raw(depth, "location", &scalar(location));
    out.list(depth, "services", services, true);
    out.string(depth, "override", override_.as_str());
    out.map(depth, "labels", labels, |v| v.as_str());
}

#[derive(Default)]
struct Emitter {
    text: String,
}

impl Emitter {
    /// What was written, as a document: an empty one is `{}`.
    fn document(self) -> String {
        if self.text.is_empty() {
            "{}\n".to_owned()
        } else {
            self.text
        }
    }

    fn sections(&mut self, s: Sections<'_>, threshold: Threshold) {
        if !s.services.is_empty() {
            self.key(0, "services");
            for (name, service) in s.services {
                self.key(1, name);
                emit_service(self, 2, service);
            }
        }
        if !s.checks.is_empty() {
            self.key(0, "checks");
            for (name, check) in s.checks {
                self.key(1, name);
                emit_check(self, 2, check, threshold);
            }
        }
        if !s.log_targets.is_empty() {
            self.key(0, "log-targets");
            for (name, target) in s.log_targets {
                self.key(1, name);
                emit_log_target(self, 2, target);
            }
        }
        if !s.workloads.is_empty() {
            self.key(0, "workloads");
            for (name, workload) in s.workloads {
                self.key(1, name);
                emit_workload(self, 2, workload);
            }
        }
        if !s.pairing.is_empty() {
            self.key(0, "pairing");
            self.string(1, "mode", s.pairing);
        }
    }

    fn indent(&mut self, depth: usize) {
        for _ in 0..depth {
            self.text.push_str("    ");
        }
    }

    /// `key:` opening a nested block.
    fn key(&mut self, depth: usize, key: &str) {
        self.indent(depth);
        self.text.push_str(&key_scalar(key));
        self.text.push_str(":\n");
    }

    /// `key: value` with `value` already rendered.
    fn raw(&mut self, depth: usize, key: &str, value: &str) {
        self.indent(depth);
        self.text.push_str(&key_scalar(key));
        if value.starts_with('|') {
            // Literal blocks carry their own line break and deeper indentation.
            self.text.push_str(": ");
            self.text.push_str(&indent_block(value, depth + 1));
            return;
        }
        self.text.push_str(": ");
        self.text.push_str(value);
        self.text.push('\n');
    }

    /// A string field, omitted when empty (Go's `omitempty`).
    fn string(&mut self, depth: usize, key: &str, value: &str) {
        if !value.is_empty() {
            self.raw(depth, key, &scalar(value));
        }
    }

    fn int(&mut self, depth: usize, key: &str, value: Option<u32>) {
        if let Some(value) = value {
            self.raw(depth, key, &value.to_string());
        }
    }

    fn duration(&mut self, depth: usize, key: &str, value: Option<GoDuration>) {
        if let Some(value) = value {
            self.raw(depth, key, &scalar(&value.to_string()));
        }
    }

    /// A list, omitted when empty unless `always` (then `[]`).
    fn list(&mut self, depth: usize, key: &str, items: &[String], always: bool) {
        if items.is_empty() {
            if always {
                self.raw(depth, key, "[]");
            }
            return;
        }
        self.key(depth, key);
        for item in items {
            self.indent(depth + 1);
            self.text.push_str("- ");
            let rendered = scalar(item);
            if rendered.starts_with('|') {
                self.text.push_str(&indent_block(&rendered, depth + 2));
            } else {
                self.text.push_str(&rendered);
                self.text.push('\n');
            }
        }
    }

    /// A map with sorted keys, omitted when empty.
    fn map<V>(
        &mut self,
        depth: usize,
        key: &str,
        map: &BTreeMap<String, V>,
        text: impl Fn(&V) -> &str,
    ) {
        if map.is_empty() {
            return;
        }
        self.key(depth, key);
        for (k, v) in map {
            self.raw(depth + 1, k, &scalar(text(v)));
        }
    }

    /// Turns a `key:\n` with nothing under it into `key: {}\n` (a present but empty struct).
    fn close_if_empty(&mut self, start: usize) {
        if self.text.len() == start && self.text.ends_with(":\n") {
            self.text.truncate(self.text.len() - 1);
            self.text.push_str(" {}\n");
        }
    }
}

/// Re-indents a rendered literal block (`|`-header then lines) at `depth`.
fn indent_block(block: &str, depth: usize) -> String {
    let mut lines = block.split('\n');
    let mut out = String::new();
    out.push_str(lines.next().unwrap_or("|"));
    out.push('\n');
    let body: Vec<&str> = lines.collect();
    // The rendered block ends with '\n', leaving one empty trailing piece.
    let body = body.split_last().map_or(&body[..], |(_, rest)| rest);
    for line in body {
        if !line.is_empty() {
            out.push_str(&"    ".repeat(depth));
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// Renders a string scalar in the style yaml.v3 would pick: plain, quoted, or a literal
/// block (`|` or `|-`, then one line per line of text, unindented).
pub fn scalar(s: &str) -> String {
    if reads_as_other_type(s) {
        return double_quoted(s);
    }
    if s.contains('\n') {
        return literal_block(s).unwrap_or_else(|| double_quoted(s));
    }
    if s.chars().any(needs_escape) {
        return double_quoted(s);
    }
    if plain_allowed(s) {
        return s.to_owned();
    }
    format!("'{}'", s.replace('\'', "''"))
}

/// A mapping key: like [`scalar`], but block styles cannot be keys.
fn key_scalar(s: &str) -> String {
    if s.contains('\n') {
        return double_quoted(s);
    }
    scalar(s)
}

/// Characters that only a double-quoted scalar can carry.
fn needs_escape(c: char) -> bool {
    (c.is_control() && c != '\t') || c == '\u{feff}' || c == '\u{2028}' || c == '\u{2029}'
}

/// Whether yaml.v3 would write this string quoted because, plain, it would be read back as
/// something else: null, a bool (YAML 1.1's `yes` and `on` too), a number (YAML 1.1's
/// sexagesimal `1:30` too), a timestamp or a merge key. So `"8080"` and `"2001-12-14"` are
/// quoted and `127.0.0.1` or `1s` are not, as in Pebble's plan.
fn reads_as_other_type(s: &str) -> bool {
    // YAML 1.1's bools, which yaml.v3 reads as such into a bool and so quotes.
    const OLD_BOOLS: &[&str] = &[
        "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off", "Off",
        "OFF",
    ];
    resolve(s) != "!!str" || OLD_BOOLS.contains(&s) || base60_float(s)
}

/// The tag yaml.v3 resolves a plain scalar to: `!!null`, `!!bool`, `!!int`, `!!float`,
/// `!!timestamp`, `!!merge` or `!!str`. YAML 1.1's `yes` and `on` are strings here; yaml.v3
/// reads them as bools only into a bool.
pub(crate) fn resolve(s: &str) -> &'static str {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return "!!null",
        "true" | "True" | "TRUE" | "false" | "False" | "FALSE" => return "!!bool",
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" | "-.inf" | "-.Inf" | "-.INF"
        | ".nan" | ".NaN" | ".NAN" => return "!!float",
        "<<" => return "!!merge",
        _ => {}
    }
    if !matches!(s.as_bytes().first(), Some(b'0'..=b'9' | b'+' | b'-' | b'.')) {
        return "!!str";
    }
    let number = s.replace('_', "");
    if looks_like_timestamp(s) {
        "!!timestamp"
    } else if go_int(&number) {
        "!!int"
    } else if yaml_float(&number) && number.parse::<f64>().is_ok_and(f64::is_finite) {
        "!!float"
    } else {
        "!!str"
    }
}

/// A timestamp in one of yaml.v3's layouts: `2006-1-2`, then optionally `T15:4:5` (or `t`)
/// with a fraction and a zone (`Z`, `+07:00`), or ` 15:4:5` with a fraction.
fn looks_like_timestamp(s: &str) -> bool {
    /// Takes 1 or 2 digits (exactly `len` when given) at the front, as a number.
    fn number(s: &mut &[u8], min: usize, max: usize) -> Option<u32> {
        let n = s
            .iter()
            .take(max)
            .take_while(|b| b.is_ascii_digit())
            .count();
        if n < min {
            return None;
        }
        let value = s[..n].iter().fold(0, |v, b| v * 10 + u32::from(b - b'0'));
        *s = &s[n..];
        Some(value)
    }
    fn byte(s: &mut &[u8], want: &[u8]) -> Option<u8> {
        let (&first, rest) = s.split_first()?;
        want.contains(&first).then(|| {
            *s = rest;
            first
        })
    }
    fn parse(mut s: &[u8]) -> Option<()> {
        let s = &mut s;
        let year = number(s, 4, 4)?;
        byte(s, b"-")?;
        let month = number(s, 1, 2)?;
        byte(s, b"-")?;
        let day = number(s, 1, 2)?;
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
        let days = match month {
            1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
            4 | 6 | 9 | 11 => 30,
            2 if leap => 29,
            2 => 28,
            _ => return None,
        };
        if !(1..=days).contains(&day) {
            return None;
        }
        if s.is_empty() {
            return Some(());
        }
        let separator = byte(s, b"Tt ")?;
        let hour = number(s, 1, 2)?;
        byte(s, b":")?;
        let minute = number(s, 1, 2)?;
        byte(s, b":")?;
        let second = number(s, 1, 2)?;
        if hour > 23 || minute > 59 || second > 59 {
            return None;
        }
        if byte(s, b".").is_some() {
            let n = s.iter().take_while(|b| b.is_ascii_digit()).count();
            if n == 0 || n > 9 {
                return None;
            }
            *s = &s[n..];
        }
        if separator != b' ' && byte(s, b"Z").is_none() {
            byte(s, b"+-")?;
            let hours = number(s, 2, 2)?;
            byte(s, b":")?;
            let minutes = number(s, 2, 2)?;
            if hours > 23 || minutes > 59 {
                return None;
            }
        }
        s.is_empty().then_some(())
    }
    parse(s.as_bytes()).is_some()
}

/// Go's `strconv.ParseInt(s, 0, 64)` or `ParseUint(s, 0, 64)` succeeds: an optional sign
/// (ParseInt only), then decimal, `0x`, `0o`, `0b` or a leading-zero octal.
fn go_int(s: &str) -> bool {
    let (negative, signed, body) = match s.as_bytes().first() {
        Some(b'-') => (true, true, &s[1..]),
        Some(b'+') => (false, true, &s[1..]),
        _ => (false, false, s),
    };
    let (radix, digits) = if let Some(d) = body.strip_prefix("0x").or(body.strip_prefix("0X")) {
        (16, d)
    } else if let Some(d) = body.strip_prefix("0o").or(body.strip_prefix("0O")) {
        (8, d)
    } else if let Some(d) = body.strip_prefix("0b").or(body.strip_prefix("0B")) {
        (2, d)
    } else if body.len() > 1 && body.starts_with('0') {
        (8, &body[1..])
    } else {
        (10, body)
    };
    if digits.is_empty() || digits.starts_with(['+', '-']) {
        return false;
    }
    match u64::from_str_radix(digits, radix) {
        Ok(value) if negative => value <= 1 << 63,
        Ok(value) if signed => value <= i64::MAX as u64,
        Ok(_) => true,
        Err(_) => false,
    }
}

/// yaml.v3's float pattern, `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn yaml_float(s: &str) -> bool {
    let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let rest = if let Some(fraction) = s.strip_prefix('.') {
        let n = digits(fraction);
        if n == 0 {
            return false;
        }
        &fraction[n..]
    } else {
        let n = digits(s);
        if n == 0 {
            return false;
        }
        match s[n..].strip_prefix('.') {
            Some(fraction) => &fraction[digits(fraction)..],
            None => &s[n..],
        }
    };
    match rest.strip_prefix(['e', 'E']) {
        None => rest.is_empty(),
        Some(exponent) => {
            let exponent = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            !exponent.is_empty() && digits(exponent) == exponent.len()
        }
    }
}

/// YAML 1.1's sexagesimal float, which yaml.v3 quotes:
/// `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`.
fn base60_float(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (whole, fraction) = match s.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (s, None),
    };
    if fraction.is_some_and(|f| !f.bytes().all(|b| b.is_ascii_digit() || b == b'_')) {
        return false;
    }
    let mut parts = whole.split(':');
    let head = parts.next().unwrap_or("");
    let head_ok = head.as_bytes().first().is_some_and(u8::is_ascii_digit)
        && head.bytes().all(|b| b.is_ascii_digit() || b == b'_');
    let mut sixties = 0;
    for part in parts {
        let ok = matches!(part.as_bytes(), [b'0'..=b'9'] | [b'0'..=b'5', b'0'..=b'9']);
        if !ok {
            return false;
        }
        sixties += 1;
    }
    head_ok && sixties > 0
}

/// yaml.v3's rules for when a single-line string can be written without quotes.
fn plain_allowed(s: &str) -> bool {
    let first = s.chars().next().expect("non-empty");
    let second = s.chars().nth(1);
    let blank_or_end = |c: Option<char>| matches!(c, None | Some(' ' | '\t'));
    if s.starts_with(' ') || s.ends_with(' ') || s.starts_with('\t') || s.ends_with('\t') {
        return false;
    }
    if s.starts_with("---") || s.starts_with("...") {
        return false;
    }
    if "#,[]{}&*!|>'\"%@`".contains(first) {
        return false;
    }
    if matches!(first, '-' | '?' | ':') && blank_or_end(second) {
        return false;
    }
    let chars: Vec<char> = s.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let next = chars.get(i + 1).copied();
        if c == ':' && blank_or_end(next) {
            return false;
        }
        if c == '#' && i > 0 && matches!(chars[i - 1], ' ' | '\t') {
            return false;
        }
    }
    true
}

fn literal_block(s: &str) -> Option<String> {
    if s.starts_with([' ', '\t', '\n'])
        || s.ends_with("\n\n")
        || s.chars().any(needs_escape_in_block)
    {
        return None;
    }
    let header = if s.ends_with('\n') { "|" } else { "|-" };
    let body = s.strip_suffix('\n').unwrap_or(s);
    let mut out = String::from(header);
    out.push('\n');
    for line in body.split('\n') {
        out.push_str(line);
        out.push('\n');
    }
    Some(out)
}

fn needs_escape_in_block(c: char) -> bool {
    c != '\n' && needs_escape(c)
}

fn double_quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\0' => out.push_str("\\0"),
            c if needs_escape(c) => {
                let code = c as u32;
                if code <= 0xff {
                    let _ = write!(out, "\\x{code:02X}");
                } else if code <= 0xffff {
                    let _ = write!(out, "\\u{code:04X}");
                } else {
                    let _ = write!(out, "\\U{code:08X}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `strconv.FormatFloat(v, 'g', -1, 64)`: shortest digits, exponent form below 1e-4 or
/// from 1e6 (yaml.v3 and `%g` in error messages both use it).
pub(crate) fn go_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if v == 0.0 {
        return if v.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let sci = format!("{v:e}");
    let (mantissa, exponent) = sci.split_once('e').expect("exponent form");
    let exponent: i32 = exponent.parse().expect("exponent");
    if !(-4..6).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exponent.abs());
    }
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_styles() {
        let cases = [
            ("cmd", "cmd"),
            ("cmd arg1 \"arg2 arg3\"", "cmd arg1 \"arg2 arg3\""),
            (
                "/bin/sh -c \"echo hi: there\"",
                "'/bin/sh -c \"echo hi: there\"'",
            ),
            ("8080", "\"8080\""),
            ("true", "\"true\""),
            ("yes", "\"yes\""),
            ("", "\"\""),
            ("~", "\"~\""),
            ("1.5", "\"1.5\""),
            ("0x1F", "\"0x1F\""),
            ("2001-12-14", "\"2001-12-14\""),
            ("127.0.0.1", "127.0.0.1"),
            ("1.2.3", "1.2.3"),
            ("0o17", "\"0o17\""),
            ("0b101", "\"0b101\""),
            ("0xZZ", "0xZZ"),
            ("1_000", "\"1_000\""),
            ("1e3", "\"1e3\""),
            ("1e", "1e"),
            (".5", "\".5\""),
            ("5.", "\"5.\""),
            ("-1", "\"-1\""),
            ("+1", "\"+1\""),
            ("08", "\"08\""),
            ("1:30", "\"1:30\""),
            ("1:60", "1:60"),
            ("12:30:45.5", "\"12:30:45.5\""),
            ("10.1.77.196:3100", "10.1.77.196:3100"),
            ("1.0.0-beta", "1.0.0-beta"),
            ("2001-99-99", "2001-99-99"),
            ("2001-2-29", "2001-2-29"),
            ("2000-2-29", "\"2000-2-29\""),
            (
                "2001-12-14T21:59:43.10-05:00",
                "\"2001-12-14T21:59:43.10-05:00\"",
            ),
            ("2001-12-14t21:59:43Z", "\"2001-12-14t21:59:43Z\""),
            ("2001-12-14T21:59:43", "2001-12-14T21:59:43"),
            ("2001-12-14 21:59:43.10", "\"2001-12-14 21:59:43.10\""),
            ("1e400", "1e400"),
            ("-0", "\"-0\""),
            ("+0x10", "\"+0x10\""),
            ("_1", "_1"),
            ("1__0", "\"1__0\""),
            ("500ms", "500ms"),
            ("1m0s", "1m0s"),
            ("-2m0s", "-2m0s"),
            ("-svc1", "-svc1"),
            ("- x", "'- x'"),
            ("#x", "'#x'"),
            ("a #b", "'a #b'"),
            ("a#b", "a#b"),
            (" lead", "' lead'"),
            ("it's", "it's"),
            ("'q'", "'''q'''"),
            (
                "http://10.1.77.196:3100/loki/api/v1/push",
                "http://10.1.77.196:3100/loki/api/v1/push",
            ),
            ("a\u{1}b", "\"a\\x01b\""),
            ("line1\nline2\n", "|\nline1\nline2\n"),
            ("line1\nline2", "|-\nline1\nline2\n"),
            (" x\ny", "\" x\\ny\""),
        ];
        for (input, want) in cases {
            assert_eq!(scalar(input), want, "input {input:?}");
        }
    }

    #[test]
    fn floats_like_go() {
        let cases = [
            (2.0, "2"),
            (1.5, "1.5"),
            (0.5, "0.5"),
            (0.0, "0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (123456.0, "123456"),
            (1234567.0, "1.234567e+06"),
            (1e20, "1e+20"),
            (1e21, "1e+21"),
            (-3.25, "-3.25"),
        ];
        for (input, want) in cases {
            assert_eq!(go_float(input), want, "input {input}");
        }
    }
}
