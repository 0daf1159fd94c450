//! A quick reader for the plain block YAML that layers are almost always written in.
//!
//! Parsing is most of what a daemon does at launch: a layer of 3000 services is 450 KB of
//! YAML, and the full YAML library reads it at about 10 MB/s. Layers use a small part of
//! YAML: block mappings of plain keys, one-line scalars, block and one-line flow sequences,
//! comments. This module reads exactly that part into a tree and feeds the tree to the same
//! `Deserialize` implementations the full parser feeds, so the layer's meaning is defined in
//! one place.
//!
//! It answers only when it is sure: anything outside that part (anchors, tags, block or
//! multi-line scalars, escapes, flow mappings, tabs, duplicate keys, a scalar whose type
//! YAML would infer) and every error make [`deserialize`] return `None`, and the caller then
//! parses with the full library, whose answer (value or error, with its wording and line)
//! is the one users see. Scalars whose meaning depends on YAML's type inference (a number, a
//! duration, a boolean) are handed to the full library one at a time, so they mean exactly
//! what they mean there.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// Deserializes `input` with `seed` if it is in the part of YAML this module reads; `None`
/// when it is not, or when deserializing fails (the full parser then says why).
pub(crate) fn deserialize<'de, S: DeserializeSeed<'de>>(
    input: &'de str,
    seed: S,
    options: fn() -> serde_saphyr::Options,
) -> Option<S::Value> {
    let node = parse(input)?;
    seed.deserialize(NodeDeserializer { node, options }).ok()
}

// ---------------------------------------------------------------------------------------------
// The tree

#[derive(Debug, PartialEq)]
enum Node<'a> {
    Scalar(Scalar<'a>),
    Seq(Vec<Node<'a>>),
    Map(Vec<(Scalar<'a>, Node<'a>)>),
}

#[derive(Debug, PartialEq)]
struct Scalar<'a> {
    /// The scalar as written, quotes included: a YAML document of its own that means the
    /// same, for the scalars whose meaning the full library decides.
    raw: &'a str,
    /// Its value: the text, unquoted.
    value: Cow<'a, str>,
    plain: bool,
}

impl Scalar<'_> {
    /// An empty value (`key:` with nothing under it), which YAML reads as null.
    const EMPTY: Scalar<'static> = Scalar {
        raw: "",
        value: Cow::Borrowed(""),
        plain: true,
    };

    /// Plain text YAML reads as null (`~`, `null`, empty).
    fn is_null(&self) -> bool {
        self.plain && matches!(&*self.value, "" | "~" | "null" | "Null" | "NULL")
    }
}

// ---------------------------------------------------------------------------------------------
// Reading

/// One line with content: its indentation and its text without it (comments still in).
struct Line<'a> {
    indent: usize,
    text: &'a str,
}

fn parse(input: &str) -> Option<Node<'_>> {
    if !input.chars().all(simple_char) {
        return None;
    }
    let mut lines = Vec::new();
    let mut started = false;
    for raw in input.split('\n') {
        let text = raw.trim_start_matches(' ');
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        if !started && raw == "---" {
            started = true;
            continue;
        }
        started = true;
        if raw.starts_with("---") || raw.starts_with("...") || raw.starts_with('%') {
            return None;
        }
        lines.push(Line {
            indent: raw.len() - text.len(),
            text: text.trim_end_matches(' '),
        });
    }
    if lines.first()?.indent != 0 {
        return None;
    }
    let mut reader = Reader {
        lines,
        next: 0,
        depth: 0,
    };
    let node = reader.block(0)?;
    (reader.next == reader.lines.len()).then_some(node)
}

/// Characters this reader takes as they are: printable ones, no tabs or carriage returns,
/// none of the line breaks YAML 1.1 adds, no byte order mark.
fn simple_char(c: char) -> bool {
    match c {
        '\n' | ' '..='~' => true,
        '\u{0}'..='\u{a0}' => c == '\u{a0}',
        '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}' => false,
        _ => true,
    }
}

/// How deep this reader nests block mappings. Layers need four levels (checks, a check,
/// `http`, `headers`); anything deeper is left to the full parser, which bounds its own depth,
/// so no depth a layer asks for costs this reader more than this much recursion.
const MAX_DEPTH: usize = 32;

struct Reader<'a> {
    lines: Vec<Line<'a>>,
    next: usize,
    /// The block collections open.
    depth: usize,
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Option<&Line<'a>> {
        self.lines.get(self.next)
    }

    /// The block collection whose first line is the next one, at `indent`.
    fn block(&mut self, indent: usize) -> Option<Node<'a>> {
        let line = self.peek()?;
        if line.indent != indent || self.depth == MAX_DEPTH {
            return None;
        }
        let item = is_item(line.text);
        self.depth += 1;
        let node = if item {
            self.sequence(indent)
        } else {
            self.mapping(indent)
        };
        self.depth -= 1;
        node
    }

    fn sequence(&mut self, indent: usize) -> Option<Node<'a>> {
        let mut items = Vec::new();
        while let Some(line) = self.peek() {
            // A sequence at its key's indentation ends where the next key starts.
            if line.indent < indent || (line.indent == indent && !is_item(line.text)) {
                break;
            }
            if line.indent > indent {
                return None;
            }
            let text = line.text[1..].trim_start_matches(' ');
            self.next += 1;
            // `- key: value` and a nested block under `-` are outside this reader's part.
            if text.is_empty() || self.peek().is_some_and(|l| l.indent > indent) {
                return None;
            }
            items.push(value(text)?);
        }
        Some(Node::Seq(items))
    }

    fn mapping(&mut self, indent: usize) -> Option<Node<'a>> {
        let mut entries: Vec<(Scalar<'a>, Node<'a>)> = Vec::new();
        while let Some(line) = self.peek() {
            if line.indent < indent {
                break;
            }
            if line.indent > indent {
                return None;
            }
            let (key, rest) = split_key(line.text)?;
            if key.is_null() {
                return None;
            }
            self.next += 1;
            let rest = rest.trim_start_matches(' ');
            let node = if rest.is_empty() || rest.starts_with('#') {
                match self.peek() {
                    Some(next) if next.indent > indent => self.block(next.indent)?,
                    // A sequence may sit at its key's indentation.
                    Some(next) if next.indent == indent && is_item(next.text) => {
                        self.sequence(indent)?
                    }
                    _ => Node::Scalar(Scalar::EMPTY),
                }
            } else {
                // A more indented line after a one-line value continues it (or is an error):
                // the full parser decides.
                if self.peek().is_some_and(|l| l.indent > indent) {
                    return None;
                }
                value(rest)?
            };
            entries.push((key, node));
        }
        // A key given twice is an error the full parser words.
        let mut keys: Vec<&str> = entries.iter().map(|(key, _)| &*key.value).collect();
        keys.sort_unstable();
        if keys.windows(2).any(|pair| pair[0] == pair[1]) {
            return None;
        }
        Some(Node::Map(entries))
    }
}

fn is_item(text: &str) -> bool {
    text == "-" || text.starts_with("- ")
}

/// Splits `key: rest` (or `key:` at the end of the line) with a plain key.
fn split_key(text: &str) -> Option<(Scalar<'_>, &str)> {
    let end = text
        .match_indices(':')
        .map(|(i, _)| i)
        .find(|&i| text[i + 1..].is_empty() || text[i + 1..].starts_with(' '))?;
    let key = &text[..end];
    if !plain_block_text(key) {
        return None;
    }
    Some((plain(key), &text[end + 1..]))
}

/// A value on a line of its own: a scalar or a one-line flow collection.
fn value(text: &str) -> Option<Node<'_>> {
    let text = text.trim_start_matches(' ');
    if let Some(inner) = text.strip_prefix('[') {
        let (inner, rest) = inner.split_once(']')?;
        if !strip_comment(rest)?.is_empty() {
            return None;
        }
        return flow_sequence(inner).map(Node::Seq);
    }
    if let Some(rest) = text.strip_prefix("{}") {
        return strip_comment(rest)?
            .is_empty()
            .then_some(Node::Map(Vec::new()));
    }
    if text.starts_with(['\'', '"']) {
        let (scalar, rest) = quoted(text)?;
        return strip_comment(rest)?
            .is_empty()
            .then_some(Node::Scalar(scalar));
    }
    // In plain text, `#` starts a comment only after a space.
    let text = match text.as_bytes().windows(2).position(|pair| pair == b" #") {
        Some(i) => &text[..i],
        None => text,
    }
    .trim_end_matches(' ');
    plain_block_text(text).then(|| Node::Scalar(plain(text)))
}

fn flow_sequence(inner: &str) -> Option<Vec<Node<'_>>> {
    let mut items = Vec::new();
    if inner.trim_matches(' ').is_empty() {
        return Some(items);
    }
    for item in inner.split(',') {
        let item = item.trim_matches(' ');
        if item.starts_with(['\'', '"']) {
            let (scalar, rest) = quoted(item)?;
            if !rest.is_empty() {
                return None;
            }
            items.push(Node::Scalar(scalar));
        } else {
            // Empty items (`[a,,b]`, a trailing comma) and flow indicators: the full parser.
            if item.is_empty()
                || item.contains([':', '#', '[', ']', '{', '}'])
                || !plain_start(item)
            {
                return None;
            }
            items.push(Node::Scalar(plain(item)));
        }
    }
    Some(items)
}

/// A quoted scalar that ends on its line, without escapes; and what follows it.
fn quoted(text: &str) -> Option<(Scalar<'_>, &str)> {
    let quote = text.chars().next()?;
    let body = &text[1..];
    let (value, len) = if quote == '"' {
        let end = body.find('"')?;
        if body[..end].contains('\\') {
            return None;
        }
        (Cow::Borrowed(&body[..end]), end + 2)
    } else {
        // '' is a quote inside single quotes.
        let mut end = 0;
        let mut owned: Option<String> = None;
        loop {
            let at = end + body[end..].find('\'')?;
            if body[at + 1..].starts_with('\'') {
                owned
                    .get_or_insert_with(String::new)
                    .push_str(&body[end..=at]);
                end = at + 2;
            } else {
                let value = match owned {
                    Some(mut s) => {
                        s.push_str(&body[end..at]);
                        Cow::Owned(s)
                    }
                    None => Cow::Borrowed(&body[..at]),
                };
                break (value, at + 2);
            }
        }
    };
    let scalar = Scalar {
        raw: &text[..len],
        value,
        plain: false,
    };
    Some((scalar, &text[len..]))
}

fn plain(text: &str) -> Scalar<'_> {
    Scalar {
        raw: text,
        value: Cow::Borrowed(text),
        plain: true,
    }
}

/// What follows a quoted scalar or a flow collection: nothing but spaces and a comment (`#`
/// after a space), or `None`.
fn strip_comment(text: &str) -> Option<&str> {
    let text = match text.find('#') {
        Some(i) if text[..i].ends_with(' ') => &text[..i],
        Some(_) => return None,
        None => text,
    };
    Some(text.trim_end_matches(' '))
}

/// Plain text in block context this reader takes as it is: it starts with no indicator,
/// and holds no `: ` or ` #` (which would make it something else or an error).
fn plain_block_text(text: &str) -> bool {
    // One pass over the bytes: `str::contains` is slow on strings this short.
    plain_start(text)
        && !text.ends_with(':')
        && !text
            .as_bytes()
            .windows(2)
            .any(|pair| pair == b": " || pair == b" #")
}

fn plain_start(text: &str) -> bool {
    text.chars()
        .next()
        .is_some_and(|c| !c.is_whitespace() && !"-?:,[]{}#&*!|>'\"%@`".contains(c))
}

// ---------------------------------------------------------------------------------------------
// Deserializing

/// Any failure: the caller falls back to the full parser.
#[derive(Debug)]
struct Fallback;

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("outside the simple YAML reader's part")
    }
}

impl std::error::Error for Fallback {}

impl de::Error for Fallback {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Fallback
    }
}

struct NodeDeserializer<'a> {
    node: Node<'a>,
    options: fn() -> serde_saphyr::Options,
}

impl<'de> NodeDeserializer<'de> {
    /// Hands a scalar to the full library, as a document of its own: for what YAML's type
    /// inference decides (numbers, booleans, durations read from any scalar).
    fn full<V, F>(self, visitor: V, how: F) -> Result<V::Value, Fallback>
    where
        V: Visitor<'de>,
        F: for<'e> FnOnce(
            serde_saphyr::Deserializer<'de, 'e>,
            V,
        ) -> Result<V::Value, serde_saphyr::Error>,
    {
        match self.node {
            // An empty document is not an empty value: leave those to the full parse.
            Node::Scalar(scalar) if !scalar.raw.is_empty() => {
                serde_saphyr::with_deserializer_from_str_with_options(
                    scalar.raw,
                    (self.options)(),
                    |de| how(de, visitor),
                )
                .map_err(|_| Fallback)
            }
            _ => Err(Fallback),
        }
    }
}

macro_rules! through_full_library {
    ($($method:ident)*) => {
        $(fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Fallback> {
            self.full(visitor, |de, visitor| de.$method(visitor))
        })*
    };
}

impl<'de> Deserializer<'de> for NodeDeserializer<'de> {
    type Error = Fallback;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Fallback> {
        match self.node {
            Node::Scalar(_) => self.full(visitor, |de, visitor| de.deserialize_any(visitor)),
            Node::Seq(items) => visitor.visit_seq(Items {
                items: items.into_iter(),
                options: self.options,
            }),
            Node::Map(entries) => visitor.visit_map(Entries {
                entries: entries.into_iter(),
                value: None,
                options: self.options,
            }),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Fallback> {
        match &self.node {
            Node::Scalar(scalar) if scalar.is_null() => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Fallback> {
        match self.node {
            Node::Scalar(scalar) if !scalar.is_null() => match scalar.value {
                Cow::Borrowed(text) => visitor.visit_borrowed_str(text),
                Cow::Owned(text) => visitor.visit_string(text),
            },
            _ => Err(Fallback),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Fallback> {
        self.deserialize_str(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Fallback> {
        self.deserialize_str(visitor)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Fallback> {
        match self.node {
            Node::Seq(_) => self.deserialize_any(visitor),
            _ => Err(Fallback),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Fallback> {
        match self.node {
            Node::Map(_) => self.deserialize_any(visitor),
            _ => Err(Fallback),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Fallback> {
        self.deserialize_map(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Fallback> {
        visitor.visit_newtype_struct(self)
    }

    through_full_library! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_f32
        deserialize_f64 deserialize_char
    }

    // Nothing in a layer is read as these; if something were, the full parser would say.
    fn deserialize_bytes<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Fallback> {
        Err(Fallback)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Fallback> {
        Err(Fallback)
    }

    fn deserialize_unit<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Fallback> {
        Err(Fallback)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: V,
    ) -> Result<V::Value, Fallback> {
        Err(Fallback)
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _: usize, _: V) -> Result<V::Value, Fallback> {
        Err(Fallback)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: usize,
        _: V,
    ) -> Result<V::Value, Fallback> {
        Err(Fallback)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Fallback> {
        Err(Fallback)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Fallback> {
        Err(Fallback)
    }
}

struct Items<'a> {
    items: std::vec::IntoIter<Node<'a>>,
    options: fn() -> serde_saphyr::Options,
}

impl<'de> SeqAccess<'de> for Items<'de> {
    type Error = Fallback;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Fallback> {
        match self.items.next() {
            Some(node) => seed
                .deserialize(NodeDeserializer {
                    node,
                    options: self.options,
                })
                .map(Some),
            None => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct Entries<'a> {
    entries: std::vec::IntoIter<(Scalar<'a>, Node<'a>)>,
    value: Option<Node<'a>>,
    options: fn() -> serde_saphyr::Options,
}

impl<'de> MapAccess<'de> for Entries<'de> {
    type Error = Fallback;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Fallback> {
        match self.entries.next() {
            Some((key, value)) => {
                self.value = Some(value);
                seed.deserialize(NodeDeserializer {
                    node: Node::Scalar(key),
                    options: self.options,
                })
                .map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Fallback> {
        let node = self.value.take().ok_or(Fallback)?;
        seed.deserialize(NodeDeserializer {
            node,
            options: self.options,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalar(text: &str) -> Node<'_> {
        Node::Scalar(plain(text))
    }

    #[test]
    fn nesting_past_its_depth_is_left_to_the_full_parser() {
        let nested = |levels: usize| {
            let mut yaml = String::new();
            for level in 0..levels {
                yaml.push_str(&format!("{}k{level}:\n", " ".repeat(level)));
            }
            yaml.push_str(&format!("{}x: y\n", " ".repeat(levels)));
            yaml
        };
        assert!(parse(&nested(MAX_DEPTH - 1)).is_some());
        assert!(parse(&nested(MAX_DEPTH)).is_none());
        assert!(parse(&nested(5000)).is_none());
    }

    #[test]
    fn reads_block_mappings_sequences_and_one_line_values() {
        let yaml = "---\n# a layer\nsummary: s  # trailing\nservices:\n  a:\n    after: [b, 'c d']\n    before:\n    - e\n    requires:\n      - \"f\"\n    env: {}\n    empty:\n";
        let Some(Node::Map(top)) = parse(yaml) else {
            panic!("not read: {yaml}");
        };
        assert_eq!(top[0].0.value, "summary");
        assert_eq!(top[0].1, scalar("s"));
        let Node::Map(services) = &top[1].1 else {
            panic!("services is not a map");
        };
        let Node::Map(a) = &services[0].1 else {
            panic!("a is not a map");
        };
        let keys: Vec<&str> = a.iter().map(|(k, _)| &*k.value).collect();
        assert_eq!(keys, ["after", "before", "requires", "env", "empty"]);
        let Node::Seq(after) = &a[0].1 else {
            panic!("after is not a sequence")
        };
        assert_eq!(after[0], scalar("b"));
        let Node::Scalar(quoted) = &after[1] else {
            panic!("not a scalar")
        };
        assert_eq!(
            (quoted.raw, &*quoted.value, quoted.plain),
            ("'c d'", "c d", false)
        );
        assert_eq!(a[1].1, Node::Seq(vec![scalar("e")]));
        assert_eq!(a[3].1, Node::Map(Vec::new()));
        assert_eq!(a[4].1, Node::Scalar(Scalar::EMPTY));
    }

    #[test]
    fn single_quotes_double_inside_single_quotes() {
        let Some(Node::Map(top)) = parse("a: 'it''s'\n") else {
            panic!("not read");
        };
        assert_eq!(
            top[0].1,
            Node::Scalar(Scalar {
                raw: "'it''s'",
                value: Cow::Owned("it's".to_owned()),
                plain: false,
            })
        );
    }

    #[test]
    fn leaves_everything_else_to_the_full_parser() {
        for yaml in [
            "a: &x 1\nb: *x\n",
            "a: !!str 1\n",
            "a: |\n  text\n",
            "a: >\n  text\n",
            "a: one\n  continued\n",
            "a: \"esc\\n\"\n",
            "a: 'open\n",
            "a: {b: c}\n",
            "a:\n\tb: c\n",
            "a: b\r\n",
            "a: 1\na: 2\n",
            "a: 1\n 'a': 2\n",
            "a:\n  - b: c\n",
            "a:\n  -\n    b\n",
            "a: [b, [c]]\n",
            "a: [b,]\n",
            "a: b: c\n",
            "a: -b\n",
            "? a\n: b\n",
            "  a: b\n",
            "a:\n    b: 1\n  c: 2\n",
            "--- a\n",
            "a: 1\n---\nb: 2\n",
            "%YAML 1.2\n---\na: 1\n",
            "~: 1\n",
            "\u{feff}a: 1\n",
            "a: \u{85}\n",
            "",
            "# only a comment\n",
        ] {
            assert_eq!(parse(yaml), None, "read {yaml:?}");
        }
    }
}
