//! Multipart, the way Go's `mime` and `mime/multipart` packages do it: a writer whose bytes
//! match `multipart.Writer` (the Go and Python clients parse them), and the parameter parser
//! of `mime.ParseMediaType` that Pebble uses for `Content-Type` and `Content-Disposition`.

use std::fmt::Write as _;

use bytes::Bytes;

/// Writes a `multipart/form-data` body part by part, byte for byte like Go's writer: no CRLF
/// before the first boundary, part headers sorted by name, `\r\n--<boundary>--\r\n` at the end.
#[derive(Debug)]
pub(crate) struct MultipartWriter {
    /// 60 hex characters, as Go's `randomBoundary` makes them.
    boundary: String,
    /// Whether a part has been started (later boundaries are preceded by CRLF).
    started: bool,
}

impl MultipartWriter {
    /// A writer with a fresh random boundary.
    pub(crate) fn new() -> Self {
        let mut boundary = String::with_capacity(60);
        while boundary.len() < 60 {
            let _ = write!(boundary, "{:016x}", cobble_client::random::random_u64());
        }
        boundary.truncate(60);
        Self::with_boundary(boundary)
    }

    /// A writer with a given boundary (tests).
    pub(crate) fn with_boundary(boundary: String) -> Self {
        MultipartWriter {
            boundary,
            started: false,
        }
    }

    /// The `Content-Type` of the body: `multipart/form-data; boundary=...`.
    pub(crate) fn content_type(&self) -> String {
        format!("multipart/form-data; boundary={}", self.boundary)
    }

    /// The bytes that start a part with these headers (sorted here, as Go sorts them).
    pub(crate) fn part(&mut self, headers: &[(&str, &str)]) -> Bytes {
        let mut out = String::new();
        if self.started {
            out.push_str("\r\n");
        }
        self.started = true;
        let _ = write!(out, "--{}\r\n", self.boundary);
        let mut headers = headers.to_vec();
        headers.sort_by_key(|(name, _)| *name);
        for (name, value) in headers {
            let _ = write!(out, "{name}: {value}\r\n");
        }
        out.push_str("\r\n");
        Bytes::from(out)
    }

    /// Go's `CreateFormFile(field, filename)`: an `application/octet-stream` part.
    pub(crate) fn form_file(&mut self, field: &str, filename: &str) -> Bytes {
        let disposition = format!(
            "form-data; name=\"{}\"; filename=\"{}\"",
            escape_quotes(field),
            escape_quotes(filename)
        );
        self.part(&[
            ("Content-Disposition", &disposition),
            ("Content-Type", "application/octet-stream"),
        ])
    }

    /// The closing boundary.
    pub(crate) fn close(&self) -> Bytes {
        Bytes::from(format!("\r\n--{}--\r\n", self.boundary))
    }
}

impl Default for MultipartWriter {
    fn default() -> Self {
        Self::new()
    }
}

/// Go's `multipart.escapeQuotes`: backslashes and double quotes get a backslash.
pub(crate) fn escape_quotes(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

/// `mime.ParseMediaType`: the lower-cased media type and its parameters (keys lower-cased),
/// or `None` when the value is malformed. RFC 2231 continuations are not supported.
pub(crate) fn parse_media_type(value: &str) -> Option<(String, Vec<(String, String)>)> {
    let (base, mut rest) = match value.find(';') {
        Some(at) => (&value[..at], &value[at..]),
        None => (value, ""),
    };
    let media_type = base.trim().to_ascii_lowercase();
    check_media_type(&media_type)?;
    let mut params: Vec<(String, String)> = Vec::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        match consume_param(rest) {
            Some((key, value, remaining)) => {
                if params.iter().any(|(k, _)| *k == key) {
                    return None;
                }
                params.push((key, value));
                rest = remaining;
            }
            None if rest.trim() == ";" => break,
            None => return None,
        }
    }
    Some((media_type, params))
}

/// Looks a parameter up in what [`parse_media_type`] returned.
pub(crate) fn param<'a>(params: &'a [(String, String)], key: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// Go's `Part.FormName`: the `name` of a `form-data` disposition, else empty.
pub(crate) fn form_name(content_disposition: Option<&str>) -> String {
    match content_disposition.and_then(parse_media_type) {
        Some((kind, params)) if kind == "form-data" => {
            param(&params, "name").unwrap_or_default().to_string()
        }
        _ => String::new(),
    }
}

/// Pebble's `multipartFilename`: the `filename` parameter exactly, directory and all.
pub(crate) fn form_filename(content_disposition: Option<&str>) -> String {
    content_disposition
        .and_then(parse_media_type)
        .and_then(|(_, params)| param(&params, "filename").map(str::to_string))
        .unwrap_or_default()
}

fn is_tspecial(c: char) -> bool {
    "()<>@,;:\\\"/[]?=".contains(c)
}

fn is_token_char(c: char) -> bool {
    c > ' ' && c < '\u{7f}' && !is_tspecial(c)
}

fn check_media_type(media_type: &str) -> Option<()> {
    let (kind, sub) = match media_type.split_once('/') {
        Some((kind, sub)) => (kind, Some(sub)),
        None => (media_type, None),
    };
    if kind.is_empty() || !kind.chars().all(is_token_char) {
        return None;
    }
    if let Some(sub) = sub
        && (sub.is_empty() || !sub.chars().all(is_token_char))
    {
        return None;
    }
    Some(())
}

/// `;` key `=` value, with optional white space; returns the rest after the value.
fn consume_param(text: &str) -> Option<(String, String, &str)> {
    let rest = text.trim_start().strip_prefix(';')?.trim_start();
    let key_len = rest.find(|c| !is_token_char(c)).unwrap_or(rest.len());
    if key_len == 0 {
        return None;
    }
    let key = rest[..key_len].to_ascii_lowercase();
    let rest = rest[key_len..].trim_start().strip_prefix('=')?.trim_start();
    let (value, rest) = consume_value(rest)?;
    Some((key, value, rest))
}

/// A token, or a quoted string in which a backslash escapes a tspecial (only: an escaped
/// letter is taken as a literal backslash, as Go does for MSIE's file paths).
fn consume_value(text: &str) -> Option<(String, &str)> {
    let Some(quoted) = text.strip_prefix('"') else {
        let len = text.find(|c| !is_token_char(c)).unwrap_or(text.len());
        if len == 0 {
            return None;
        }
        return Some((text[..len].to_string(), &text[len..]));
    };
    let mut value = String::new();
    let mut chars = quoted.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((value, &quoted[i + 1..])),
            '\\' if chars.peek().is_some_and(|(_, next)| is_tspecial(*next)) => {
                let (_, next) = chars.next().expect("peeked");
                value.push(next);
            }
            '\r' | '\n' => return None,
            c => value.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_bytes_match_go() {
        let mut writer = MultipartWriter::with_boundary("b0undary".into());
        let mut body = Vec::new();
        body.extend_from_slice(&writer.form_file("files", "/tmp/a \"q\".txt"));
        body.extend_from_slice(b"data");
        body.extend_from_slice(&writer.part(&[
            ("Content-Type", "application/json"),
            ("Content-Disposition", "form-data; name=\"response\""),
        ]));
        body.extend_from_slice(b"{}\n");
        body.extend_from_slice(&writer.close());
        assert_eq!(
            String::from_utf8(body).unwrap(),
            "--b0undary\r\n\
             Content-Disposition: form-data; name=\"files\"; filename=\"/tmp/a \\\"q\\\".txt\"\r\n\
             Content-Type: application/octet-stream\r\n\r\n\
             data\r\n--b0undary\r\n\
             Content-Disposition: form-data; name=\"response\"\r\n\
             Content-Type: application/json\r\n\r\n\
             {}\n\r\n--b0undary--\r\n"
        );
        assert_eq!(
            writer.content_type(),
            "multipart/form-data; boundary=b0undary"
        );
    }

    #[test]
    fn random_boundaries_are_60_hex_characters() {
        let writer = MultipartWriter::new();
        let boundary = writer.content_type().split('=').nth(1).unwrap().to_string();
        assert_eq!(boundary.len(), 60);
        assert!(boundary.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn media_type_with_quoted_boundary() {
        let (kind, params) =
            parse_media_type("Multipart/Form-Data; boundary=\"0123456789abcdef\"").unwrap();
        assert_eq!(kind, "multipart/form-data");
        assert_eq!(param(&params, "boundary"), Some("0123456789abcdef"));
        let (kind, params) = parse_media_type("application/json").unwrap();
        assert_eq!(kind, "application/json");
        assert!(params.is_empty());
        assert!(parse_media_type("").is_none());
        assert!(parse_media_type("text/plain; x").is_none());
        assert!(parse_media_type("a/b; x=1; x=2").is_none());
        assert!(parse_media_type("a/b;").is_some());
    }

    #[test]
    fn disposition_names_and_filenames() {
        let cd = r#"form-data; name="files"; filename="/tmp/x \"y\" \z""#;
        assert_eq!(form_name(Some(cd)), "files");
        assert_eq!(form_filename(Some(cd)), "/tmp/x \"y\" \\z");
        assert_eq!(form_name(Some("attachment; name=\"x\"")), "");
        assert_eq!(form_name(None), "");
        assert_eq!(form_filename(Some("form-data; name=\"request\"")), "");
    }
}
