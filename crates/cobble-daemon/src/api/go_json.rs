//! Request bodies decoded as Pebble's `json.NewDecoder(r.Body).Decode(&payload)` decodes them.
//!
//! Clients can tell three things about Go's decoder apart from `serde_json::from_slice`: it
//! reads the first value and ignores whatever follows it; `null` decodes into the empty
//! payload, whose validation then speaks; and its syntax errors have their own words (`EOF`
//! for an empty body, `unexpected EOF` for a cut one, `invalid character 'x' looking for
//! beginning of object key string`). [`decode`] scans the first value as Go's scanner does,
//! with its messages, then lets serde read it. Type errors keep serde's words.

use serde::de::DeserializeOwned;

/// Decodes the first JSON value of `bytes` into `T`, as Go's decoder would.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let start = bytes
        .iter()
        .position(|b| !is_space(*b))
        .ok_or_else(|| "EOF".to_owned())?;
    let mut scan = Scan { b: bytes, i: start };
    scan.value()?;
    let value = &bytes[start..scan.i];
    // Go leaves the payload as it was (empty) for null.
    let value: &[u8] = if value == b"null" { b"{}" } else { value };
    serde_json::from_slice(value).map_err(|e| e.to_string())
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

/// A scanner over one JSON value, with the messages of Go's `encoding/json` scanner.
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
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

    fn value(&mut self) -> Result<(), String> {
        match self.next_token()? {
            b'{' => self.object(),
            b'[' => self.array(),
            b'"' => self.string(),
            b'-' | b'0'..=b'9' => self.number(),
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            c => Err(Self::invalid(c, "looking for beginning of value")),
        }
    }

    fn object(&mut self) -> Result<(), String> {
        self.i += 1;
        if self.next_token()? == b'}' {
            self.i += 1;
            return Ok(());
        }
        loop {
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
                b':' => self.i += 1,
                c => return Err(Self::invalid(c, "after object key")),
            }
            self.value()?;
            match self.next_token()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Ok(());
                }
                c => return Err(Self::invalid(c, "after object key:value pair")),
            }
        }
    }

    fn array(&mut self) -> Result<(), String> {
        self.i += 1;
        if self.next_token()? == b']' {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.value()?;
            match self.next_token()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    return Ok(());
                }
                c => return Err(Self::invalid(c, "after array element")),
            }
        }
    }

    /// Takes the next byte, or fails with `unexpected EOF`.
    fn take(&mut self) -> Result<u8, String> {
        let c = self.peek().ok_or_else(|| UNEXPECTED_EOF.to_owned())?;
        self.i += 1;
        Ok(c)
    }

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
    fn null_is_the_empty_payload() {
        assert_eq!(decode::<Payload>(b"null"), Ok(Payload::default()));
        assert_eq!(decode::<Payload>(b" null x"), Ok(Payload::default()));
    }

    #[test]
    fn type_errors_still_come_from_serde() {
        assert!(error(r#"{"action": 5}"#).starts_with("invalid type: integer `5`"));
    }
}
