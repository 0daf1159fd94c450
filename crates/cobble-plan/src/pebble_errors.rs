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
use serde_saphyr::granit_parser::{self, ErrorKind, Event, Marker, Parser, ScalarStyle, ScanError};

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
    /// `block`: a literal or folded block scalar (`|`, `>`), which starts on its key's line.
    Scalar {
        value: Cow<'a, str>,
        tag: Cow<'static, str>,
        block: bool,
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
/// can name it), whether it is a flow collection, and what it holds so far; a mapping also
/// its keys' column and a key waiting for its value.
enum Open {
    Seq(usize, bool, Vec<usize>),
    Map(usize, bool, usize, Vec<(usize, usize)>, Option<usize>),
}

/// A flow collection left open: where it starts, and how it is read.
#[derive(Debug, Clone, Copy)]
struct OpenFlow {
    line: usize,
    /// `[` rather than `{`.
    sequence: bool,
    /// Where a block mapping expects a key, as `[a` at the start of a line does.
    as_key: bool,
    /// Where a block mapping expects a key, but not in the column of its keys: no key.
    off_key: bool,
    /// A single-pair mapping inside a flow sequence (`[a: b]`), which has no bracket.
    implicit: bool,
}

/// Where the parser stopped: its error, with what yaml.v3 takes its line from.
struct Failure {
    error: ScanError,
    /// The innermost flow collection left open (with a bracket of its own).
    open_flow: Option<OpenFlow>,
    /// The innermost block collection left open: whether it is a sequence, and its line.
    innermost: Option<(bool, usize)>,
    /// The column of the keys of the innermost block collection left open, if a mapping.
    key_column: Option<usize>,
}

/// Why a document could not be read.
enum ReadError {
    /// The parser's error, and the collections left open.
    Syntax(Box<Failure>),
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

/// The event parser's options: yaml.v3's limit for flow collections; the parser's limit for
/// block ones only backs up [`read`]'s count, since it counts a block sequence at its key's
/// indentation too.
fn parser_options() -> granit_parser::Options {
    let mut options = granit_parser::Options::default();
    options.flow_nesting_limit = MAX_DEPTH;
    options.block_nesting_limit = 2 * MAX_DEPTH + 1;
    options
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
    let mut offsets = Offsets::new(text);
    for next in Parser::new_from_str_with_options(text, parser_options()) {
        let (event, span) = next.map_err(|e| {
            if matches!(e.kind(), ErrorKind::RecursionLimitExceeded) {
                return ReadError::Depth(depth_message(e.marker().line()));
            }
            // The scanner may refuse a bracket before the parser reads it as a collection.
            let unread = match e.kind() {
                ErrorKind::UnclosedFlowCollection { open } => Some(OpenFlow {
                    line: e.marker().line(),
                    sequence: *open == '[',
                    as_key: expects_key(&stack, e.marker().col()),
                    off_key: off_key(&stack, e.marker().col()),
                    implicit: false,
                }),
                _ => None,
            };
            let open_flow = flows.iter().rev().find(|f| !f.implicit).copied().or(unread);
            // Flow collections hold no block ones: the innermost block collection is the
            // one under every flow collection left open.
            let block = stack.len().checked_sub(flows.len() + 1);
            let innermost = block.map(|i| match &stack[i] {
                Open::Seq(index, ..) => (true, nodes[*index].line),
                Open::Map(index, ..) => (false, nodes[*index].line),
            });
            ReadError::Syntax(Box::new(Failure {
                error: e,
                open_flow,
                innermost,
                key_column: block.and_then(|i| match &stack[i] {
                    Open::Map(_, _, column, ..) => Some(*column),
                    Open::Seq(..) => None,
                }),
            }))
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
        let column = span.start.col();
        let mut open = |style, anchor: usize, sequence: bool, implicit: bool| {
            let flow = style == granit_parser::StructureStyle::Flow;
            if flow {
                flows.push(OpenFlow {
                    line,
                    sequence,
                    as_key: expects_key(&stack, column),
                    off_key: off_key(&stack, column),
                    implicit,
                });
                if flows.len() > MAX_DEPTH {
                    return Err(ReadError::Depth(depth_message(line)));
                }
            } else {
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
                Open::Map(index, flow, column, Vec::new(), None)
            });
            Ok(())
        };
        let index = match event {
            Event::SequenceStart(style, anchor, _) => {
                open(style, anchor, true, false)?;
                continue;
            }
            Event::MappingStart(style, anchor, _) => {
                // A flow mapping without its own `{` is a single pair in a flow sequence.
                let implicit = style == granit_parser::StructureStyle::Flow
                    && char_at(text, offsets.of(&span.start)) != Some('{');
                open(style, anchor, false, implicit)?;
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
                    kind: Kind::Scalar {
                        value,
                        tag,
                        block: matches!(style, ScalarStyle::Literal | ScalarStyle::Folded),
                    },
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
                    .get(offsets.of(&span.start)..offsets.of(&span.end))
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
                    Some(Open::Map(index, flow, _, pairs, _)) => {
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
            Some(Open::Map(_, _, _, pairs, key)) => match key.take() {
                Some(k) => pairs.push((k, index)),
                None => *key = Some(index),
            },
            None => root = Some(index),
        }
    }
    Ok(root.map(|root| Doc { nodes, root }))
}

/// Whether the innermost collection being read is a mapping waiting for its next key, in
/// whose keys' column `col` is.
fn expects_key(stack: &[Open], col: usize) -> bool {
    matches!(stack.last(), Some(Open::Map(_, _, c, _, None)) if *c == col)
}

/// Whether the innermost collection being read is a mapping waiting for its next key, and
/// `col` is not its keys' column.
fn off_key(stack: &[Open], col: usize) -> bool {
    matches!(stack.last(), Some(Open::Map(_, _, c, _, None)) if *c != col)
}

/// Byte offsets in `text` of the parser's positions, which count characters. A marker read
/// from a string carries its byte offset too, which is taken as it is; for one without, a
/// cursor walks on from the last position found, so that positions asked for in the text's
/// order cost one walk over it in all, never one from its start each.
struct Offsets<'t> {
    text: &'t str,
    /// The last position found, as a char index and a byte offset.
    chars: usize,
    bytes: usize,
}

impl<'t> Offsets<'t> {
    fn new(text: &'t str) -> Self {
        Offsets {
            text,
            chars: 0,
            bytes: 0,
        }
    }

    /// The byte offset of `marker` (the text's length past its end).
    fn of(&mut self, marker: &Marker) -> usize {
        if let Some(bytes) = marker.byte_offset()
            && self.text.is_char_boundary(bytes)
        {
            return bytes;
        }
        let index = marker.index();
        if index < self.chars {
            (self.chars, self.bytes) = (0, 0);
        }
        let rest = &self.text[self.bytes..];
        match rest.char_indices().nth(index - self.chars) {
            Some((at, _)) => {
                (self.chars, self.bytes) = (index, self.bytes + at);
                self.bytes
            }
            None => {
                // Past the end: the cursor stays there, so that the next walk is short.
                self.chars += rest.chars().count();
                self.bytes = self.text.len();
                self.bytes
            }
        }
    }
}

/// The character at byte offset `at` of `text`.
fn char_at(text: &str, at: usize) -> Option<char> {
    text.get(at..)?.chars().next()
}

/// The last character before byte offset `at` that is not white space (or a line break).
fn previous_token_char(text: &str, at: usize) -> Option<char> {
    text.get(..at)?.rsplit('\n').find_map(|line| {
        without_comment(line)
            .chars()
            .rev()
            .find(|c| !c.is_whitespace())
    })
}

/// A line without its comment: from a `#` at its start or after a blank, outside quotes.
fn without_comment(line: &str) -> &str {
    let mut quote = None;
    let mut blank_before = true;
    for (at, c) in line.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '#') if blank_before => return &line[..at],
            _ => {}
        }
        blank_before = c == ' ' || c == '\t';
    }
    line
}

/// The byte offset and 0-based line of the bracket that closes the one at byte offset
/// `open`, counting brackets outside quotes; the end of the text if none does.
fn closing_bracket(text: &str, open: usize) -> (usize, usize) {
    let open = open.min(text.len());
    let mut depth = 0usize;
    let mut quote = None;
    let mut line = text.as_bytes()[..open]
        .iter()
        .filter(|b| **b == b'\n')
        .count();
    for (at, c) in text[open..].char_indices() {
        match (quote, c) {
            (_, '\n') => line += 1,
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '[' | '{') => depth += 1,
            (None, ']' | '}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return (open + at, line);
                }
            }
            _ => {}
        }
    }
    (text.len(), line)
}

/// The rest of the line from byte offset `at`.
fn rest_of_line(text: &str, at: usize) -> &str {
    text.get(at..)
        .unwrap_or_default()
        .split('\n')
        .next()
        .unwrap_or_default()
}

/// Whether `rest` (what follows a token on its line) holds a mapping's `: ` or a `:` that
/// ends the line, outside quotes and before a comment.
fn has_mapping_colon(rest: &str) -> bool {
    let chars: Vec<char> = rest.chars().collect();
    let mut quote = None;
    for (i, c) in chars.iter().enumerate() {
        match (quote, c) {
            (Some(q), c) if *c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(*c),
            (None, '#') if i == 0 || chars[i - 1].is_whitespace() => return false,
            (None, ':') if chars.get(i + 1).is_none_or(|n| n.is_whitespace()) => return true,
            _ => {}
        }
    }
    false
}

/// A token where a block mapping wants its next key, that starts a plain scalar running on
/// over the lines below and meeting a mapping's `:` there: a `- ` entry's value (continued on
/// lines indented past the `-`), or a plain scalar itself (continued on lines indented past
/// the keys of the mapping, `key_column`). yaml.v3's scanner reads on to learn whether the
/// scalar is a key, and refuses that `:` (a key over several lines) before its parser stops
/// at the token. Returns the 1-based line of that `:`.
fn continued_plain_colon(text: &str, index: usize, key_column: Option<usize>) -> Option<usize> {
    let before = text.get(..index)?;
    let line_start = before.rfind('\n').map_or(0, |n| n + 1);
    // The library may point at an entry's value rather than at the `-` before it.
    let dash = if text[index..].starts_with("- ") || text[index..].starts_with("-\t") {
        Some(index)
    } else {
        before
            .trim_end_matches([' ', '\t'])
            .strip_suffix('-')
            .filter(|_| before.ends_with([' ', '\t']))
            .map(str::len)
    };
    let (start, column) = match dash {
        Some(dash) => (dash + 1, text[line_start..dash].chars().count()),
        // The scanner closes the mappings indented past the scalar before it reads it.
        None => (
            index,
            key_column?.min(text[line_start..index].chars().count()),
        ),
    };
    let mut lines = text[start..].split('\n');
    let first = lines.next()?.trim_start_matches([' ', '\t']);
    // A plain scalar starts there, and ends on its line no key and no comment.
    if first.is_empty()
        || first.starts_with([
            '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`', ',',
        ])
        || first.starts_with("- ")
        || first.starts_with("? ")
        || first.starts_with(": ")
        || has_mapping_colon(first)
        || first.contains(" #")
    {
        return None;
    }
    let line = text[..start].matches('\n').count() + 1;
    for (n, next) in lines.enumerate() {
        let content = next.trim_start_matches(' ');
        if content.is_empty() {
            continue;
        }
        let indent = next.len() - content.len();
        if indent <= column || content.starts_with('#') {
            return None;
        }
        if has_mapping_colon(content) {
            return Some(line + n + 1);
        }
        if content.contains(" #") {
            return None;
        }
    }
    None
}

/// The token at `index` after a quoted scalar that opened on an earlier line as the first token
/// of its line, in the column of the keys of the block mapping being read: a key yaml.v3
/// requires there, which may not span lines, so its scanner refuses it where it starts
/// (`could not find expected ':'`) once it reads on past that line. Returns that 1-based
/// line.
fn multiline_quoted_key(text: &str, index: usize, key_column: Option<usize>) -> Option<usize> {
    const LOOK_BACK: usize = 1000;
    let key_column = key_column?;
    let line_start = text.get(..index)?.rfind('\n').map_or(0, |n| n + 1);
    let quote = text[line_start..index]
        .chars()
        .find(|c| matches!(c, '"' | '\''))?;
    let closing_line = text[..line_start].matches('\n').count();
    let mut lines = text[..line_start].strip_suffix('\n')?.rsplit('\n');
    for back in 1..=LOOK_BACK.min(closing_line) {
        let line = lines.next()?;
        let content = line.trim_start_matches(' ');
        if let Some(after) = content.strip_prefix(quote) {
            if after.contains(quote) {
                return None;
            }
            let column = line.len() - content.len();
            return (column == key_column).then_some(closing_line - back + 1);
        }
        if line.contains(quote) {
            return None;
        }
    }
    None
}

/// Whether the token that ends at `index` on its line is a plain scalar starting with `:`
/// right after a mapping's `: ` (`{a: :b` before `: c}`).
fn colon_started_value(text: &str, index: usize) -> bool {
    let Some(before) = text.get(..index) else {
        return false;
    };
    let line = before.rsplit('\n').next().unwrap_or_default();
    let token_start = line
        .rfind([' ', '\t', ',', '[', '{'])
        .map_or(0, |at| at + 1);
    let token = &line[token_start..];
    token.len() > 1
        && token.starts_with(':')
        && line[..token_start]
            .trim_end_matches([' ', '\t'])
            .ends_with(':')
}

/// yaml.v3's line for a parser error: the 0-based line of its context (the collection being
/// parsed) unless that is 0, else the problem's; 0 is not shown.
fn parser_line(context: Option<usize>, problem: usize) -> usize {
    context.filter(|l| *l != 0).unwrap_or(problem)
}

/// yaml.v3's line for a scanner error: the context's 0-based line plus one, unless that is
/// 0, else the problem's plus one unless that is 0.
fn scanner_line(context: usize, problem: usize) -> usize {
    match (context, problem) {
        (0, 0) => 0,
        (0, problem) => problem + 1,
        (context, _) => context + 1,
    }
}

/// yaml.v3's words for a syntax error, with its rule for the line: the context's (the
/// collection being parsed) for parser errors, the position's for scanner errors, and none
/// on the first line. The library cobble reads with stops at the same place for most
/// errors but names them otherwise; where it stops elsewhere (a stray bracket, text after a
/// quoted scalar), what yaml.v3 would have met there is read from the text around it.
fn syntax_message(text: &str, failure: &Failure) -> String {
    let error = &failure.error;
    let open_flow = failure.open_flow;
    // yaml.v3 counts lines from 0 and shows none for line 0. A parser error shows the
    // line its context (the open collection) starts on, else the problem's; a scanner error
    // shows the problem's plus one.
    let at = error.marker().line() - 1;
    // Where the parser stopped, as a byte offset.
    let index = Offsets::new(text).of(error.marker());
    // The end of the stream is on a line of its own unless the text ends with a newline.
    let end = text.matches('\n').count() + usize::from(!text.is_empty() && !text.ends_with('\n'));
    let context =
        |open_flow: Option<usize>, problem: usize| parser_line(open_flow.map(|l| l - 1), problem);
    let flow_line = open_flow.map(|f| f.line);
    // The innermost block mapping or sequence being read, 0-based.
    let block = |sequence: bool| {
        failure
            .innermost
            .filter(|(seq, _)| *seq == sequence)
            .map(|(_, line)| line - 1)
    };
    let separator = if open_flow.is_some_and(|f| f.sequence) {
        "did not find expected ',' or ']'"
    } else {
        "did not find expected ',' or '}'"
    };
    // Where a flow collection expects a node and finds a bracket or comma: yaml.v3 names the
    // token's line.
    let expects_node = || matches!(previous_token_char(text, index), Some('[' | '{' | ','));
    // A token where a block collection expects its next key or entry.
    let expected_key = |problem: usize| match failure.innermost {
        Some((true, line)) => (
            "did not find expected '-' indicator",
            parser_line(Some(line - 1), problem),
        ),
        _ => (
            "did not find expected key",
            parser_line(block(false), problem),
        ),
    };
    let (message, shown) = match error.kind() {
        // A bracket where a mapping wants a key, but not in its keys' column: no key.
        _ if open_flow.is_some_and(|f| f.off_key) => (
            "did not find expected key",
            parser_line(block(false), flow_line.unwrap_or(at + 1) - 1),
        ),
        // A `[` where a key belongs is a key that never gets its `:`.
        ErrorKind::UnclosedFlowCollection { .. } if open_flow.is_some_and(|f| f.as_key) => {
            ("could not find expected ':'", flow_line.unwrap_or(at + 1))
        }
        ErrorKind::ExpectedBlockMappingKey => {
            match continued_plain_colon(text, index, failure.key_column) {
                // yaml.v3's scanner reads the scalar on before its parser stops there.
                Some(line) => ("mapping values are not allowed in this context", line),
                None => ("did not find expected key", parser_line(block(false), at)),
            }
        }
        ErrorKind::ExpectedBlockSequenceEntry => (
            "did not find expected '-' indicator",
            parser_line(block(true), at),
        ),
        // The library points at the key; on the first line yaml.v3 names where it noticed,
        // the next token.
        ErrorKind::SimpleKeyExpected => {
            let next = text
                .split('\n')
                .enumerate()
                .skip(at + 1)
                .find(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
                .map_or(end, |(n, _)| n);
            ("could not find expected ':'", scanner_line(at, next))
        }
        ErrorKind::InvalidBlockScalarHeader => (
            "did not find expected comment or line break",
            scanner_line(at, at),
        ),
        ErrorKind::UnknownAnchor => {
            // After the `*`.
            let name: String = text
                .get(index..)
                .unwrap_or_default()
                .chars()
                .skip(1)
                .take_while(|c| !c.is_whitespace() && !",[]{}".contains(*c))
                .collect();
            return format!("unknown anchor '{name}' referenced");
        }
        // A closing bracket with none open: where a value belongs it is no node; after one,
        // no key; at the start of a line before a `key:`, that key can be no simple key.
        ErrorKind::MisplacedFlowCollectionEnd => {
            let line_start = text
                .get(..index)
                .and_then(|before| before.rsplit('\n').next())
                .is_some_and(|before| before.trim().is_empty());
            // After the bracket, which is one byte.
            if line_start && has_mapping_colon(rest_of_line(text, index + 1)) {
                (
                    "mapping values are not allowed in this context",
                    scanner_line(at, at),
                )
            } else if matches!(previous_token_char(text, index), Some(':' | '-' | '?')) {
                ("did not find expected node content", at)
            } else {
                expected_key(at)
            }
        }
        // Text after a closing quote on its line: a `key:` there is a mapping value where no
        // simple key may start; anything else is where the mapping wants its next key.
        ErrorKind::InvalidTrailingDoubleQuotedScalar
        | ErrorKind::InvalidTrailingSingleQuotedScalar
            if open_flow.is_none() =>
        {
            if let Some(line) = multiline_quoted_key(text, index, failure.key_column) {
                ("could not find expected ':'", line)
            } else if has_mapping_colon(rest_of_line(text, index)) {
                (
                    "mapping values are not allowed in this context",
                    scanner_line(at, at),
                )
            } else if let Some(line) = continued_plain_colon(text, index, failure.key_column) {
                ("mapping values are not allowed in this context", line)
            } else {
                expected_key(at)
            }
        }
        // The library points at the bracket opened; yaml.v3 stops at the one that closes it:
        // where a node is expected it is no node, else not the separator.
        ErrorKind::MismatchedFlowCollectionEnd { open, .. } => {
            let (close, close_line) = closing_bracket(text, index);
            if matches!(previous_token_char(text, close), Some('[' | '{' | ',')) {
                ("did not find expected node content", close_line)
            } else if *open == '[' {
                (
                    "did not find expected ',' or ']'",
                    parser_line(Some(at), close_line),
                )
            } else {
                (
                    "did not find expected ',' or '}'",
                    parser_line(Some(at), close_line),
                )
            }
        }
        ErrorKind::BlockEntryInFlowCollection if expects_node() => {
            ("did not find expected node content", at)
        }
        ErrorKind::UnexpectedEofImplicitFlowMapping => ("did not find expected node content", at),
        ErrorKind::ExpectedFlowSequenceSeparator => {
            ("did not find expected ',' or ']'", context(flow_line, at))
        }
        // A value that starts with `:` (`{a: :b: c}`): in a flow collection yaml.v3 reads
        // that `:` as a value indicator where a node belongs.
        ErrorKind::ExpectedFlowMappingSeparator if colon_started_value(text, index) => {
            ("did not find expected node content", at)
        }
        ErrorKind::ExpectedFlowMappingSeparator => (separator, context(flow_line, at)),
        // yaml.v3 finds these at the end of the stream: a node where one is still expected,
        // else the separator.
        ErrorKind::UnclosedFlowCollection { .. }
            if matches!(
                previous_token_char(text, text.len()),
                Some('[' | '{' | ',' | ':')
            ) =>
        {
            ("did not find expected node content", end)
        }
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
        ErrorKind::MappingValueNotAllowed => {
            match multiline_quoted_key(text, index, failure.key_column) {
                Some(line) => ("could not find expected ':'", line),
                None => (
                    "mapping values are not allowed in this context",
                    scanner_line(at, at),
                ),
            }
        }
        // A tab in the indentation of the line a plain scalar would run on to. On the first
        // line yaml.v3 names the tab's line, where its scanner stopped.
        ErrorKind::TabInPlainScalar => {
            let tab_line = text
                .split('\n')
                .enumerate()
                .skip(at + 1)
                .find(|(_, l)| {
                    let content = l.trim_start_matches([' ', '\t']);
                    !content.is_empty() && l[..l.len() - content.len()].contains('\t')
                })
                .map_or(at, |(n, _)| n);
            (
                "found a tab character that violates indentation",
                scanner_line(at, tab_line),
            )
        }
        ErrorKind::TabNotAllowed
        | ErrorKind::TabInIndentation
        | ErrorKind::UnexpectedCharacter { .. } => (
            "found character that cannot start any token",
            scanner_line(at, at),
        ),
        // Inside a flow collection, yaml.v3 stops at the separator it expected.
        _ if open_flow.is_some() => (separator, context(flow_line, at)),
        // Words yaml.v3 would choose differently; the line is right. yaml.v3 shows the
        // problem without its context (`while scanning a directive, `).
        _ => {
            let info = error.info();
            let problem = info
                .strip_prefix("while ")
                .and_then(|rest| rest.split_once(", "))
                .map_or(info.as_str(), |(_, problem)| problem);
            return format!("line {}: {problem}", at + 1);
        }
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
/// Pebble's refusal of a layer that gives one of its own sections no value at all
/// (`services:` and nothing after it): Pebble writes the empty section out again and decodes
/// nothing, which yaml.v3 calls `EOF`. A `~`, `null`, tag or anchor is a value and is taken.
/// Cheap on layers without such a line: the document is read only when one is there.
pub(crate) fn empty_section(label: &str, text: &str) -> Option<PlanError> {
    let candidate = text.split('\n').any(|line| {
        line.split_once(':').is_some_and(|(key, rest)| {
            let rest = rest.trim_start_matches([' ', '\t']);
            // A first line indented indents the document's keys.
            let key = key.trim_start_matches(' ');
            BUILTIN_SECTIONS.contains(&key) && (rest.is_empty() || rest.starts_with('#'))
        })
    });
    if !candidate {
        return None;
    }
    let mut depth = 0usize;
    let mut key: Option<String> = None;
    let mut keys: Vec<String> = Vec::new();
    let mut empty = None;
    for next in Parser::new_from_str_with_options(text, parser_options()) {
        let (event, span) = next.ok()?;
        match event {
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                depth += 1;
                if depth == 2 {
                    key = None;
                }
            }
            Event::MappingEnd | Event::SequenceEnd => {
                depth = depth.saturating_sub(1);
                if depth == 1 {
                    key = None;
                }
            }
            Event::Scalar(value, style, anchor, tag) if depth == 1 => match key.take() {
                None => {
                    keys.push(value.to_string());
                    key = Some(value.into_owned());
                }
                // The library gives a missing value as `~` that takes no room.
                Some(name)
                    if BUILTIN_SECTIONS.contains(&name.as_str())
                        && span.start.index() == span.end.index()
                        && style == ScalarStyle::Plain
                        && anchor == 0
                        && tag.is_none()
                        && empty.is_none() =>
                {
                    empty = Some(name);
                }
                Some(_) => {}
            },
            Event::Alias(_) if depth == 1 => {
                key = if key.is_some() {
                    None
                } else {
                    Some(String::new())
                };
            }
            Event::DocumentEnd => break,
            _ => {}
        }
    }
    // A syntax error or a key given twice is refused first, in its own words.
    let mut sorted = keys.clone();
    sorted.sort();
    sorted.dedup();
    if sorted.len() != keys.len() {
        return None;
    }
    empty.map(|name| PlanError::Parse {
        label: label.to_owned(),
        section: Some(name),
        line: None,
        message: "EOF".to_owned(),
    })
}

/// The sections Pebble decodes itself.
const BUILTIN_SECTIONS: [&str; 5] = [
    "summary",
    "description",
    "services",
    "checks",
    "log-targets",
];

/// Where the first document of `text` ends, when something follows it. yaml.v3 reads a
/// layer's first document and stops there: a second document (after `---` or `...`), or text
/// that could not start one (`log-targets:` at the margin after a first line indented by a
/// space), is never read, so Pebble takes the layer as its first document alone. `None` when
/// the text is one document, or the first one cannot be read to its end.
pub(crate) fn first_document_end(text: &str) -> Option<usize> {
    let mut offsets = Offsets::new(text);
    let mut events = Parser::new_from_str_with_options(text, parser_options());
    let mut end = None;
    for next in events.by_ref() {
        let (event, span) = next.ok()?;
        if matches!(event, Event::DocumentEnd) {
            end = Some(offsets.of(&span.start));
            break;
        }
    }
    let end = end?;
    match events.next() {
        None | Some(Ok((Event::StreamEnd, _))) => None,
        Some(_) => Some(end),
    }
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
        Err(ReadError::Syntax(failure)) => {
            return Some(whole(format!("yaml: {}", syntax_message(text, &failure))));
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
    let duplicates = duplicate_keys(&doc, sections, |line| line);
    if !duplicates.is_empty() {
        if aliasing_only {
            return None;
        }
        return Some(whole(format!(
            "yaml: unmarshal errors:\n  {}",
            duplicates.join("\n  ")
        )));
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
            lines: SectionLines::new(&doc, *value, &blank),
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

/// For each 1-based line number (0 is no line), whether the line has nothing but white space.
fn blank_lines(text: &str) -> Vec<bool> {
    std::iter::once(false)
        .chain(text.lines().map(|l| l.trim().is_empty()))
        .collect()
}

/// How yaml.v3 numbers the lines of a section that Pebble writes out again: from the
/// section's first line, without the blank lines it drops, and with a scalar value written
/// below its key moved up to the key's line (the lines between dropped, except a block
/// scalar's, whose text follows its header as before). Worked out once per section, so that
/// each error's line is found at once, however many errors and lines there are.
struct SectionLines {
    /// The line the section's value starts on: line 1 of the section as Pebble rewrites it.
    first_line: usize,
    /// For each 1-based line, how many lines before it are dropped.
    dropped_before: Vec<usize>,
    /// The lines of the scalar values that move, and their keys' lines.
    moved: HashMap<usize, usize>,
}

impl SectionLines {
    fn new(doc: &Doc<'_>, section: usize, blank: &[bool]) -> SectionLines {
        let moved = moved_values(doc, section);
        // Lines dropped, as a difference array over the ranges that moved values drop.
        let mut starts = vec![0isize; blank.len() + 1];
        for &(key, value, drops) in &moved {
            if drops && value < blank.len() {
                starts[key + 1] += 1;
                starts[value + 1] -= 1;
            }
        }
        let mut dropped_before = Vec::with_capacity(blank.len() + 1);
        let (mut dropped, mut open) = (0, 0isize);
        for (line, is_blank) in blank.iter().enumerate() {
            dropped_before.push(dropped);
            open += starts[line];
            if *is_blank || open > 0 {
                dropped += 1;
            }
        }
        dropped_before.push(dropped);
        SectionLines {
            first_line: doc.node(section).line,
            dropped_before,
            moved: moved
                .into_iter()
                .map(|(key, value, _)| (value, key))
                .collect(),
        }
    }

    /// The line that text line `line` is on in the section as yaml.v3 writes it out again.
    fn line(&self, line: usize) -> usize {
        let line = self.moved.get(&line).copied().unwrap_or(line);
        let before = |line: usize| {
            let last = self.dropped_before.len() - 1;
            self.dropped_before[line.min(last)]
        };
        let dropped = before(line).saturating_sub(before(self.first_line));
        (line.saturating_sub(self.first_line) + 1).saturating_sub(dropped)
    }
}

/// The mappings' scalar values written on a later line than their key, under `section`, as
/// (key's line, value's line, whether the lines between go): yaml.v3 writes them out again
/// on the key's line, and a block scalar's text (whose node starts on the line after its
/// header) after it as before. Walked without recursion; an alias is not followed, as
/// yaml.v3 writes it out as an alias.
fn moved_values(doc: &Doc<'_>, section: usize) -> Vec<(usize, usize, bool)> {
    let mut moved = Vec::new();
    let mut pending = vec![section];
    while let Some(index) = pending.pop() {
        match &doc.node(index).kind {
            Kind::Scalar { .. } | Kind::Alias(..) => {}
            Kind::Seq(items) => pending.extend(items.iter().rev()),
            Kind::Map(pairs) => {
                for (key, value) in pairs.iter().rev() {
                    let (key, node) = (doc.node(*key), doc.node(*value));
                    match node.kind {
                        Kind::Scalar { block, .. } if node.line > key.line => {
                            moved.push((key.line, node.line, !block))
                        }
                        _ => pending.push(*value),
                    }
                }
            }
        }
    }
    moved
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
    // yaml.v3 compares every key with each later one. The keys are grouped by their text
    // here, so that only equal ones meet, in the same order.
    let text = |key: usize| match &doc.node(key).kind {
        Kind::Scalar { value, .. } => Some(&**value),
        _ => None,
    };
    let mut groups: HashMap<&str, (Vec<usize>, usize)> = HashMap::new();
    for (key, _) in pairs {
        if let Some(value) = text(*key) {
            groups.entry(value).or_default().0.push(*key);
        }
    }
    let mut errors = Vec::new();
    if groups.values().all(|(keys, _)| keys.len() == 1) {
        return errors;
    }
    for (first, _) in pairs {
        let Some(value) = text(*first) else {
            continue;
        };
        let Some((keys, seen)) = groups.get_mut(value) else {
            continue;
        };
        *seen += 1;
        for later in &keys[*seen..] {
            if errors.len() == MAX_DUPLICATES_LISTED {
                return errors;
            }
            errors.push(format!(
                "line {}: mapping key {} already defined at line {}",
                line(doc.node(*later).line),
                crate::go_quote(value),
                line(doc.node(*first).line)
            ));
        }
    }
    errors
}

/// yaml.v3 lists every pair of equal keys in a mapping, which for a key given n times is
/// n(n-1)/2 lines; the list stops here, far past any layer a person writes.
const MAX_DUPLICATES_LISTED: usize = 1000;

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
        ("type", GoType::Cobble),
        ("readiness", GoType::Cobble),
        ("rlimits", GoType::Cobble),
        ("resources", GoType::Cobble),
        ("sockets", GoType::Cobble),
        ("watchdog", GoType::Cobble),
        ("schedule", GoType::Cobble),
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

/// The fields of an entry of `section` (`services`, `checks`, `log-targets`) as this
/// table knows them, in order, each with whether it is cobble's own (`GoType::Cobble`): a
/// field Pebble's plan does not have. Empty for any other name.
pub(crate) fn go_fields(section: &str) -> Vec<(&'static str, bool)> {
    let ty = match section {
        "services" => &SERVICE,
        "checks" => &CHECK,
        "log-targets" => &LOG_TARGET,
        _ => return Vec::new(),
    };
    let GoType::Struct(_, fields) = ty else {
        unreachable!("an entry is a struct");
    };
    fields
        .iter()
        .map(|(name, ty)| (*name, matches!(ty, GoType::Cobble)))
        .collect()
}

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
    lines: SectionLines,
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
    /// The line a node is on in the section as yaml.v3 writes it out again.
    fn line(&self, line: usize) -> usize {
        self.lines.line(line)
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
            (GoType::Int, Kind::Scalar { value, tag, .. }) => {
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
    matches!(&doc.node(key).kind, Kind::Scalar { value, tag, .. } if value == "<<" && tag == "!!merge")
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

    /// Broken layers with Pebble v1.32.1's refusal (yaml.v3's words and line), after
    /// `cannot parse layer "x"`; `""` where Pebble takes the layer. yaml.v3 stops elsewhere
    /// than the library cobble reads with for many of these, and words them otherwise.
    #[test]
    fn syntax_errors_are_worded_and_placed_as_yaml_v3_does() {
        let cases: &[(&str, &str)] = &[
            (
                "services:\n  a:\n command: x\n  - y",
                ": yaml: line 2: did not find expected key",
            ),
            (
                "services:\n  a:\n    override: replace\n    command: x\n  - y\n",
                ": yaml: line 1: did not find expected key",
            ),
            (
                "services: {a: {override: replace}}\n  - z\n",
                ": yaml: line 1: did not find expected key",
            ),
            (
                "services:\n  a:\n    on-check-failure\n      up: restart\n",
                ": yaml: line 4: mapping values are not allowed in this context",
            ),
            (
                "services:\n  a:\n    command\n",
                " section \"services\": yaml: unmarshal errors:\n  line 1: cannot unmarshal !!str `command` into plan.Service",
            ),
            (
                "checks:\n  chk:\n    - override: replace\n    level: alive\n",
                ": yaml: line 2: did not find expected '-' indicator",
            ),
            (
                "checks:\n  - chk:\n    override: replace\n",
                " section \"checks\": yaml: unmarshal errors:\n  line 1: cannot unmarshal !!seq into map[string]*plan.Check",
            ),
            (
                "services:\n  a:\n    command: {a: b}}\n",
                ": yaml: line 2: did not find expected key",
            ),
            ("services: {a: b}}\n", ": yaml: did not find expected key"),
            (
                "services:\n  a:\n    command: }\n",
                ": yaml: line 2: did not find expected node content",
            ),
            (
                "services:\n}  a:\n    command: x\n",
                ": yaml: line 2: mapping values are not allowed in this context",
            ),
            ("services: \"a\"b\n", ": yaml: did not find expected key"),
            (
                "services:\n  a:\n    environment:\n      A: \"1\" B: two\n",
                ": yaml: line 4: mapping values are not allowed in this context",
            ),
            (
                "x: 'q\nservices: {a: 'b'}\n",
                ": yaml: line 1: did not find expected key",
            ),
            (
                "services: {\n",
                ": yaml: line 1: did not find expected node content",
            ),
            (
                "services: {a: {command: x}, b: {override:",
                ": yaml: line 1: did not find expected node content",
            ),
            (
                "services: [a, {b: c]\n",
                ": yaml: did not find expected ',' or '}'",
            ),
            (
                "checks:\n  chk:\n    level: {a, [}\n",
                ": yaml: line 2: did not find expected node content",
            ),
            (
                "  *b\nservices: {}\n",
                ": yaml: unknown anchor 'b' referenced",
            ),
            (
                "services:\n  a:\n    command: > folded\n",
                ": yaml: line 3: did not find expected comment or line break",
            ),
            (
                "summary: | multi\n  line\n",
                ": yaml: did not find expected comment or line break",
            ),
            (
                "services: [a,,b]\n",
                ": yaml: did not find expected node content",
            ),
            (
                "services:\n  a:\n    command: x\n    requires: [\n    user: root\n",
                ": yaml: line 3: did not find expected ',' or ']'",
            ),
            (
                "checks:\n  chk:\n    level: alive\n [   exec:\n      command: x\n",
                ": yaml: line 3: did not find expected key",
            ),
            (
                "services:\n  a:\n    override: replace\n    command: [\n    - user: root\n",
                ": yaml: line 4: did not find expected node content",
            ),
            (
                "services:\n  web:\n    over",
                " section \"services\": yaml: unmarshal errors:\n  line 1: cannot unmarshal !!str `over` into plan.Service",
            ),
            (
                "services:\n  web:\n    command: >\n      folded\n      text\n    user: root\n    user: root\n",
                " section \"services\": yaml: unmarshal errors:\n  line 6: mapping key \"user\" already defined at line 5",
            ),
            ("services:\n", " section \"services\": EOF"),
            ("summary:\n", " section \"summary\": EOF"),
            ("checks: # none\n", " section \"checks\": EOF"),
            ("services: ~\n", ""),
            (
                "services:\nservices:\n",
                ": yaml: unmarshal errors:\n  line 2: mapping key \"services\" already defined at line 1",
            ),
            (
                "services: {}\nservices: {}\nservices: {}\n",
                ": yaml: unmarshal errors:\n  line 2: mapping key \"services\" already defined at line 1\n  line 3: mapping key \"services\" already defined at line 1\n  line 3: mapping key \"services\" already defined at line 2",
            ),
            // A plain scalar where a key belongs, running on to a `key:` below.
            (
                "a:\n  b:\n    c: \"x\ny\"1s\n    d: 3\n",
                ": yaml: line 5: mapping values are not allowed in this context",
            ),
            (
                "a:\n  b:\n    c:\n b\n  d:\n",
                ": yaml: line 5: mapping values are not allowed in this context",
            ),
            (
                "a:\n  b:\n    c:\n b\nd: 1\n",
                ": yaml: line 3: did not find expected key",
            ),
            // A tab in the indentation of the line a plain value would run on to.
            (
                "a:\n  b: enabled\n  \t  c: 1\n",
                ": yaml: line 2: found a tab character that violates indentation",
            ),
            (
                "a: x\n\t  c: 1\n",
                ": yaml: line 2: found a tab character that violates indentation",
            ),
            (
                "a:\n  b: x\n\n\t  c: 1\n",
                ": yaml: line 2: found a tab character that violates indentation",
            ),
            (
                "a: |\n  x\nb: y\n\t c: 1\n",
                ": yaml: line 3: found a tab character that violates indentation",
            ),
            (
                "a: 1\n%\n",
                ": yaml: line 2: could not find expected directive name",
            ),
            // A comment after the bracket or comma: the end is where a node is expected.
            (
                "s: {a: { #o: r, c: 1}}\n",
                ": yaml: line 1: did not find expected node content",
            ),
            (
                "s: [a, # x\n",
                ": yaml: line 1: did not find expected node content",
            ),
            (
                "s: {a: b # c\n",
                ": yaml: line 1: did not find expected ',' or '}'",
            ),
            (
                "a:\n  x: {com: :mand: 1}\n",
                ": yaml: line 1: did not find expected node content",
            ),
            // A quoted key over several lines, where the mapping requires a key.
            (
                "a:\n  b: 1\n  \"x\ny\": 2\n",
                ": yaml: line 3: could not find expected ':'",
            ),
            (
                "a:\n  b: 1\n  \"x\ny\"  c: 2\n",
                ": yaml: line 3: could not find expected ':'",
            ),
            (
                "a: 1\n'x\ny': 2\n",
                ": yaml: line 2: could not find expected ':'",
            ),
            (
                "a: 1\n\"x\n\n\ny\": 2\n",
                ": yaml: line 2: could not find expected ':'",
            ),
            (
                "a:\n  b: 1\n  \"x\n  y\n  z\": 2\n",
                ": yaml: line 3: could not find expected ':'",
            ),
            (
                "a:\n  b: 1\n  \"x\ny\" z\n",
                ": yaml: line 3: could not find expected ':'",
            ),
            // Not where a key is required: the `:` is refused.
            (
                "\"x\ny\": 1\n",
                ": yaml: line 2: mapping values are not allowed in this context",
            ),
            (
                "a:\n  - \"x\n  y\": 2\n",
                ": yaml: line 3: mapping values are not allowed in this context",
            ),
            (
                "a:\n  b: 1\n  c: \"x\ny\": 2\n",
                ": yaml: line 4: mapping values are not allowed in this context",
            ),
            // A `-` where a key belongs, whose value runs on to a `key:` below.
            (
                "a:\n  b:\n    c:\n- d\n    e: 1\n",
                ": yaml: line 5: mapping values are not allowed in this context",
            ),
            (
                "a: 1\n- d\n  e: 1\n",
                ": yaml: line 3: mapping values are not allowed in this context",
            ),
            (
                "a: 1\n- d\n\n  x\n  e: 1\n",
                ": yaml: line 5: mapping values are not allowed in this context",
            ),
            ("a: 1\n- d\n", ": yaml: line 1: did not find expected key"),
            (
                "a: 1\n- d\ne: 1\n",
                ": yaml: line 1: did not find expected key",
            ),
            (
                "a: 1\n- d # c\n  e: 1\n",
                ": yaml: line 1: did not find expected key",
            ),
            (
                "a:\n  b:\n- d\n  e\n",
                ": yaml: line 2: did not find expected key",
            ),
            // yaml.v3 reads the first document alone: what follows it is never read.
            ("summary: a\n---\nfoo: bar\n", ""),
            ("summary: a\n...\nfoo: bar\n", ""),
            (" summary: a\ndescription: b\n", ""),
            (" summary: a\nfoo: [\n", ""),
            (
                "  services:\n    a:\n      override: replace\n      command: sleep 1\nchecks: 1\n",
                "",
            ),
            (" services:\nsummary: x\n", " section \"services\": EOF"),
            (
                " services:\n   a: [\nsummary: x\n",
                ": yaml: line 1: did not find expected ',' or ']'",
            ),
            ("summary: a\n---\nsummary: [\n", ""),
            ("summary: a\n--- [\n", ""),
        ];
        for (text, want) in cases {
            let got = match crate::Layer::parse(1, "x", text) {
                Ok(_) => String::new(),
                Err(e) => e
                    .to_string()
                    .strip_prefix("cannot parse layer \"x\"")
                    .map(str::to_owned)
                    .unwrap_or_else(|| e.to_string()),
            };
            assert_eq!(got, *want, "{text:?}");
        }
    }

    /// A marker without its byte offset is found by walking on from the last one, forwards
    /// or (starting again) backwards, and past the end is the end.
    #[test]
    fn offsets_of_markers_without_bytes_are_counted_in_characters() {
        use super::{Marker, Offsets};
        let text = "aé…b\nü{";
        let mut offsets = Offsets::new(text);
        let at = |chars: usize| Marker::new(chars, 1, 0);
        let found: Vec<usize> = [0, 2, 3, 6, 1, 7, 9, 4]
            .into_iter()
            .map(|chars| offsets.of(&at(chars)))
            .collect();
        assert_eq!(found, [0, 3, 6, 10, 1, 11, 11, 7]);
        assert_eq!(&text[10..], "{");
        let with_bytes = at(6).with_byte_offset(Some(10));
        assert_eq!(Offsets::new(text).of(&with_bytes), 10);
    }
}
