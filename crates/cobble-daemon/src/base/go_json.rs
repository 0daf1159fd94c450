//! Request bodies decoded as Pebble's `json.NewDecoder(r.Body).Decode(&payload)` decodes them.
//!
//! Clients can tell Go's decoder apart from `serde_json::from_slice` in four ways: it reads
//! the first value and ignores whatever follows it; `null` leaves the payload empty, so its
//! validation then speaks; its syntax errors have their own words (`EOF` for an empty body,
//! `unexpected EOF` for a cut one, `invalid character 'x' looking for beginning of object key
//! string`); and a value of the wrong type is named by the Go field and type it missed (`json:
//! cannot unmarshal number into Go struct field signalsPayload.services of type string`).
//!
//! [`decode`] therefore does what Go does, in Go's order. It scans the first value, failing with
//! the scanner's words (nesting included: past [`MAX_DEPTH`], `exceeded max depth`). It then
//! reads the value again against the payload's Go type
//! ([`GoPayload::GO`]): keys match fields case-insensitively when no field matches exactly,
//! the last of repeated keys wins, `null` leaves a value as it was (or empties a pointer, slice
//! or map), unknown keys are skipped, `json.RawMessage` keeps the value's text, and the first
//! value of the wrong type is the error. Only then does serde read what the walk produced, so serde's words are left
//! for what Go would not have refused at all.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// A request payload, with the Go type Pebble decodes it into.
pub(crate) trait GoPayload: DeserializeOwned {
    /// The Go type, as `encoding/json` sees it.
    const GO: GoType;
}

/// A Go type as `encoding/json` sees it: which JSON it takes, and how its errors name it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum GoType {
    /// A string type, by its Go name (`string`, `identities.Access`).
    Str(&'static str),
    /// `bool`.
    Bool,
    /// An integer type, by its Go name (`int`, `uint32`), with its range.
    Int(&'static str, i128, i128),
    /// `[]T`.
    Slice(&'static GoType),
    /// `map[string]T`.
    Map(&'static GoType),
    /// `*T`: `null` makes it nil; anything else is decoded into `T`.
    Ptr(&'static GoType),
    /// A struct.
    Struct(&'static GoStruct),
    /// `json.RawMessage`: any value, kept as it is.
    Raw,
}

/// Go's `int` (64 bits, as on every platform Pebble ships for).
pub(crate) const INT: GoType = GoType::Int("int", i64::MIN as i128, i64::MAX as i128);
/// Go's `uint32`.
pub(crate) const UINT32: GoType = GoType::Int("uint32", 0, u32::MAX as i128);
/// Go's `string`.
pub(crate) const STRING: GoType = GoType::Str("string");
/// Go's `[]string`.
pub(crate) const STRINGS: GoType = GoType::Slice(&STRING);

/// A Go struct type.
#[derive(Debug)]
pub(crate) struct GoStruct {
    /// The package-qualified name (`daemon.execPayload`), or empty for an anonymous struct.
    pub name: &'static str,
    pub fields: &'static [GoField],
}

/// A field of a [`GoStruct`].
#[derive(Debug)]
pub(crate) struct GoField {
    /// The Go field name (`ServiceContext`), which an anonymous struct's type string shows.
    pub go: &'static str,
    /// The JSON name (`service-context`).
    pub json: &'static str,
    /// Whether the tag says `,omitempty` (the type string shows the tag whole).
    pub omitempty: bool,
    pub ty: GoType,
}

impl GoField {
    /// A field whose JSON name comes from `json:"name"`.
    pub(crate) const fn new(go: &'static str, json: &'static str, ty: GoType) -> Self {
        GoField {
            go,
            json,
            omitempty: false,
            ty,
        }
    }

    /// A field tagged `json:"name,omitempty"`.
    pub(crate) const fn omitempty(go: &'static str, json: &'static str, ty: GoType) -> Self {
        GoField {
            go,
            json,
            omitempty: true,
            ty,
        }
    }
}

impl std::fmt::Display for GoType {
    /// The type as Go's `reflect.Type.String` writes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GoType::Str(name) | GoType::Int(name, ..) => f.write_str(name),
            GoType::Bool => f.write_str("bool"),
            GoType::Slice(elem) => write!(f, "[]{elem}"),
            GoType::Map(elem) => write!(f, "map[string]{elem}"),
            GoType::Ptr(elem) => write!(f, "*{elem}"),
            GoType::Raw => f.write_str("json.RawMessage"),
            GoType::Struct(s) if !s.name.is_empty() => f.write_str(s.name),
            GoType::Struct(s) => {
                f.write_str("struct {")?;
                for (i, field) in s.fields.iter().enumerate() {
                    let tag = format!(
                        "json:\"{}{}\"",
                        field.json,
                        if field.omitempty { ",omitempty" } else { "" }
                    );
                    let sep = if i == 0 { " " } else { "; " };
                    write!(f, "{sep}{} {} {tag:?}", field.go, field.ty)?;
                }
                f.write_str(" }")
            }
        }
    }
}

impl GoStruct {
    /// The name Go's field errors give the struct: without its package, empty if anonymous.
    fn short_name(&self) -> &'static str {
        self.name.rsplit('.').next().unwrap_or_default()
    }

    /// The field `key` sets: the exact JSON name, or else one equal to it ignoring case.
    fn field(&self, key: &str) -> Option<&'static GoField> {
        let fields = self.fields;
        fields.iter().find(|f| f.json == key).or_else(|| {
            let folded = key.to_lowercase();
            fields.iter().find(|f| f.json.to_lowercase() == folded)
        })
    }
}

/// How deep Go's scanner lets values nest (`maxNestingDepth`): the array or object that would
/// open one level deeper is refused with `exceeded max depth`.
pub(crate) const MAX_DEPTH: usize = 10_000;

/// Decodes the first JSON value of `bytes` into `T`, as Go's decoder would decode it into
/// `T`'s Go type.
///
/// Like Go's, it takes two passes and no recursion the input controls: the scanner checks
/// the first value's syntax with a stack of at most [`MAX_DEPTH`] open collections, then the
/// walk reads the checked text again as the Go type directs, so it goes only as deep as the
/// type does and skips over anything the type does not take. Nothing is built but the value
/// the type takes.
pub(crate) fn decode<T: GoPayload>(bytes: &[u8]) -> Result<T, String> {
    decode_as(bytes, &T::GO)
}

/// [`decode`] into `T` as Go would decode into `ty`: for values that are no request's
/// payload, such as the text a `json.RawMessage` kept.
pub(crate) fn decode_as<T: DeserializeOwned>(bytes: &[u8], ty: &GoType) -> Result<T, String> {
    let start = bytes
        .iter()
        .position(|b| !is_space(*b))
        .ok_or_else(|| "EOF".to_owned())?;
    let mut scan = Scan { b: bytes, i: start };
    scan.value()?;
    let mut walk = Walk {
        b: &bytes[..scan.i],
        i: start,
        error: None,
        in_struct: "",
        path: Vec::new(),
    };
    let mut out = zero(ty);
    walk.value(ty, &mut out);
    if let Some(error) = walk.error {
        return Err(error);
    }
    serde_json::from_value(out).map_err(|e| e.to_string())
}

/// [`decode_as`], but as Go's `json.Unmarshal` reads: the whole text is one value, so
/// anything but white space after it is refused in the scanner's words (`invalid character
/// 'x' after top-level value`), and text that ends early is `unexpected end of JSON input`.
pub(crate) fn unmarshal_as<T: DeserializeOwned>(bytes: &[u8], ty: &GoType) -> Result<T, String> {
    const END: &str = "unexpected end of JSON input";
    let Some(start) = bytes.iter().position(|b| !is_space(*b)) else {
        return Err(END.to_owned());
    };
    let mut scan = Scan { b: bytes, i: start };
    scan.value().map_err(|e| {
        if e == UNEXPECTED_EOF {
            END.to_owned()
        } else {
            e
        }
    })?;
    scan.skip_space();
    if let Some(c) = scan.peek() {
        return Err(Scan::invalid(c, "after top-level value"));
    }
    decode_as(bytes, ty)
}

/// What Go's type errors call a value, from its first byte.
fn kind(first: u8) -> &'static str {
    match first {
        b'n' => "null",
        b't' | b'f' => "bool",
        b'"' => "string",
        b'[' => "array",
        b'{' => "object",
        _ => "number",
    }
}

/// The value a Go type starts as; `Null` stands for nil, and for absent fields.
fn zero(ty: &GoType) -> Value {
    match ty {
        GoType::Str(_) => Value::String(String::new()),
        GoType::Bool => Value::Bool(false),
        GoType::Int(..) => Value::from(0),
        GoType::Struct(_) => Value::Object(Map::new()),
        GoType::Slice(_) | GoType::Map(_) | GoType::Ptr(_) | GoType::Raw => Value::Null,
    }
}

/// Go's `decodeState` over text the scanner has checked: the first type error, and where it
/// was.
struct Walk<'a> {
    /// The first value, checked.
    b: &'a [u8],
    i: usize,
    error: Option<String>,
    /// The innermost struct whose field is being decoded, as Go's errors name it.
    in_struct: &'static str,
    /// The JSON names of the fields from the top (map keys and indexes are not in it).
    path: Vec<&'static str>,
}

impl Walk<'_> {
    /// The next byte that is not white space (the text is checked: there is one).
    fn token(&mut self) -> u8 {
        while self.b.get(self.i).copied().is_some_and(is_space) {
            self.i += 1;
        }
        self.b.get(self.i).copied().unwrap_or(b'n')
    }

    /// Steps over the next value, however deep: the text is checked, so brackets outside
    /// strings are counted and nothing else is read.
    fn skip(&mut self) {
        let mut depth = 0usize;
        while self.i < self.b.len() {
            match self.token() {
                b'"' => self.i = self.string_end(),
                b'[' | b'{' => {
                    depth += 1;
                    self.i += 1;
                }
                b']' | b'}' => {
                    depth -= 1;
                    self.i += 1;
                }
                b',' | b':' => self.i += 1,
                _ => {
                    while self
                        .b
                        .get(self.i)
                        .is_some_and(|c| !matches!(c, b',' | b']' | b'}' | b':') && !is_space(*c))
                    {
                        self.i += 1;
                    }
                }
            }
            if depth == 0 {
                return;
            }
        }
    }

    /// Where the string that opens at `self.i` ends (past its closing quote).
    fn string_end(&self) -> usize {
        let mut j = self.i + 1;
        while let Some(c) = self.b.get(j) {
            match c {
                b'\\' => j += 2,
                b'"' => return j + 1,
                _ => j += 1,
            }
        }
        j
    }

    /// The string at `self.i`, unquoted.
    fn string(&mut self) -> String {
        let end = self.string_end();
        let text = unquote(&self.b[self.i + 1..end - 1]);
        self.i = end;
        text
    }

    /// The literal or number at `self.i`, its text.
    fn scalar(&mut self) -> &[u8] {
        let start = self.i;
        self.skip();
        &self.b[start..self.i]
    }

    /// The members of the object at `self.i`: calls `member` with each key, positioned at
    /// its value, which `member` must read or skip.
    fn members(&mut self, mut member: impl FnMut(&mut Self, String)) {
        self.i += 1;
        while self.i < self.b.len() {
            match self.token() {
                b'}' => {
                    self.i += 1;
                    return;
                }
                b',' => self.i += 1,
                _ => {
                    let key = self.string();
                    self.token();
                    self.i += 1; // the ':'
                    member(self, key);
                }
            }
        }
    }

    /// Decodes the next value into `out`, a value of type `ty`, as Go's `decodeState.value`
    /// does.
    fn value(&mut self, ty: &GoType, out: &mut Value) {
        let first = self.token();
        match (first, ty) {
            (b'n', GoType::Ptr(_) | GoType::Slice(_) | GoType::Map(_)) => {
                self.skip();
                *out = Value::Null;
            }
            (_, GoType::Raw) => {
                // `json.RawMessage`: the value's text as it was sent.
                let start = self.i;
                self.skip();
                *out = Value::String(String::from_utf8_lossy(&self.b[start..self.i]).into_owned());
            }
            (b'n', _) => self.skip(),
            (_, GoType::Ptr(elem)) => {
                if out.is_null() {
                    *out = zero(elem);
                }
                self.value(elem, out);
            }
            (b'"', GoType::Str(_)) => *out = Value::String(self.string()),
            (b't' | b'f', GoType::Bool) => {
                *out = Value::Bool(first == b't');
                self.skip();
            }
            (b'-' | b'0'..=b'9', GoType::Int(_, min, max)) => {
                let n = self.scalar();
                let parsed = std::str::from_utf8(n)
                    .ok()
                    .and_then(|n| n.parse::<i128>().ok())
                    .filter(|n| (*min..=*max).contains(n));
                match parsed {
                    Some(n) => {
                        *out = i64::try_from(n)
                            .map(Value::from)
                            .unwrap_or_else(|_| Value::from(n as u64))
                    }
                    None => {
                        let kind = format!("number {}", String::from_utf8_lossy(n));
                        self.mismatch(kind, ty);
                    }
                }
            }
            (b'[', GoType::Slice(elem)) => {
                let mut items = Vec::new();
                self.i += 1;
                while self.i < self.b.len() {
                    match self.token() {
                        b']' => {
                            self.i += 1;
                            break;
                        }
                        b',' => self.i += 1,
                        _ => {
                            let mut item = zero(elem);
                            self.value(elem, &mut item);
                            items.push(item);
                        }
                    }
                }
                *out = Value::Array(items);
            }
            (b'{', GoType::Map(elem)) => {
                let mut map = match std::mem::take(out) {
                    Value::Object(map) => map,
                    _ => Map::new(),
                };
                self.members(|walk, key| {
                    // Each key decodes into a new element, as Go's map decoding does.
                    let mut value = zero(elem);
                    walk.value(elem, &mut value);
                    map.insert(key, value);
                });
                *out = Value::Object(map);
            }
            (b'{', GoType::Struct(s)) => {
                let mut map = match std::mem::take(out) {
                    Value::Object(map) => map,
                    _ => Map::new(),
                };
                self.members(|walk, key| {
                    // Go ignores a key no field takes, and so does serde.
                    let Some(field) = s.field(&key) else {
                        walk.skip();
                        return;
                    };
                    let outer = std::mem::replace(&mut walk.in_struct, s.short_name());
                    walk.path.push(field.json);
                    let mut value = map.remove(field.json).unwrap_or_else(|| zero(&field.ty));
                    walk.value(&field.ty, &mut value);
                    // Absent and nil read the same to serde's defaults.
                    if !value.is_null() {
                        map.insert(field.json.to_owned(), value);
                    }
                    walk.path.pop();
                    walk.in_struct = outer;
                });
                *out = Value::Object(map);
            }
            _ => {
                let kind = kind(first).to_owned();
                self.skip();
                self.mismatch(kind, ty);
            }
        }
    }

    /// Go's `UnmarshalTypeError`; only the first is reported, and decoding goes on past it.
    fn mismatch(&mut self, kind: String, ty: &GoType) {
        if self.error.is_some() {
            return;
        }
        self.error = Some(if self.path.is_empty() {
            format!("json: cannot unmarshal {kind} into Go value of type {ty}")
        } else {
            format!(
                "json: cannot unmarshal {kind} into Go struct field {}.{} of type {ty}",
                self.in_struct,
                self.path.join(".")
            )
        });
    }
}

const UNEXPECTED_EOF: &str = "unexpected EOF";

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// Go's `quoteChar`: the offending byte in single quotes, escaped as `strconv.Quote` would.
fn quote_char(c: u8) -> String {
    match c {
        b'\'' => r"'\''".to_owned(),
        b'"' => "'\"'".to_owned(),
        0x07 => r"'\a'".to_owned(),
        0x08 => r"'\b'".to_owned(),
        0x0c => r"'\f'".to_owned(),
        b'\n' => r"'\n'".to_owned(),
        b'\r' => r"'\r'".to_owned(),
        b'\t' => r"'\t'".to_owned(),
        0x0b => r"'\v'".to_owned(),
        b'\\' => r"'\\'".to_owned(),
        0x20..=0x7e => format!("'{}'", c as char),
        0x00..=0x7f => format!("'\\x{c:02x}'"),
        // Go turns the byte into the rune of the same number.
        0xa1..=0xff if c != 0xad => format!("'{}'", char::from(c)),
        _ => format!("'\\u{c:04x}'"),
    }
}

/// The text between a scanned string's quotes, unescaped as Go's `unquote` does: a lone
/// surrogate escape and each byte that is not UTF-8 become U+FFFD.
fn unquote(raw: &[u8]) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut i = 0;
    let hex4 = |at: usize| {
        raw.get(at..at + 4)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u32::from_str_radix(h, 16).ok())
    };
    while i < raw.len() {
        if raw[i] != b'\\' {
            let end = raw[i..]
                .iter()
                .position(|b| *b == b'\\')
                .map_or(raw.len(), |n| i + n);
            for chunk in raw[i..end].utf8_chunks() {
                out.push_str(chunk.valid());
                out.extend(chunk.invalid().iter().map(|_| char::REPLACEMENT_CHARACTER));
            }
            i = end;
            continue;
        }
        // The scanner has checked every escape.
        let c = raw.get(i + 1).copied().unwrap_or_default();
        i += 2;
        let unit = match c {
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let first = hex4(i).unwrap_or(0xfffd);
                i += 4;
                if (0xd800..0xe000).contains(&first) {
                    let second = (raw.get(i..i + 2) == Some(b"\\u"))
                        .then(|| hex4(i + 2))
                        .flatten()
                        .filter(|s| (0xdc00..0xe000).contains(s) && first < 0xdc00);
                    match second {
                        Some(second) => {
                            i += 6;
                            char::from_u32(0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00))
                                .unwrap_or(char::REPLACEMENT_CHARACTER)
                        }
                        None => char::REPLACEMENT_CHARACTER,
                    }
                } else {
                    char::from_u32(first).unwrap_or(char::REPLACEMENT_CHARACTER)
                }
            }
            other => char::from(other),
        };
        out.push(unit);
    }
    out
}

/// A scanner over one JSON value, with the messages of Go's `encoding/json` scanner. It only
/// checks: [`Walk`] reads what it has checked.
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

/// A collection the scanner is inside of.
#[derive(Clone, Copy, PartialEq)]
enum Open {
    Array,
    Object,
}

impl Scan<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(is_space) {
            self.i += 1;
        }
    }

    /// The next byte that is not white space, or `unexpected EOF`.
    fn next_token(&mut self) -> Result<u8, String> {
        self.skip_space();
        self.peek().ok_or_else(|| UNEXPECTED_EOF.to_owned())
    }

    fn invalid(c: u8, context: &str) -> String {
        format!("invalid character {} {context}", quote_char(c))
    }

    /// Checks one value, leaving `self.i` just past it. Collections are kept on a stack of
    /// their own, as Go's scanner keeps them, so no depth the input asks for costs recursion.
    fn value(&mut self) -> Result<(), String> {
        let mut open: Vec<Open> = Vec::new();
        loop {
            // A value starts here.
            let c = self.next_token()?;
            match c {
                b'{' | b'[' => {
                    if open.len() >= MAX_DEPTH {
                        return Err(Self::invalid(c, "exceeded max depth"));
                    }
                    self.i += 1;
                    let close = if c == b'[' { b']' } else { b'}' };
                    if self.next_token()? == close {
                        self.i += 1;
                    } else {
                        if c == b'{' {
                            self.key()?;
                            open.push(Open::Object);
                        } else {
                            open.push(Open::Array);
                        }
                        continue;
                    }
                }
                b'"' => self.string()?,
                b'-' | b'0'..=b'9' => self.number()?,
                b't' => self.literal("true")?,
                b'f' => self.literal("false")?,
                b'n' => self.literal("null")?,
                c => return Err(Self::invalid(c, "looking for beginning of value")),
            }
            // A value ended: close the collections that end with it.
            loop {
                let Some(&innermost) = open.last() else {
                    return Ok(());
                };
                let c = self.next_token()?;
                match (innermost, c) {
                    (_, b',') => {
                        self.i += 1;
                        if innermost == Open::Object {
                            self.key()?;
                        }
                        break;
                    }
                    (Open::Array, b']') | (Open::Object, b'}') => {
                        self.i += 1;
                        open.pop();
                    }
                    (Open::Array, c) => return Err(Self::invalid(c, "after array element")),
                    (Open::Object, c) => {
                        return Err(Self::invalid(c, "after object key:value pair"));
                    }
                }
            }
        }
    }

    /// An object's key and its colon.
    fn key(&mut self) -> Result<(), String> {
        match self.next_token()? {
            b'"' => self.string()?,
            c => {
                return Err(Self::invalid(
                    c,
                    "looking for beginning of object key string",
                ));
            }
        }
        match self.next_token()? {
            b':' => {
                self.i += 1;
                Ok(())
            }
            c => Err(Self::invalid(c, "after object key")),
        }
    }

    /// Takes the next byte, or fails with `unexpected EOF`.
    fn take(&mut self) -> Result<u8, String> {
        let c = self.peek().ok_or_else(|| UNEXPECTED_EOF.to_owned())?;
        self.i += 1;
        Ok(c)
    }

    /// A string: its escapes are checked, [`Walk`] unquotes it.
    fn string(&mut self) -> Result<(), String> {
        self.i += 1;
        loop {
            match self.take()? {
                b'"' => return Ok(()),
                b'\\' => match self.take()? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                    b'u' => {
                        for _ in 0..4 {
                            let c = self.take()?;
                            if !c.is_ascii_hexdigit() {
                                return Err(Self::invalid(
                                    c,
                                    "in \\u hexadecimal character escape",
                                ));
                            }
                        }
                    }
                    c => return Err(Self::invalid(c, "in string escape code")),
                },
                c if c < 0x20 => return Err(Self::invalid(c, "in string literal")),
                _ => {}
            }
        }
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
    }

    /// A number; what ends it is for the enclosing value to judge.
    fn number(&mut self) -> Result<(), String> {
        if self.peek() == Some(b'-') {
            self.i += 1;
            match self.take()? {
                b'0'..=b'9' => self.i -= 1,
                c => return Err(Self::invalid(c, "in numeric literal")),
            }
        }
        if self.take()? != b'0' {
            self.digits();
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            match self.take()? {
                b'0'..=b'9' => self.digits(),
                c => return Err(Self::invalid(c, "after decimal point in numeric literal")),
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            match self.take()? {
                b'0'..=b'9' => self.digits(),
                c => return Err(Self::invalid(c, "in exponent of numeric literal")),
            }
        }
        Ok(())
    }

    fn literal(&mut self, word: &str) -> Result<(), String> {
        self.i += 1;
        for expected in word.bytes().skip(1) {
            let c = self.take()?;
            if c != expected {
                return Err(Self::invalid(
                    c,
                    &format!("in literal {word} (expecting {})", quote_char(expected)),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, serde::Deserialize, Default)]
    #[serde(default)]
    struct Payload {
        action: String,
        services: Vec<String>,
        small: u8,
    }

    impl GoPayload for Payload {
        const GO: GoType = GoType::Struct(&GoStruct {
            name: "",
            fields: &[
                GoField::new("Action", "action", STRING),
                GoField::new("Services", "services", STRINGS),
                GoField::omitempty("Small", "small", INT),
            ],
        });
    }

    fn error(body: &str) -> String {
        decode::<Payload>(body.as_bytes()).unwrap_err()
    }

    #[test]
    fn syntax_errors_are_worded_as_go_words_them() {
        // Each as Go 1.23's json.Decoder reports it.
        let cases = [
            ("", "EOF"),
            (" \n\t", "EOF"),
            ("{\"action\": \"sta", "unexpected EOF"),
            ("{", "unexpected EOF"),
            (
                "{not json}",
                "invalid character 'n' looking for beginning of object key string",
            ),
            ("{\"a\" 1}", "invalid character '1' after object key"),
            (
                "{\"a\": 1 \"b\"}",
                "invalid character '\"' after object key:value pair",
            ),
            (
                "{\"a\": 1,}",
                "invalid character '}' looking for beginning of object key string",
            ),
            (
                "{\"a\": [1 2]}",
                "invalid character '2' after array element",
            ),
            (
                "{\"a\": [1,]}",
                "invalid character ']' looking for beginning of value",
            ),
            (
                "{\"a\": tru}",
                "invalid character '}' in literal true (expecting 'e')",
            ),
            ("{\"a\": nul", "unexpected EOF"),
            ("{\"a\": -x}", "invalid character 'x' in numeric literal"),
            (
                "{\"a\": 1.x}",
                "invalid character 'x' after decimal point in numeric literal",
            ),
            (
                "{\"a\": 1ex}",
                "invalid character 'x' in exponent of numeric literal",
            ),
            (
                "{\"a\": \"\\q\"}",
                "invalid character 'q' in string escape code",
            ),
            (
                "{\"a\": \"\\u12x4\"}",
                "invalid character 'x' in \\u hexadecimal character escape",
            ),
            (
                "{\"a\": \"\n\"}",
                "invalid character '\\n' in string literal",
            ),
            (
                "'x'",
                "invalid character '\\'' looking for beginning of value",
            ),
            ("x", "invalid character 'x' looking for beginning of value"),
            (
                "\u{e9}",
                "invalid character '\u{c3}' looking for beginning of value",
            ),
            (
                "\u{1}",
                "invalid character '\\x01' looking for beginning of value",
            ),
        ];
        for (body, want) in cases {
            assert_eq!(error(body), want, "{body:?}");
        }
    }

    #[test]
    fn the_first_value_is_decoded_and_what_follows_is_ignored() {
        let want = Payload {
            action: "stop".into(),
            services: vec!["a".into()],
            small: 0,
        };
        for body in [
            r#"{"action": "stop", "services": ["a"]}"#,
            r#"{"action": "stop", "services": ["a"]} trailing"#,
            r#"  {"action": "stop", "services": ["a"]}{"action": "start"}"#,
        ] {
            assert_eq!(
                decode::<Payload>(body.as_bytes()),
                Ok(want.clone()),
                "{body}"
            );
        }
    }

    #[test]
    fn unmarshal_takes_one_value_and_nothing_after_it() {
        let unmarshal = |text: &str| unmarshal_as::<Payload>(text.as_bytes(), &Payload::GO);
        assert_eq!(unmarshal(" null \n"), Ok(Payload::default()));
        assert_eq!(
            unmarshal("{} x").unwrap_err(),
            "invalid character 'x' after top-level value"
        );
        assert_eq!(unmarshal("").unwrap_err(), "unexpected end of JSON input");
        assert_eq!(unmarshal("{").unwrap_err(), "unexpected end of JSON input");
        assert_eq!(
            unmarshal(&"[".repeat(20_000)).unwrap_err(),
            "invalid character '[' exceeded max depth"
        );
    }

    #[test]
    fn null_is_the_empty_payload() {
        assert_eq!(decode::<Payload>(b"null"), Ok(Payload::default()));
        assert_eq!(decode::<Payload>(b" null x"), Ok(Payload::default()));
    }

    #[test]
    fn the_first_type_error_in_the_text_is_reported_after_any_syntax_error() {
        assert_eq!(
            error(r#"{"services": [1], "action": 5}"#),
            "json: cannot unmarshal number into Go struct field .services of type string"
        );
        assert_eq!(
            error(r#"{"action": 5, "services": [1}"#),
            "invalid character '}' after array element"
        );
        assert_eq!(
            error("[]"),
            "json: cannot unmarshal array into Go value of type struct { Action string \
             \"json:\\\"action\\\"\"; Services []string \"json:\\\"services\\\"\"; \
             Small int \"json:\\\"small,omitempty\\\"\" }"
        );
    }

    #[test]
    fn serde_speaks_only_where_go_would_have_accepted() {
        // Go's int takes 300; the payload's u8 does not.
        assert!(
            error(r#"{"small": 300}"#).starts_with("invalid value: integer `300`"),
            "{}",
            error(r#"{"small": 300}"#)
        );
    }

    /// Runs `f` on a thread with a small stack: what the input nests must cost no stack.
    fn on_a_small_stack<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
        std::thread::Builder::new()
            .stack_size(128 * 1024)
            .spawn(f)
            .expect("a thread")
            .join()
            .expect("no overflow")
    }

    #[test]
    fn nesting_deeper_than_gos_limit_is_refused_in_its_words() {
        let nested = |open: &str, close: &str, depth: usize| {
            format!(
                r#"{{"action": "x", "services": {}{}}}"#,
                open.repeat(depth),
                close.repeat(depth)
            )
        };
        on_a_small_stack(move || {
            // The payload's object is the first level.
            assert_eq!(
                error(&nested("[", "]", MAX_DEPTH)),
                "invalid character '[' exceeded max depth"
            );
            assert_eq!(
                error(&nested("[", "]", MAX_DEPTH - 1)),
                "json: cannot unmarshal array into Go struct field .services of type string"
            );
            assert_eq!(
                error(&nested(r#"{"a":"#, "}", MAX_DEPTH)),
                "invalid character '{' exceeded max depth"
            );
            // An empty collection past the limit is refused too, and so is a body that is cut
            // after the limit: the scanner stops at the first bracket too many.
            let empty = format!("{}{}", "[".repeat(MAX_DEPTH), "[]");
            assert_eq!(error(&empty), "invalid character '[' exceeded max depth");
            assert_eq!(
                error(&"[".repeat(100_000)),
                "invalid character '[' exceeded max depth"
            );
            assert_eq!(error(&"[".repeat(MAX_DEPTH)), "unexpected EOF");
        });
    }

    #[test]
    fn deep_values_no_field_takes_cost_no_stack() {
        let depth = MAX_DEPTH - 1;
        let body = format!(
            r#"{{"other": {}1{}, "action": "stop", "services": [{}"a"{}]}}"#,
            "[".repeat(depth),
            "]".repeat(depth),
            r#"{"x":"#.repeat(depth - 1),
            "}".repeat(depth - 1),
        );
        let got = on_a_small_stack(move || decode::<Payload>(body.as_bytes()));
        assert_eq!(
            got,
            Err(
                "json: cannot unmarshal object into Go struct field .services of type string"
                    .into()
            )
        );
        let body = format!(
            r#"{{"other": {}1{}, "action": "stop"}}"#,
            "[".repeat(depth),
            "]".repeat(depth)
        );
        let got = on_a_small_stack(move || decode::<Payload>(body.as_bytes()));
        assert_eq!(got.map(|p| p.action), Ok("stop".to_owned()));
    }

    #[test]
    fn a_raw_message_keeps_the_text_as_sent() {
        const RAW: GoType = GoType::Struct(&GoStruct {
            name: "",
            fields: &[GoField::new("Data", "data", GoType::Raw)],
        });
        let raw = |body: &str| {
            decode_as::<Value>(body.as_bytes(), &RAW).map(|v| v["data"].as_str().map(str::to_owned))
        };
        assert_eq!(
            raw(r#"{"data": [ 1, {"a" : 2} ] }"#),
            Ok(Some(r#"[ 1, {"a" : 2} ]"#.into()))
        );
        assert_eq!(raw(r#"{"data": null}"#), Ok(Some("null".into())));
        assert_eq!(raw(r#"{"data": "x"}"#), Ok(Some(r#""x""#.into())));
        assert_eq!(raw("{}"), Ok(None));
    }
}
