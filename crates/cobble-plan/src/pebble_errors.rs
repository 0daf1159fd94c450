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

use std::borrow::Cow;
use std::collections::HashMap;

// The event parser serde-saphyr reads with, as it exports it (a dependency of our own would
// be built apart, with other symbol names, and cost the release layout).
use serde_saphyr::granit_parser::{self, ErrorKind, Event, Parser, ScalarStyle, ScanError};

use crate::duration::parse_duration;
use crate::error::PlanError;

/// How deep yaml.v3 lets collections nest: flow collections one inside another
/// (`max_flow_level`), and block collections each more indented than the last
/// (`max_indents`), counted apart.
pub(crate) const MAX_DEPTH: usize = 10_000;

/// A YAML node as yaml.v3 sees it: its line and, for a scalar, its text and resolved tag.
/// Nodes live in a [`Doc`] and name each other by index, as yaml.v3's nodes point at each
/// other: an alias is the node its anchor names, never a copy of it, so a document's nodes
/// are as many as its text has, and dropping them takes no recursion.
#[derive(Debug)]
struct Node<'a> {
    line: usize,
    kind: Kind<'a>,
}

#[derive(Debug)]
enum Kind<'a> {
    Scalar {
        value: Cow<'a, str>,
        tag: Cow<'static, str>,
    },
    Seq(Vec<usize>),
    Map(Vec<(usize, usize)>),
    /// An alias: the anchor's name and the node it names.
    Alias(String, usize),
}

/// The nodes of one document.
struct Doc<'a> {
    nodes: Vec<Node<'a>>,
    root: usize,
}

impl<'a> Doc<'a> {
    fn node(&self, index: usize) -> &Node<'a> {
        &self.nodes[index]
    }

    /// The node itself, or the one an alias names.
    fn resolved(&self, index: usize) -> &Node<'a> {
        match self.nodes[index].kind {
            Kind::Alias(_, target) => &self.nodes[target],
            _ => &self.nodes[index],
        }
    }

    /// yaml.v3's short tag: `!!str`, `!!int`, `!!seq`, `!!map` and so on.
    fn tag(&self, index: usize) -> &str {
        match &self.resolved(index).kind {
            Kind::Scalar { tag, .. } => tag,
            Kind::Seq(_) => "!!seq",
            Kind::Map(_) => "!!map",
            Kind::Alias(..) => "",
        }
    }

    fn is_null(&self, index: usize) -> bool {
        self.tag(index) == "!!null"
    }
}

/// A collection being read: its node (reserved when it opened, so that an alias inside it
/// can name it), whether it is a flow collection, and what it holds so far.
enum Open {
    Seq(usize, bool, Vec<usize>),
    Map(usize, bool, Vec<(usize, usize)>, Option<usize>),
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

/// Why a document could not be read.
enum ReadError {
    /// The parser's error, and the innermost flow collection left open.
    Syntax(ScanError, Option<OpenFlow>),
    /// Nesting past [`MAX_DEPTH`], yaml.v3's message with its line.
    Depth(String),
}

/// yaml.v3's refusal of nesting past its limit, where the collection one too deep opens
/// (1-based; the first line is not named).
fn depth_message(line: usize) -> String {
    if line <= 1 {
        format!("exceeded max depth of {MAX_DEPTH}")
    } else {
        format!("line {line}: exceeded max depth of {MAX_DEPTH}")
    }
}

/// Reads the first document of `text` (`None` when it is empty), or fails as yaml.v3's parser
/// would: with the parser's error and the innermost flow collection left open, or with
/// yaml.v3's depth limit. The nodes are as many as the text's, whatever its aliases.
fn read(text: &str) -> Result<Option<Doc<'_>>, ReadError> {
    let mut nodes: Vec<Node<'_>> = Vec::new();
    let mut stack: Vec<Open> = Vec::new();
    let mut anchors: HashMap<usize, usize> = HashMap::new();
    let mut flows: Vec<OpenFlow> = Vec::new();
    // The columns of the open block collections that each indent more than the last, as
    // yaml.v3's scanner counts its indentation levels, and for each open block collection
    // whether it is one of them.
    let mut indents: Vec<usize> = Vec::new();
    let mut block: Vec<bool> = Vec::new();
    // The line of the last token yaml.v3's scanner saved as a possible simple key (a scalar,
    // an alias, a flow collection's start): the context its block depth error names.
    let mut last_key_line = 0;
    let mut root = None;
    // yaml.v3's limit for flow collections; the parser's limit for block ones only backs up
    // the count below, since it counts a block sequence at its key's indentation too.
    let mut options = granit_parser::Options::default();
    options.flow_nesting_limit = MAX_DEPTH;
    options.block_nesting_limit = 2 * MAX_DEPTH + 1;
    for next in Parser::new_from_str_with_options(text, options) {
        let (event, span) = next.map_err(|e| {
            if matches!(e.kind(), ErrorKind::RecursionLimitExceeded) {
                return ReadError::Depth(depth_message(e.marker().line()));
            }
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
            ReadError::Syntax(e, open)
        })?;
        let line = span.start.line();
        if matches!(event, Event::Scalar(..) | Event::Alias(_))
            || matches!(
                event,
                Event::SequenceStart(granit_parser::StructureStyle::Flow, ..)
                    | Event::MappingStart(granit_parser::StructureStyle::Flow, ..)
            )
        {
            last_key_line = line;
        }
        // A collection opens: its node is reserved now, and its depth counted.
        let mut open = |style, anchor: usize, sequence: bool| {
            let flow = style == granit_parser::StructureStyle::Flow;
            if flow {
                flows.push(OpenFlow {
                    line,
                    sequence,
                    as_key: expects_key(&stack),
                });
                if flows.len() > MAX_DEPTH {
                    return Err(ReadError::Depth(depth_message(line)));
                }
            } else {
                let column = span.start.col();
                let deeper = indents.last().is_none_or(|c| column > *c);
                if deeper {
                    indents.push(column);
                    if indents.len() > MAX_DEPTH {
                        // The context is that token's line, unless it is the first; then
                        // the position the scanner is at.
                        let named = if last_key_line > 1 {
                            last_key_line
                        } else {
                            line
                        };
                        return Err(ReadError::Depth(depth_message(named)));
                    }
                }
                block.push(deeper);
            }
            let index = nodes.len();
            nodes.push(Node {
                line,
                kind: Kind::Seq(Vec::new()),
            });
            if anchor != 0 {
                anchors.insert(anchor, index);
            }
            stack.push(if sequence {
                Open::Seq(index, flow, Vec::new())
            } else {
                Open::Map(index, flow, Vec::new(), None)
            });
            Ok(())
        };
        let index = match event {
            Event::SequenceStart(style, anchor, _) => {
                open(style, anchor, true)?;
                continue;
            }
            Event::MappingStart(style, anchor, _) => {
                open(style, anchor, false)?;
                continue;
            }
            Event::Scalar(value, style, anchor, tag) => {
                let tag: Cow<'static, str> = match tag {
                    Some(tag) if tag.is_yaml_core_schema() => format!("!!{}", tag.suffix()).into(),
                    Some(tag) => format!("{}{}", tag.handle(), tag.suffix()).into(),
                    None if style == ScalarStyle::Plain => crate::emit::resolve(&value).into(),
                    None => "!!str".into(),
                };
                let index = nodes.len();
                nodes.push(Node {
                    line,
                    kind: Kind::Scalar { value, tag },
                });
                if anchor != 0 {
                    anchors.insert(anchor, index);
                }
                index
            }
            Event::Alias(anchor) => {
                let Some(target) = anchors.get(&anchor).copied() else {
                    continue;
                };
                // The parser does not say what the anchor was called; yaml.v3's messages do.
                let name = text
                    .get(span.start.index()..span.end.index())
                    .unwrap_or_default()
                    .trim_start_matches('*')
                    .to_owned();
                nodes.push(Node {
                    line,
                    kind: Kind::Alias(name, target),
                });
                nodes.len() - 1
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let (index, flow) = match stack.pop() {
                    Some(Open::Seq(index, flow, items)) => {
                        nodes[index].kind = Kind::Seq(items);
                        (index, flow)
                    }
                    Some(Open::Map(index, flow, pairs, _)) => {
                        nodes[index].kind = Kind::Map(pairs);
                        (index, flow)
                    }
                    None => continue,
                };
                if flow {
                    flows.pop();
                } else if block.pop() == Some(true) {
                    indents.pop();
                }
                index
            }
            Event::DocumentEnd if stack.is_empty() => break,
            _ => continue,
        };
        match stack.last_mut() {
            Some(Open::Seq(_, _, items)) => items.push(index),
            Some(Open::Map(_, _, pairs, key)) => match key.take() {
                Some(k) => pairs.push((k, index)),
                None => *key = Some(index),
            },
            None => root = Some(index),
        }
    }
    Ok(root.map(|root| Doc { nodes, root }))
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
    sections_error(label, text, false)
}

/// Pebble's refusal of a layer whose aliases expand too far for yaml.v3 (`document contains
/// excessive aliasing`, or an anchor that contains itself), if it would refuse it so. Asked
/// before cobble reads a layer with aliases, so that the expansion yaml.v3 refuses is never
/// made.
pub(crate) fn aliasing_error(label: &str, text: &str) -> Option<PlanError> {
    sections_error(label, text, true)
}

fn sections_error(label: &str, text: &str, aliasing_only: bool) -> Option<PlanError> {
    let error = |section: Option<&str>, message: String| PlanError::Parse {
        label: label.to_owned(),
        section: section.map(str::to_owned),
        line: None,
        message,
    };
    let whole = |message: String| error(None, message);
    let doc = match read(text) {
        Ok(doc) => doc?,
        Err(_) if aliasing_only => return None,
        Err(ReadError::Depth(message)) => return Some(whole(format!("yaml: {message}"))),
        Err(ReadError::Syntax(error, open_flow)) => {
            return Some(whole(format!(
                "yaml: {}",
                syntax_message(text, &error, open_flow)
            )));
        }
    };
    let root = doc.resolved(doc.root);
    let sections = match &root.kind {
        Kind::Map(pairs) => pairs,
        _ if doc.is_null(doc.root) || aliasing_only => return None,
        _ => {
            return Some(whole(format!(
                "yaml: unmarshal errors:\n  {}",
                type_error(&doc, doc.root, "map[string]yaml.Node", root.line)
            )));
        }
    };
    if let Some(duplicate) = duplicate_keys(&doc, sections, |line| line).first() {
        if aliasing_only {
            return None;
        }
        return Some(whole(format!("yaml: unmarshal errors:\n  {duplicate}")));
    }
    let blank = blank_lines(text);
    for (key, value) in sections {
        let name = scalar_text(&doc, *key);
        let ty = match name {
            "summary" | "description" => &STRING,
            "services" => &SERVICES,
            "checks" => &CHECKS,
            "log-targets" => &LOG_TARGETS,
            // The extensions' sections have their own words; cobble's stand.
            "workloads" | "pairing" => continue,
            _ if aliasing_only => continue,
            _ => return None,
        };
        let mut decode = Decode {
            doc: &doc,
            first_line: doc.node(*value).line,
            blank: &blank,
            errors: Vec::new(),
            // Pebble decodes each section as a document of its own.
            decode_count: 1,
            alias_count: 0,
            aliases: Vec::new(),
            merged: None,
        };
        let message = match decode.value(*value, ty) {
            Err(Stop::Aliasing(message)) => message,
            Err(Stop::Field(_)) if aliasing_only => continue,
            Err(Stop::Field(message)) => message,
            Ok(()) if decode.errors.is_empty() || aliasing_only => continue,
            Ok(()) => format!("yaml: unmarshal errors:\n  {}", decode.errors.join("\n  ")),
        };
        return Some(error(Some(name), message));
    }
    None
}

fn scalar_text<'d>(doc: &'d Doc<'_>, index: usize) -> &'d str {
    match &doc.resolved(index).kind {
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
fn type_error(doc: &Doc<'_>, index: usize, ty: &str, line: usize) -> String {
    let value = match &doc.resolved(index).kind {
        Kind::Scalar { value, .. } if value.chars().count() > 10 => {
            format!(" `{}...`", value.chars().take(7).collect::<String>())
        }
        Kind::Scalar { value, .. } => format!(" `{value}`"),
        _ => String::new(),
    };
    format!(
        "line {line}: cannot unmarshal {}{value} into {ty}",
        doc.tag(index)
    )
}

/// yaml.v3's errors for the keys a mapping gives twice, with lines as `line` numbers them.
fn duplicate_keys(
    doc: &Doc<'_>,
    pairs: &[(usize, usize)],
    line: impl Fn(usize) -> usize,
) -> Vec<String> {
    let mut errors = Vec::new();
    for (i, (first, _)) in pairs.iter().enumerate() {
        for (later, _) in &pairs[i + 1..] {
            let (first, later) = (doc.node(*first), doc.node(*later));
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

/// What ends a section's decode before its type errors are told.
enum Stop {
    /// A field that reads itself refused its value, in its words.
    Field(String),
    /// yaml.v3's decoder gave up on the document's aliases.
    Aliasing(String),
}

/// yaml.v3 allows this share of a document's decodes to come from aliases: 99 % up to
/// 400 000 decodes, falling to 10 % at 4 000 000 (`allowedAliasRatio`).
fn allowed_alias_ratio(decodes: usize) -> f64 {
    const LOW: usize = 400_000;
    const HIGH: usize = 4_000_000;
    match decodes {
        n if n <= LOW => 0.99,
        n if n >= HIGH => 0.10,
        n => 0.99 - 0.89 * ((n - LOW) as f64 / (HIGH - LOW) as f64),
    }
}

/// yaml.v3's decoder over one section, as Pebble runs it (unknown fields refused).
struct Decode<'a, 'd> {
    doc: &'a Doc<'d>,
    /// The line the section's value starts on: line 1 of the section as Pebble rewrites it.
    first_line: usize,
    blank: &'a [usize],
    /// The type errors so far; yaml.v3 reports them together at the end.
    errors: Vec<String>,
    /// yaml.v3's `decodeCount`: every node decoded, an alias's target each time again.
    decode_count: usize,
    /// yaml.v3's `aliasCount`: the decodes made through an alias.
    alias_count: usize,
    /// The aliases being decoded, innermost last.
    aliases: Vec<usize>,
    /// The keys a mapping with a merge key (`<<`) set itself, which the merged ones do not
    /// override.
    merged: Option<Vec<String>>,
}

impl Decode<'_, '_> {
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

    fn type_error(&mut self, index: usize, ty: &str) {
        let line = self.line(self.doc.node(index).line);
        let error = type_error(self.doc, index, ty, line);
        self.errors.push(error);
    }

    /// yaml.v3 counts each node it decodes, and gives up once aliases make too much of the
    /// document (`document contains excessive aliasing`).
    fn count(&mut self) -> Result<(), Stop> {
        self.count_as(false)
    }

    /// [`Self::count`] for a node reached through an alias (`aliased`) or not.
    fn count_as(&mut self, aliased: bool) -> Result<(), Stop> {
        self.decode_count += 1;
        if aliased || !self.aliases.is_empty() {
            self.alias_count += 1;
        }
        if self.alias_count > 100
            && self.decode_count > 1000
            && self.alias_count as f64 / self.decode_count as f64
                > allowed_alias_ratio(self.decode_count)
        {
            return Err(Stop::Aliasing(
                "yaml: document contains excessive aliasing".to_owned(),
            ));
        }
        Ok(())
    }

    /// Decodes node `index` into `ty`, as yaml.v3's `unmarshal` does; a field that reads
    /// itself ends the decode with its error, and so does excessive aliasing. The recursion
    /// follows the Go type, whose depth is fixed; only cobble's own fields, which Pebble does
    /// not have, are walked without one, and without recursion.
    fn value(&mut self, index: usize, ty: &GoType) -> Result<(), Stop> {
        self.count()?;
        let doc = self.doc;
        let node = doc.node(index);
        if let Kind::Alias(name, target) = &node.kind {
            if self.aliases.contains(&index) {
                return Err(Stop::Aliasing(format!(
                    "yaml: anchor '{name}' value contains itself"
                )));
            }
            self.aliases.push(index);
            let result = self.value(*target, ty);
            self.aliases.pop();
            return result;
        }
        if doc.is_null(index) {
            return Ok(());
        }
        match (ty, &node.kind) {
            (GoType::Cobble, _) => self.any(index)?,
            (GoType::Str(_), Kind::Scalar { .. }) => {}
            (GoType::Int, Kind::Scalar { value, tag }) => {
                let integral = match &**tag {
                    "!!int" => true,
                    "!!float" => value
                        .replace('_', "")
                        .parse::<f64>()
                        .is_ok_and(|v| v.abs() < 9.2e18),
                    _ => false,
                };
                if !integral {
                    self.type_error(index, "int");
                }
            }
            (GoType::Slice(elem), Kind::Seq(items)) => {
                for item in items {
                    self.value(*item, elem)?;
                }
            }
            (GoType::Map(_, elem), Kind::Map(pairs)) => {
                if self.duplicates(pairs) {
                    return Ok(());
                }
                let mut merged = self.merged.take();
                let mut merge = None;
                for (key, value) in pairs {
                    if is_merge(doc, *key) {
                        merge = Some(*value);
                        continue;
                    }
                    self.count()?;
                    if !matches!(doc.resolved(*key).kind, Kind::Scalar { .. }) {
                        self.type_error(*key, "string");
                        continue;
                    }
                    if !first_setting(doc, &mut merged, *key) {
                        continue;
                    }
                    self.value(*value, elem)?;
                }
                self.merged = merged;
                if let Some(merge) = merge {
                    self.merge(pairs, merge, ty)?;
                }
            }
            (GoType::Struct(name, fields), Kind::Map(pairs)) => {
                if self.duplicates(pairs) {
                    return Ok(());
                }
                let mut merged = self.merged.take();
                let mut merge = None;
                for (key, value) in pairs {
                    if is_merge(doc, *key) {
                        merge = Some(*value);
                        continue;
                    }
                    self.count()?;
                    if !first_setting(doc, &mut merged, *key) {
                        continue;
                    }
                    let field = scalar_text(doc, *key);
                    match fields.iter().find(|(f, _)| *f == field) {
                        Some((_, ty)) => self.value(*value, ty)?,
                        None => {
                            let line = self.line(doc.node(*key).line);
                            self.errors.push(format!(
                                "line {line}: field {field} not found in type {name}"
                            ));
                        }
                    }
                }
                self.merged = merged;
                if let Some(merge) = merge {
                    self.merge(pairs, merge, ty)?;
                }
            }
            (GoType::Duration, Kind::Scalar { value, .. }) => {
                parse_duration(value).map_err(|_| {
                    Stop::Field(format!("invalid duration {}", crate::go_quote(value)))
                })?;
            }
            (GoType::Duration, _) => {
                return Err(Stop::Field("duration must be a YAML string".to_owned()));
            }
            (GoType::Float, Kind::Scalar { value, .. }) => {
                value.parse::<f64>().map_err(|_| {
                    Stop::Field(format!(
                        "invalid floating-point number {}",
                        crate::go_quote(value)
                    ))
                })?;
            }
            (GoType::Float, _) => {
                return Err(Stop::Field("value must be a YAML number".to_owned()));
            }
            (GoType::Str(name) | GoType::Map(name, _) | GoType::Struct(name, _), _) => {
                self.type_error(index, name)
            }
            (GoType::Int, _) => self.type_error(index, "int"),
            (GoType::Slice(elem), _) => {
                let name = format!("[]{}", go_name(elem));
                self.type_error(index, &name)
            }
        }
        Ok(())
    }

    /// A merge key's mappings decoded into the mapping that holds it, as yaml.v3's `merge`
    /// does: the keys it set itself stay.
    fn merge(&mut self, parent: &[(usize, usize)], merge: usize, ty: &GoType) -> Result<(), Stop> {
        let outer = self.merged.take();
        let set = match &outer {
            Some(set) => set.clone(),
            None => {
                let mut set = Vec::new();
                for (key, _) in parent {
                    self.count()?;
                    set.push(scalar_text(self.doc, *key).to_owned());
                }
                set
            }
        };
        self.merged = Some(set);
        let doc = self.doc;
        let result = match &doc.node(merge).kind {
            Kind::Seq(items) => items.iter().try_for_each(|item| self.value(*item, ty)),
            _ => self.value(merge, ty),
        };
        self.merged = outer;
        result
    }

    /// A value of one of cobble's own fields, decoded as yaml.v3 decodes into `interface{}`,
    /// which follows every alias: counted node by node, on a stack of its own, so that its
    /// aliases are held to the same rule. An alias inside what it names is an expansion that
    /// never ends, and ends there.
    fn any(&mut self, index: usize) -> Result<(), Stop> {
        let doc = self.doc;
        // Each node to decode, and whether it is reached through an alias.
        let mut pending: Vec<(usize, bool)> = Vec::new();
        let children = |pending: &mut Vec<(usize, bool)>, index: usize, aliased: bool| match &doc
            .node(index)
            .kind
        {
            Kind::Scalar { .. } => {}
            Kind::Alias(_, target) => pending.push((*target, true)),
            Kind::Seq(items) => pending.extend(items.iter().rev().map(|i| (*i, aliased))),
            Kind::Map(pairs) => pending.extend(
                pairs
                    .iter()
                    .rev()
                    .flat_map(|(k, v)| [(*v, aliased), (*k, aliased)]),
            ),
        };
        children(&mut pending, index, false);
        while let Some((next, aliased)) = pending.pop() {
            self.count_as(aliased)?;
            children(&mut pending, next, aliased);
        }
        Ok(())
    }

    /// yaml.v3 refuses a mapping that gives a key twice before it decodes any of it.
    fn duplicates(&mut self, pairs: &[(usize, usize)]) -> bool {
        let duplicates = duplicate_keys(self.doc, pairs, |line| self.line(line));
        let found = !duplicates.is_empty();
        self.errors.extend(duplicates);
        found
    }
}

/// Whether a key sets its value: not when the mapping that merges this one set it first.
fn first_setting(doc: &Doc<'_>, merged: &mut Option<Vec<String>>, key: usize) -> bool {
    let Some(merged) = merged else {
        return true;
    };
    let text = scalar_text(doc, key);
    if merged.iter().any(|k| k == text) {
        return false;
    }
    merged.push(text.to_owned());
    true
}

/// yaml.v3's merge key: a plain `<<`, or one tagged `!!merge`.
fn is_merge(doc: &Doc<'_>, key: usize) -> bool {
    matches!(&doc.node(key).kind, Kind::Scalar { value, tag } if value == "<<" && tag == "!!merge")
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
