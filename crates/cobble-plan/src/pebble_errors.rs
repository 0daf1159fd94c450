//! A layer Pebble cannot read, refused in Pebble's words.
//!
//! Pebble reads a layer with Go's yaml.v3 in two steps, and its errors show both: the whole
//! document into a map of sections (a syntax error reads `cannot parse layer "x": yaml: line
//! 1: did not find expected ',' or ']'`), then each section, written out again and decoded
//! with unknown fields refused (`cannot parse layer "x" section "services": yaml: unmarshal
//! errors:` and one line per type error, numbered within the rewritten section). A field
//! with its own reader (a duration, the backoff factor) stops the decode with its message
//! alone (`invalid duration "5x"`).
//!
//! cobble reads layers with its own types, which are stricter in places (unsigned ids) and
//! accept more (cobble's own fields). So this module is consulted only when that read
//! failed: it walks the document against Pebble's Go types, as yaml.v3 would, and words the
//! first failure Pebble would have met. When it finds none, cobble's own message stands.

use std::collections::HashMap;

// The event parser serde-saphyr reads with, as it exports it (a dependency of our own would
// be built apart, with other symbol names, and cost the release layout).
use serde_saphyr::granit_parser::{self, ErrorKind, Event, Parser, ScalarStyle, ScanError};

use crate::duration::parse_duration;
use crate::error::PlanError;

/// A YAML node as yaml.v3 sees it: its line and, for a scalar, its text and resolved tag.
#[derive(Debug, Clone)]
struct Node {
    line: usize,
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    Scalar { value: String, tag: String },
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl Node {
    /// yaml.v3's short tag: `!!str`, `!!int`, `!!seq`, `!!map` and so on.
    fn tag(&self) -> &str {
        match &self.kind {
            Kind::Scalar { tag, .. } => tag,
            Kind::Seq(_) => "!!seq",
            Kind::Map(_) => "!!map",
        }
    }

    fn is_null(&self) -> bool {
        self.tag() == "!!null"
    }
}

/// A collection being read.
enum Open {
    Seq(usize, usize, Vec<Node>),
    Map(usize, usize, Vec<(Node, Node)>, Option<Node>),
}

/// A flow collection left open: where it starts, and how it is read.
#[derive(Debug, Clone, Copy)]
struct OpenFlow {
    line: usize,
    /// `[` rather than `{`.
    sequence: bool,
    /// Where a block mapping expects a key, as `[a` at the start of a line does.
    as_key: bool,
}

/// Reads the first document of `text` into a tree (`None` when it is empty), or fails with
/// the parser's error and the innermost flow collection left open.
fn read(text: &str) -> Result<Option<Node>, (ScanError, Option<OpenFlow>)> {
    let mut stack: Vec<Open> = Vec::new();
    let mut anchors: HashMap<usize, Node> = HashMap::new();
    let mut flows: Vec<OpenFlow> = Vec::new();
    let mut root = None;
    for next in Parser::new_from_str(text) {
        let (event, span) = next.map_err(|e| {
            // The scanner may refuse a bracket before the parser reads it as a collection.
            let unread = match e.kind() {
                ErrorKind::UnclosedFlowCollection { open } => Some(OpenFlow {
                    line: e.marker().line(),
                    sequence: *open == '[',
                    as_key: expects_key(&stack),
                }),
                _ => None,
            };
            let open = flows.last().copied().or(unread);
            (e, open)
        })?;
        let line = span.start.line();
        let node = match event {
            Event::Scalar(value, style, anchor, tag) => {
                let tag = match tag {
                    Some(tag) if tag.is_yaml_core_schema() => format!("!!{}", tag.suffix()),
                    Some(tag) => format!("{}{}", tag.handle(), tag.suffix()),
                    None if style == ScalarStyle::Plain => crate::emit::resolve(&value).to_owned(),
                    None => "!!str".to_owned(),
                };
                let node = Node {
                    line,
                    kind: Kind::Scalar {
                        value: value.into_owned(),
                        tag,
                    },
                };
                if anchor != 0 {
                    anchors.insert(anchor, node.clone());
                }
                node
            }
            Event::Alias(anchor) => match anchors.get(&anchor) {
                Some(node) => node.clone(),
                None => continue,
            },
            Event::SequenceStart(style, anchor, _) => {
                if style == granit_parser::StructureStyle::Flow {
                    flows.push(OpenFlow {
                        line,
                        sequence: true,
                        as_key: expects_key(&stack),
                    });
                }
                stack.push(Open::Seq(line, anchor, Vec::new()));
                continue;
            }
            Event::MappingStart(style, anchor, _) => {
                if style == granit_parser::StructureStyle::Flow {
                    flows.push(OpenFlow {
                        line,
                        sequence: false,
                        as_key: expects_key(&stack),
                    });
                }
                stack.push(Open::Map(line, anchor, Vec::new(), None));
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let (node, anchor, flow) = match stack.pop() {
                    Some(Open::Seq(line, anchor, items)) => (
                        Node {
                            line,
                            kind: Kind::Seq(items),
                        },
                        anchor,
                        flows.last().is_some_and(|f| f.line == line),
                    ),
                    Some(Open::Map(line, anchor, pairs, _)) => (
                        Node {
                            line,
                            kind: Kind::Map(pairs),
                        },
                        anchor,
                        flows.last().is_some_and(|f| f.line == line),
                    ),
                    None => continue,
                };
                if flow {
                    flows.pop();
                }
                if anchor != 0 {
                    anchors.insert(anchor, node.clone());
                }
                node
            }
            Event::DocumentEnd if stack.is_empty() => break,
            _ => continue,
        };
        match stack.last_mut() {
            Some(Open::Seq(_, _, items)) => items.push(node),
            Some(Open::Map(_, _, pairs, key)) => match key.take() {
                Some(k) => pairs.push((k, node)),
                None => *key = Some(node),
            },
            None => root = Some(node),
        }
    }
    Ok(root)
}

/// Whether the innermost collection being read is a mapping waiting for its next key.
fn expects_key(stack: &[Open]) -> bool {
    matches!(stack.last(), Some(Open::Map(_, _, _, None)))
}

/// yaml.v3's words for a syntax error, with its rule for the line: the context's (the
/// collection being parsed) for parser errors, the position's for scanner errors, and none
/// on the first line.
fn syntax_message(text: &str, error: &ScanError, open_flow: Option<OpenFlow>) -> String {
    // yaml.v3 counts lines from 0 and shows none for line 0. A parser error shows the
    // line its context (the open collection) starts on, else the problem's; a scanner error
    // shows the problem's plus one.
    let at = error.marker().line() - 1;
    // The end of the stream is on a line of its own unless the text ends with a newline.
    let end = text.matches('\n').count() + usize::from(!text.is_empty() && !text.ends_with('\n'));
    let context = |open_flow: Option<usize>, problem: usize| {
        open_flow
            .map(|l| l - 1)
            .filter(|l| *l != 0)
            .unwrap_or(problem)
    };
    let flow_line = open_flow.map(|f| f.line);
    let (message, shown) = match error.kind() {
        // A `[` where a key belongs is a key that never gets its `:`.
        ErrorKind::UnclosedFlowCollection { .. } if open_flow.is_some_and(|f| f.as_key) => {
            ("could not find expected ':'", flow_line.unwrap_or(at + 1))
        }
        ErrorKind::ExpectedFlowSequenceSeparator => {
            ("did not find expected ',' or ']'", context(flow_line, at))
        }
        ErrorKind::ExpectedFlowMappingSeparator => {
            ("did not find expected ',' or '}'", context(flow_line, at))
        }
        // yaml.v3 finds these at the end of the stream.
        ErrorKind::UnclosedFlowCollection { open: '[' } => (
            "did not find expected ',' or ']'",
            context(flow_line.or(Some(at + 1)), end),
        ),
        ErrorKind::UnclosedFlowCollection { .. } => (
            "did not find expected ',' or '}'",
            context(flow_line.or(Some(at + 1)), end),
        ),
        // A scanner error whose context is where the quote opens; on the first line, the
        // end of the text, where the scanner stopped.
        ErrorKind::UnclosedQuotedScalar => {
            let stopped = text.matches('\n').count();
            let shown = match (at, stopped) {
                (0, 0) => 0,
                (0, stopped) => stopped + 1,
                (at, _) => at + 1,
            };
            ("found unexpected end of stream", shown)
        }
        ErrorKind::MappingValueNotAllowed => (
            "mapping values are not allowed in this context",
            if at == 0 { 0 } else { at + 1 },
        ),
        ErrorKind::TabNotAllowed
        | ErrorKind::TabInIndentation
        | ErrorKind::UnexpectedCharacter { .. } => (
            "found character that cannot start any token",
            if at == 0 { 0 } else { at + 1 },
        ),
        // Inside a flow collection, yaml.v3 stops at the separator it expected.
        _ if open_flow.is_some() => {
            let expected = if open_flow.is_some_and(|f| f.sequence) {
                "did not find expected ',' or ']'"
            } else {
                "did not find expected ',' or '}'"
            };
            (expected, context(flow_line, at))
        }
        // Words yaml.v3 would choose differently; the line is right.
        _ => return format!("line {}: {}", at + 1, error.info()),
    };
    if shown == 0 {
        message.to_owned()
    } else {
        format!("line {shown}: {message}")
    }
}

/// yaml.v3's refusal of a tab where its scanner expects the start of a token, which the YAML
/// library cobble reads with accepts in some places (a tab before the first key) and words
/// otherwise elsewhere: a tab in the indentation of a line of block context that holds more
/// than a comment, and a tab right after a block sequence entry (`- `) or a complex key
/// (`? `). yaml.v3 takes tabs after a mapping's `:`, inside flow collections, quoted and plain
/// scalars and block scalars, and before comments; block scalars and lines that continue a
/// plain scalar are left to the library (yaml.v3 words those otherwise), so this finds only
/// what yaml.v3 refuses with `found character that cannot start any token`.
pub(crate) fn tab_error(text: &str) -> Option<String> {
    if !text.contains('\t') {
        return None;
    }
    let mut flow = 0usize;
    // While a block scalar's content runs: the indentation of the line that opened it, that
    // line's number, and the content's indentation once its first line has set it.
    let mut block_scalar: Option<(usize, usize, Option<usize>)> = None;
    // Whether the previous content line ended in a plain scalar that the next, more indented
    // line would continue.
    let mut plain_open: Option<usize> = None;
    for (number, line) in text.split('\n').enumerate() {
        let indent = line.len() - line.trim_start_matches([' ', '\t']).len();
        let rest = &line[indent..];
        let spaces = line.len() - line.trim_start_matches(' ').len();
        if let Some((parent, header, content)) = block_scalar.as_mut() {
            // A tab where the content's indentation is read: yaml.v3 names the line that
            // opened the scalar. A tab past that indentation is content.
            let within = content.unwrap_or(usize::MAX);
            if line
                .chars()
                .take(within)
                .take_while(|c| *c == ' ' || *c == '\t')
                .any(|c| c == '\t')
            {
                // yaml.v3 names the line of the scanner's context (the header) unless that is
                // the first, then the line of the tab.
                let named = if *header == 0 { number } else { *header };
                return Some(at_line(
                    named,
                    "found a tab character where an indentation space is expected",
                ));
            }
            if rest.is_empty() {
                continue;
            }
            if spaces > *parent {
                content.get_or_insert(spaces);
                continue;
            }
            block_scalar = None;
        }
        if rest.is_empty() || rest.starts_with('#') {
            if line.contains('\t') {
                return None; // blanks or a comment after a tab: yaml.v3's words depend on more
            }
            continue;
        }
        if flow > 0 {
            flow = flow_depth(rest, flow)?;
            continue;
        }
        if line[..indent].contains('\t') {
            if plain_open.is_some_and(|parent| spaces > parent || indent > spaces) {
                return None; // a plain scalar's continuation: yaml.v3 words it otherwise
            }
            return Some(at_line(number, CANNOT_START));
        }
        // Block indicators, each perhaps followed by the next on the same line.
        let mut rest = rest;
        while let Some(after) = rest
            .strip_prefix('-')
            .or_else(|| rest.strip_prefix('?'))
            .filter(|after| after.is_empty() || after.starts_with([' ', '\t']))
        {
            let next = after.trim_start_matches(' ');
            if next.starts_with('\t') {
                return Some(at_line(number, CANNOT_START));
            }
            rest = next;
        }
        plain_open = None;
        match value_of(rest) {
            Some(value) if value.starts_with(['[', '{']) => flow = flow_depth(value, 0)?,
            Some(value) if value.starts_with(['|', '>']) => {
                // A header of indicators alone; anything more is for the library to word.
                let indicators = value[1..]
                    .trim_start_matches(|c: char| c.is_ascii_digit() || c == '+' || c == '-');
                let after = indicators.trim_start_matches([' ', '\t']);
                if after.len() == indicators.len() && !indicators.is_empty()
                    || !(after.is_empty() || after.starts_with('#'))
                {
                    return None;
                }
                block_scalar = Some((spaces, number, None));
            }
            Some(value) if value.starts_with(['\'', '"']) => return None,
            // A comment ends a plain scalar: nothing continues it.
            Some(value)
                if !value.is_empty() && !value.starts_with('#') && !value.contains(" #") =>
            {
                plain_open = Some(spaces)
            }
            Some(_) => {}
            // A key without a value on its line, or a bare scalar: nothing more to tell.
            None if rest.starts_with(['\'', '"', '[', '{', '|', '>', '&', '*', '!']) => {
                return None;
            }
            None => plain_open = Some(spaces),
        }
    }
    None
}

const CANNOT_START: &str = "found character that cannot start any token";

/// yaml.v3's `message` at 0-based line `number`, which it does not name on the first line.
fn at_line(number: usize, message: &str) -> String {
    if number == 0 {
        format!("yaml: {message}")
    } else {
        format!("yaml: line {}: {message}", number + 1)
    }
}

/// What follows the first `: ` (or `:` at the end) of a plain key on a line, if the line
/// is `key: value`.
fn value_of(line: &str) -> Option<&str> {
    let mut from = 0;
    while let Some(at) = line[from..].find(':') {
        let at = from + at;
        let after = &line[at + 1..];
        if after.is_empty() || after.starts_with([' ', '\t']) {
            let key = &line[..at];
            if key.contains(" #") || key.starts_with(['\'', '"', '[', '{']) {
                return None;
            }
            return Some(after.trim_start_matches([' ', '\t']));
        }
        from = at + 1;
    }
    None
}

/// The flow depth after `text`, from `depth`, counting brackets outside quotes and comments;
/// `None` where a quote makes it unclear.
fn flow_depth(text: &str, mut depth: usize) -> Option<usize> {
    for c in text.chars() {
        match c {
            '[' | '{' => depth += 1,
            ']' | '}' => depth = depth.saturating_sub(1),
            '\'' | '"' => return None,
            '#' => break,
            _ => {}
        }
    }
    Some(depth)
}

/// Pebble's error for a layer cobble could not read, if Pebble would have refused it.
pub(crate) fn layer_error(label: &str, text: &str) -> Option<PlanError> {
    let error = |section: Option<&str>, message: String| PlanError::Parse {
        label: label.to_owned(),
        section: section.map(str::to_owned),
        line: None,
        message,
    };
    let whole = |message: String| error(None, message);
    let root = match read(text) {
        Ok(root) => root?,
        Err((error, open_flow)) => {
            return Some(whole(format!(
                "yaml: {}",
                syntax_message(text, &error, open_flow)
            )));
        }
    };
    let sections = match &root.kind {
        Kind::Map(pairs) => pairs,
        _ if root.is_null() => return None,
        _ => {
            return Some(whole(format!(
                "yaml: unmarshal errors:\n  {}",
                type_error(&root, "map[string]yaml.Node", root.line)
            )));
        }
    };
    if let Some(duplicate) = duplicate_keys(sections, |line| line).first() {
        return Some(whole(format!("yaml: unmarshal errors:\n  {duplicate}")));
    }
    let blank = blank_lines(text);
    for (key, value) in sections {
        let name = scalar_text(key);
        let ty = match name {
            "summary" | "description" => &STRING,
            "services" => &SERVICES,
            "checks" => &CHECKS,
            "log-targets" => &LOG_TARGETS,
            // The extensions' sections have their own words; cobble's stand.
            "workloads" | "pairing" => continue,
            _ => return None,
        };
        let mut decode = Decode {
            first_line: value.line,
            blank: &blank,
            errors: Vec::new(),
        };
        let message = match decode.value(value, ty) {
            Err(message) => message,
            Ok(()) if decode.errors.is_empty() => continue,
            Ok(()) => format!("yaml: unmarshal errors:\n  {}", decode.errors.join("\n  ")),
        };
        return Some(error(Some(name), message));
    }
    None
}

fn scalar_text(node: &Node) -> &str {
    match &node.kind {
        Kind::Scalar { value, .. } => value,
        _ => "",
    }
}

/// The 1-based numbers of the lines with nothing but white space.
fn blank_lines(text: &str) -> Vec<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.trim().is_empty())
        .map(|(i, _)| i + 1)
        .collect()
}

/// yaml.v3's type error for `node` decoded into Go type `ty`, shown at `line`.
fn type_error(node: &Node, ty: &str, line: usize) -> String {
    let value = match &node.kind {
        Kind::Scalar { value, .. } if value.chars().count() > 10 => {
            format!(" `{}...`", value.chars().take(7).collect::<String>())
        }
        Kind::Scalar { value, .. } => format!(" `{value}`"),
        _ => String::new(),
    };
    format!(
        "line {line}: cannot unmarshal {}{value} into {ty}",
        node.tag()
    )
}

/// yaml.v3's errors for the keys a mapping gives twice, with lines as `line` numbers them.
fn duplicate_keys(pairs: &[(Node, Node)], line: impl Fn(usize) -> usize) -> Vec<String> {
    let mut errors = Vec::new();
    for (i, (first, _)) in pairs.iter().enumerate() {
        for (later, _) in &pairs[i + 1..] {
            if let (Kind::Scalar { value: a, .. }, Kind::Scalar { value: b, .. }) =
                (&first.kind, &later.kind)
                && a == b
            {
                errors.push(format!(
                    "line {}: mapping key {} already defined at line {}",
                    line(later.line),
                    crate::go_quote(b),
                    line(first.line)
                ));
            }
        }
    }
    errors
}

/// One of Pebble's Go types, as yaml.v3 decodes into it.
enum GoType {
    /// A string type by its Go name: any scalar is its text.
    Str(&'static str),
    /// `int`: an integer, or a float in range (yaml.v3 truncates it).
    Int,
    /// `[]T`.
    Slice(&'static GoType),
    /// `map[string]T`, by its Go name.
    Map(&'static str, &'static GoType),
    /// `*T` for a struct: yaml.v3 names the struct.
    Struct(&'static str, &'static [(&'static str, GoType)]),
    /// `plan.OptionalDuration`, which reads itself.
    Duration,
    /// `plan.OptionalFloat`, which reads itself.
    Float,
    /// One of cobble's own fields, which Pebble does not have: nothing to say.
    Cobble,
}

const STRING: GoType = GoType::Str("string");
const STRINGS: GoType = GoType::Slice(&STRING);
const ENVIRONMENT: GoType = GoType::Map("map[string]string", &STRING);
const OVERRIDE: GoType = GoType::Str("plan.Override");

const SERVICES: GoType = GoType::Map("map[string]*plan.Service", &SERVICE);
const SERVICE: GoType = GoType::Struct(
    "plan.Service",
    &[
        ("summary", STRING),
        ("description", STRING),
        ("startup", GoType::Str("plan.ServiceStartup")),
        ("override", OVERRIDE),
        ("command", STRING),
        ("after", STRINGS),
        ("before", STRINGS),
        ("requires", STRINGS),
        ("workload", STRING),
        ("environment", ENVIRONMENT),
        ("user-id", GoType::Int),
        ("user", STRING),
        ("group-id", GoType::Int),
        ("group", STRING),
        ("working-dir", STRING),
        ("on-success", GoType::Str("plan.ServiceAction")),
        ("on-failure", GoType::Str("plan.ServiceAction")),
        (
            "on-check-failure",
            GoType::Map(
                "map[string]plan.ServiceAction",
                &GoType::Str("plan.ServiceAction"),
            ),
        ),
        ("backoff-delay", GoType::Duration),
        ("backoff-factor", GoType::Float),
        ("backoff-limit", GoType::Duration),
        ("kill-delay", GoType::Duration),
        ("requires-paths", GoType::Cobble),
        ("on-file-change", GoType::Cobble),
        ("persist-logs", GoType::Cobble),
        ("requires-checks", GoType::Cobble),
        ("start-grace", GoType::Cobble),
        ("readiness", GoType::Cobble),
        ("rlimits", GoType::Cobble),
        ("resources", GoType::Cobble),
        ("sockets", GoType::Cobble),
        ("watchdog", GoType::Cobble),
    ],
);

const CHECKS: GoType = GoType::Map("map[string]*plan.Check", &CHECK);
const CHECK: GoType = GoType::Struct(
    "plan.Check",
    &[
        ("override", OVERRIDE),
        ("level", GoType::Str("plan.CheckLevel")),
        ("startup", GoType::Str("plan.CheckStartup")),
        ("period", GoType::Duration),
        ("timeout", GoType::Duration),
        ("threshold", GoType::Int),
        (
            "http",
            GoType::Struct(
                "plan.HTTPCheck",
                &[("url", STRING), ("headers", ENVIRONMENT)],
            ),
        ),
        (
            "tcp",
            GoType::Struct("plan.TCPCheck", &[("port", GoType::Int), ("host", STRING)]),
        ),
        (
            "exec",
            GoType::Struct(
                "plan.ExecCheck",
                &[
                    ("command", STRING),
                    ("service-context", STRING),
                    ("environment", ENVIRONMENT),
                    ("user-id", GoType::Int),
                    ("user", STRING),
                    ("group-id", GoType::Int),
                    ("group", STRING),
                    ("working-dir", STRING),
                ],
            ),
        ),
    ],
);

const LOG_TARGETS: GoType = GoType::Map("map[string]*plan.LogTarget", &LOG_TARGET);
const LOG_TARGET: GoType = GoType::Struct(
    "plan.LogTarget",
    &[
        ("type", GoType::Str("plan.LogTargetType")),
        ("location", STRING),
        ("services", STRINGS),
        ("override", OVERRIDE),
        ("labels", ENVIRONMENT),
    ],
);

/// yaml.v3's decoder over one section, as Pebble runs it (unknown fields refused).
struct Decode<'a> {
    /// The line the section's value starts on: line 1 of the section as Pebble rewrites it.
    first_line: usize,
    blank: &'a [usize],
    /// The type errors so far; yaml.v3 reports them together at the end.
    errors: Vec<String>,
}

impl Decode<'_> {
    /// The line a node is on in the section as yaml.v3 writes it out again: counted from
    /// the section's start, without the blank lines it drops.
    fn line(&self, line: usize) -> usize {
        let blank = self
            .blank
            .iter()
            .filter(|b| (self.first_line..line).contains(b))
            .count();
        line.saturating_sub(self.first_line) + 1 - blank
    }

    fn type_error(&mut self, node: &Node, ty: &str) {
        let error = type_error(node, ty, self.line(node.line));
        self.errors.push(error);
    }

    /// Decodes `node` into `ty`; a field that reads itself ends the decode with its error.
    fn value(&mut self, node: &Node, ty: &GoType) -> Result<(), String> {
        if node.is_null() {
            return Ok(());
        }
        match (ty, &node.kind) {
            (GoType::Cobble, _) => {}
            (GoType::Str(_), Kind::Scalar { .. }) => {}
            (GoType::Int, Kind::Scalar { value, tag }) => {
                let integral = match tag.as_str() {
                    "!!int" => true,
                    "!!float" => value
                        .replace('_', "")
                        .parse::<f64>()
                        .is_ok_and(|v| v.abs() < 9.2e18),
                    _ => false,
                };
                if !integral {
                    self.type_error(node, "int");
                }
            }
            (GoType::Slice(elem), Kind::Seq(items)) => {
                for item in items {
                    self.value(item, elem)?;
                }
            }
            (GoType::Map(_, elem), Kind::Map(pairs)) => {
                if self.duplicates(pairs) {
                    return Ok(());
                }
                for (key, value) in pairs {
                    if !matches!(key.kind, Kind::Scalar { .. }) {
                        self.type_error(key, "string");
                    }
                    self.value(value, elem)?;
                }
            }
            (GoType::Struct(name, fields), Kind::Map(pairs)) => {
                if self.duplicates(pairs) {
                    return Ok(());
                }
                for (key, value) in pairs {
                    let field = scalar_text(key);
                    match fields.iter().find(|(f, _)| *f == field) {
                        Some((_, ty)) => self.value(value, ty)?,
                        None => {
                            let line = self.line(key.line);
                            self.errors.push(format!(
                                "line {line}: field {field} not found in type {name}"
                            ));
                        }
                    }
                }
            }
            (GoType::Duration, Kind::Scalar { value, .. }) => {
                parse_duration(value)
                    .map_err(|_| format!("invalid duration {}", crate::go_quote(value)))?;
            }
            (GoType::Duration, _) => return Err("duration must be a YAML string".to_owned()),
            (GoType::Float, Kind::Scalar { value, .. }) => {
                value.parse::<f64>().map_err(|_| {
                    format!("invalid floating-point number {}", crate::go_quote(value))
                })?;
            }
            (GoType::Float, _) => return Err("value must be a YAML number".to_owned()),
            (GoType::Str(name) | GoType::Map(name, _) | GoType::Struct(name, _), _) => {
                self.type_error(node, name)
            }
            (GoType::Int, _) => self.type_error(node, "int"),
            (GoType::Slice(elem), _) => {
                let name = format!("[]{}", go_name(elem));
                self.type_error(node, &name)
            }
        }
        Ok(())
    }

    /// yaml.v3 refuses a mapping that gives a key twice before it decodes any of it.
    fn duplicates(&mut self, pairs: &[(Node, Node)]) -> bool {
        let duplicates = duplicate_keys(pairs, |line| self.line(line));
        let found = !duplicates.is_empty();
        self.errors.extend(duplicates);
        found
    }
}

fn go_name(ty: &GoType) -> &'static str {
    match ty {
        GoType::Str(name) | GoType::Map(name, _) | GoType::Struct(name, _) => name,
        GoType::Int => "int",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::tab_error;

    /// Each input with yaml.v3's answer (from `yaml.Unmarshal` in Go 1.23), where this rule
    /// gives one; `None` where yaml.v3 takes the text, or refuses it in words this rule
    /// leaves to the YAML library.
    #[test]
    fn tabs_where_yaml_v3_wants_a_token_are_refused_in_its_words() {
        const CANNOT: &str = "found character that cannot start any token";
        const INDENT: &str = "found a tab character where an indentation space is expected";
        let cases: &[(&str, Option<String>)] = &[
            ("\tservices: {}\n", Some(format!("yaml: {CANNOT}"))),
            (
                "services:\n\tweb: {}\n",
                Some(format!("yaml: line 2: {CANNOT}")),
            ),
            (
                "services:\n  web:\n\tcommand: x\n",
                Some(format!("yaml: line 3: {CANNOT}")),
            ),
            (
                "services:\n  web:\n \t  command: x\n",
                Some(format!("yaml: line 3: {CANNOT}")),
            ),
            (
                "services:\n  - \tweb\n",
                Some(format!("yaml: line 2: {CANNOT}")),
            ),
            (
                "services:\n  -\tweb\n",
                Some(format!("yaml: line 2: {CANNOT}")),
            ),
            ("?\tsummary\n: b\n", Some(format!("yaml: {CANNOT}"))),
            (
                "services:\n\t- b\n",
                Some(format!("yaml: line 2: {CANNOT}")),
            ),
            (
                "summary: x # c\n\tdescription: y\n",
                Some(format!("yaml: line 2: {CANNOT}")),
            ),
            (
                "summary: |\n  x\n\ty\n",
                Some(format!("yaml: line 3: {INDENT}")),
            ),
            (
                "summary: x\nsummary2: |\n\tx\n",
                Some(format!("yaml: line 2: {INDENT}")),
            ),
            (
                "a: 1\nb: >-\n  x\n\tc: 2\n",
                Some(format!("yaml: line 2: {INDENT}")),
            ),
            // yaml.v3 takes these.
            ("summary:\tx\n", None),
            ("summary: \tx\n", None),
            ("summary: x\t# c\n", None),
            ("summary:\t# c\n", None),
            ("summary: b\tc\n", None),
            ("services: {web:\t{command: x}}\n", None),
            ("summary: 'x\n\ty'\n", None),
            ("summary: \"x\n\ty\"\n", None),
            ("summary: x\n  \ty\n", None),
            ("summary: |\n  x\n  \ty\n", None),
            ("services:\n  web:\n    environment:\n      A:\t1\n", None),
            ("services:\n  web:\n    command: x\t\n", None),
            // yaml.v3 refuses these in other words: the library words them.
            ("summary: x\n\ty\n", None),
            ("\t\nsummary: 1\n", None),
            ("summary: >\t-\n  x\n", None),
        ];
        for (text, want) in cases {
            assert_eq!(tab_error(text).as_ref(), want.as_ref(), "{text:?}");
        }
    }
}
