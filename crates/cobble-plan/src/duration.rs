//! Go-compatible durations.
//!
//! Pebble reads every duration in a layer with Go's `time.ParseDuration` and prints it with
//! `time.Duration.String()`, so `60s` comes back as `1m0s` and `1us` as `1µs`. No Rust crate
//! reproduces either side, so both are written here against Go's documented behaviour:
//! a duration is a signed 64-bit count of nanoseconds; the text form is a sequence of decimal
//! numbers (optionally fractional) each followed by a unit (`ns`, `us`/`µs`/`μs`, `ms`, `s`,
//! `m`, `h`), with an optional leading sign, or the bare string `0`.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

const NANOSECOND: u64 = 1;
const MICROSECOND: u64 = 1_000 * NANOSECOND;
const MILLISECOND: u64 = 1_000 * MICROSECOND;
const SECOND: u64 = 1_000 * MILLISECOND;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;

/// The magnitude limit of a Go duration: `i64::MAX` for positive values, one more for negative.
const LIMIT: u64 = 1 << 63;

/// A duration string that Go's `time.ParseDuration` would reject.
///
/// The `Display` text is Go's own error text, byte for byte, because clients and tests match
/// on it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Malformed text, or a value that does not fit in 64 bits of nanoseconds.
    #[error("time: invalid duration {}", go_time_quote(.input))]
    Invalid {
        /// The whole input.
        input: String,
    },
    /// A number without a unit, such as `"1"`.
    #[error("time: missing unit in duration {}", go_time_quote(.input))]
    MissingUnit {
        /// The whole input.
        input: String,
    },
    /// A unit Go does not know, such as the `d` in `"1d"`.
    #[error("time: unknown unit {} in duration {}", go_time_quote(.unit), go_time_quote(.input))]
    UnknownUnit {
        /// The unrecognised unit text.
        unit: String,
        /// The whole input.
        input: String,
    },
}

/// Parses a duration exactly as Go's `time.ParseDuration` does, returning nanoseconds.
pub fn parse_duration(input: &str) -> Result<i64, DurationError> {
    let invalid = || DurationError::Invalid {
        input: input.to_owned(),
    };
    let mut rest = input.as_bytes();
    let mut negative = false;
    if let Some((&sign @ (b'-' | b'+'), tail)) = rest.split_first() {
        negative = sign == b'-';
        rest = tail;
    }
    if rest == b"0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }

    let mut total: u64 = 0;
    while !rest.is_empty() {
        if !(rest[0] == b'.' || rest[0].is_ascii_digit()) {
            return Err(invalid());
        }
        let (whole, after_whole) = leading_int(rest).ok_or_else(invalid)?;
        let had_whole = after_whole.len() != rest.len();
        rest = after_whole;

        let (mut fraction, mut scale, mut had_fraction) = (0u64, 1f64, false);
        if let Some((b'.', tail)) = rest.split_first() {
            let (f, s, after_fraction) = leading_fraction(tail);
            had_fraction = after_fraction.len() != tail.len();
            (fraction, scale, rest) = (f, s, after_fraction);
        }
        if !had_whole && !had_fraction {
            return Err(invalid());
        }

        let unit_len = rest
            .iter()
            .position(|&c| c == b'.' || c.is_ascii_digit())
            .unwrap_or(rest.len());
        if unit_len == 0 {
            return Err(DurationError::MissingUnit {
                input: input.to_owned(),
            });
        }
        let (unit_text, tail) = rest.split_at(unit_len);
        rest = tail;
        let unit = unit_nanos(unit_text).ok_or_else(|| DurationError::UnknownUnit {
            unit: String::from_utf8_lossy(unit_text).into_owned(),
            input: input.to_owned(),
        })?;

        if whole > LIMIT / unit {
            return Err(invalid());
        }
        let mut value = whole * unit;
        if fraction > 0 {
            // Go goes through float64 here; it is exact to the nanosecond for every unit up
            // to hours, and matching its rounding matters more than avoiding floats.
            value += (fraction as f64 * (unit as f64 / scale)) as u64;
            if value > LIMIT {
                return Err(invalid());
            }
        }
        total += value;
        if total > LIMIT {
            return Err(invalid());
        }
    }
    if negative {
        // `total` is at most 2^63, whose negation is exactly `i64::MIN`.
        return Ok((total as i64).wrapping_neg());
    }
    if total > LIMIT - 1 {
        return Err(invalid());
    }
    Ok(total as i64)
}

fn unit_nanos(unit: &[u8]) -> Option<u64> {
    Some(match unit {
        b"ns" => NANOSECOND,
        b"us" => MICROSECOND,
        // U+00B5 MICRO SIGN and U+03BC GREEK SMALL LETTER MU, both accepted by Go.
        b"\xc2\xb5s" | b"\xce\xbcs" => MICROSECOND,
        b"ms" => MILLISECOND,
        b"s" => SECOND,
        b"m" => MINUTE,
        b"h" => HOUR,
        _ => return None,
    })
}

/// Consumes leading ASCII digits; `None` on overflow past 2^63.
fn leading_int(s: &[u8]) -> Option<(u64, &[u8])> {
    let digits = s.iter().take_while(|c| c.is_ascii_digit()).count();
    let mut value: u64 = 0;
    for &c in &s[..digits] {
        if value > LIMIT / 10 {
            return None;
        }
        value = value * 10 + u64::from(c - b'0');
        if value > LIMIT {
            return None;
        }
    }
    Some((value, &s[digits..]))
}

/// Consumes the digits after a decimal point. Digits beyond what fits are skipped, not an
/// error, so `0.0000000000000000000001s` is simply zero.
fn leading_fraction(s: &[u8]) -> (u64, f64, &[u8]) {
    let digits = s.iter().take_while(|c| c.is_ascii_digit()).count();
    let (mut value, mut scale, mut overflow) = (0u64, 1f64, false);
    for &c in &s[..digits] {
        if overflow {
            continue;
        }
        if value > (LIMIT - 1) / 10 {
            overflow = true;
            continue;
        }
        let next = value * 10 + u64::from(c - b'0');
        if next > LIMIT {
            overflow = true;
            continue;
        }
        value = next;
        scale *= 10.0;
    }
    (value, scale, &s[digits..])
}

/// Formats nanoseconds exactly as Go's `time.Duration.String()` does.
///
/// Below one second a single unit is used (`1.5ms`, `1µs`, `7ns`); from one second up the form
/// is hours, minutes and (fractional) seconds with leading zero parts dropped (`1m0s`,
/// `1h30m0s`, `1.5s`). Zero is `0s`.
pub fn format_duration(nanos: i64) -> String {
    let mut out = String::with_capacity(24);
    if nanos < 0 {
        out.push('-');
    }
    let magnitude = nanos.unsigned_abs();
    if magnitude == 0 {
        return "0s".to_owned();
    }
    if magnitude < SECOND {
        let (unit, precision) = match magnitude {
            m if m < MICROSECOND => ("ns", 0),
            m if m < MILLISECOND => ("µs", 3),
            _ => ("ms", 6),
        };
        push_with_fraction(&mut out, magnitude, precision);
        out.push_str(unit);
        return out;
    }
    let hours = magnitude / HOUR;
    let minutes = magnitude % HOUR / MINUTE;
    let seconds_nanos = magnitude % MINUTE;
    if hours > 0 {
        push_digits(&mut out, hours);
        out.push('h');
    }
    if hours > 0 || minutes > 0 {
        push_digits(&mut out, minutes);
        out.push('m');
    }
    push_with_fraction(&mut out, seconds_nanos, 9);
    out.push('s');
    out
}

/// Writes `value / 10^precision` with the fraction's trailing zeros (and a bare point) removed.
/// Called for every request the daemon logs, so it writes digits itself instead of going
/// through `format!`.
fn push_with_fraction(out: &mut String, value: u64, precision: u32) {
    let divisor = 10u64.pow(precision);
    push_digits(out, value / divisor);
    let mut fraction = value % divisor;
    if fraction != 0 {
        let mut width = precision;
        while fraction.is_multiple_of(10) {
            fraction /= 10;
            width -= 1;
        }
        out.push('.');
        let digits = digit_count(fraction);
        for _ in digits..width {
            out.push('0');
        }
        push_digits(out, fraction);
    }
}

/// The decimal digits of `value`.
fn push_digits(out: &mut String, value: u64) {
    let mut buffer = [0u8; 20];
    let mut at = buffer.len();
    let mut rest = value;
    loop {
        at -= 1;
        buffer[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out.push_str(std::str::from_utf8(&buffer[at..]).expect("ASCII digits"));
}

fn digit_count(value: u64) -> u32 {
    value.checked_ilog10().map_or(1, |log| log + 1)
}

/// Go's `time` package quoting for error messages: ASCII is kept (with `"` and `\` escaped);
/// anything else is written byte by byte as `\xNN`.
fn go_time_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if !c.is_ascii() || c < ' ' {
            let mut buf = [0u8; 4];
            for byte in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("\\x{byte:02x}"));
            }
        } else {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out.push('"');
    out
}

/// A duration as Pebble stores it: signed nanoseconds, written in YAML and JSON as Go's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct GoDuration(pub i64);

impl GoDuration {
    /// Builds a duration from a std one, saturating at Go's maximum.
    pub fn from_std(duration: std::time::Duration) -> GoDuration {
        GoDuration(i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX))
    }

    /// The value as a std duration. Pebble accepts negative durations (a negative timer fires
    /// at once), which std cannot hold, so they become zero.
    pub fn as_std(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(u64::try_from(self.0).unwrap_or(0))
    }
}

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

impl std::str::FromStr for GoDuration {
    type Err = DurationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_duration(s).map(GoDuration)
    }
}

impl Serialize for GoDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    /// Accepts any scalar and reads its text, like Pebble's YAML decoder: a YAML integer `10`
    /// therefore fails with `invalid duration "10"` rather than a type error.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurationVisitor;

        impl DurationVisitor {
            fn parse<E: de::Error>(text: &str) -> Result<GoDuration, E> {
                parse_duration(text)
                    .map(GoDuration)
                    .map_err(|_| E::custom(format!("invalid duration {}", go_quote(text))))
            }
        }

        impl Visitor<'_> for DurationVisitor {
            type Value = GoDuration;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration string such as \"1m30s\"")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<GoDuration, E> {
                Self::parse(v)
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<GoDuration, E> {
                Self::parse(&v.to_string())
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<GoDuration, E> {
                Self::parse(&v.to_string())
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<GoDuration, E> {
                Self::parse(&v.to_string())
            }

            fn visit_bool<E: de::Error>(self, v: bool) -> Result<GoDuration, E> {
                Self::parse(&v.to_string())
            }
        }

        deserializer.deserialize_any(DurationVisitor)
    }
}

/// Go's `%q` for strings (`strconv.Quote`), used in error messages that clients match on.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() || c == '\u{feff}' => {
                if (c as u32) <= 0xffff {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cases re-expressed from the behaviour of Go's `time.ParseDuration`.
    #[test]
    fn parses_like_go() {
        let ok: &[(&str, i64)] = &[
            ("0", 0),
            ("5s", 5 * SECOND as i64),
            ("30s", 30 * SECOND as i64),
            ("1478s", 1478 * SECOND as i64),
            ("-5s", -5 * SECOND as i64),
            ("+5s", 5 * SECOND as i64),
            ("-0", 0),
            ("+0", 0),
            ("5.0s", 5 * SECOND as i64),
            ("5.6s", 5 * SECOND as i64 + 600 * MILLISECOND as i64),
            ("5.s", 5 * SECOND as i64),
            (".5s", 500 * MILLISECOND as i64),
            ("1.0s", SECOND as i64),
            ("1.00s", SECOND as i64),
            ("1.004s", SECOND as i64 + 4 * MILLISECOND as i64),
            ("1.0040s", SECOND as i64 + 4 * MILLISECOND as i64),
            ("100.00100s", 100 * SECOND as i64 + MILLISECOND as i64),
            ("10ns", 10),
            ("11us", 11 * MICROSECOND as i64),
            ("12µs", 12 * MICROSECOND as i64),
            ("12μs", 12 * MICROSECOND as i64),
            ("13ms", 13 * MILLISECOND as i64),
            ("14s", 14 * SECOND as i64),
            ("15m", 15 * MINUTE as i64),
            ("16h", 16 * HOUR as i64),
            ("3h30m", 3 * HOUR as i64 + 30 * MINUTE as i64),
            (
                "10.5s4m",
                4 * MINUTE as i64 + 10 * SECOND as i64 + 500 * MILLISECOND as i64,
            ),
            (
                "-2m3.4s",
                -(2 * MINUTE as i64 + 3 * SECOND as i64 + 400 * MILLISECOND as i64),
            ),
            ("1h2m3s4ms5us6ns", 3_723_004_005_006),
            ("39h9m14.425s", 140_954_425 * MILLISECOND as i64),
            ("52763797000ns", 52_763_797_000),
            ("0.3333333333333333333h", 20 * MINUTE as i64),
            ("9007199254740993ns", 9_007_199_254_740_993),
            ("9223372036854775807ns", i64::MAX),
            ("9223372036854775.807us", i64::MAX),
            ("9223372036s854ms775us807ns", i64::MAX),
            ("-9223372036854775808ns", i64::MIN),
            ("-9223372036854775.808us", i64::MIN),
            ("-9223372036s854ms775us808ns", i64::MIN),
            ("-2562047h47m16.854775808s", i64::MIN),
            ("0.100000000000000000000h", 6 * MINUTE as i64),
            (
                "0.830103483285477580700h",
                49 * MINUTE as i64 + 48 * SECOND as i64 + 372_539_827,
            ),
            ("300ms", 300 * MILLISECOND as i64),
            ("1.5h", 90 * MINUTE as i64),
            ("2h45m", 165 * MINUTE as i64),
        ];
        for &(input, want) in ok {
            assert_eq!(parse_duration(input), Ok(want), "input {input:?}");
        }
    }

    #[test]
    fn rejects_like_go_with_go_texts() {
        let bad: &[(&str, &str)] = &[
            ("", r#"time: invalid duration """#),
            ("3", r#"time: missing unit in duration "3""#),
            ("1", r#"time: missing unit in duration "1""#),
            ("-", r#"time: invalid duration "-""#),
            ("s", r#"time: invalid duration "s""#),
            (".", r#"time: invalid duration ".""#),
            ("-.", r#"time: invalid duration "-.""#),
            (".s", r#"time: invalid duration ".s""#),
            ("+.s", r#"time: invalid duration "+.s""#),
            ("1d", r#"time: unknown unit "d" in duration "1d""#),
            ("1h 30m", r#"time: unknown unit "h " in duration "1h 30m""#),
            (" 1s", r#"time: invalid duration " 1s""#),
            ("1.1.1s", r#"time: missing unit in duration "1.1.1s""#),
            ("\"x", r#"time: invalid duration "\"x""#),
            ("3000000h", r#"time: invalid duration "3000000h""#),
            (
                "9223372036854775808ns",
                r#"time: invalid duration "9223372036854775808ns""#,
            ),
            (
                "9223372036854775.808us",
                r#"time: invalid duration "9223372036854775.808us""#,
            ),
            (
                "9223372036854ms775us808ns",
                r#"time: invalid duration "9223372036854ms775us808ns""#,
            ),
            (
                "-9223372036854775809ns",
                r#"time: invalid duration "-9223372036854775809ns""#,
            ),
            (
                "1µ",
                r#"time: unknown unit "\xc2\xb5" in duration "1\xc2\xb5""#,
            ),
        ];
        for &(input, want) in bad {
            let err = parse_duration(input).expect_err(input);
            assert_eq!(err.to_string(), want, "input {input:?}");
        }
    }

    #[test]
    fn formats_like_go() {
        let cases: &[(i64, &str)] = &[
            (0, "0s"),
            (1, "1ns"),
            (1_100, "1.1µs"),
            (MICROSECOND as i64, "1µs"),
            (2_200 * MICROSECOND as i64, "2.2ms"),
            (300 * MILLISECOND as i64, "300ms"),
            (500 * MILLISECOND as i64, "500ms"),
            (1_500 * MILLISECOND as i64, "1.5s"),
            (30 * SECOND as i64, "30s"),
            (60 * SECOND as i64, "1m0s"),
            (90 * SECOND as i64, "1m30s"),
            (4 * MINUTE as i64 + 5 * SECOND as i64, "4m5s"),
            (4 * MINUTE as i64 + 5_001 * MILLISECOND as i64, "4m5.001s"),
            (
                5 * HOUR as i64 + 6 * MINUTE as i64 + 7_001 * MILLISECOND as i64,
                "5h6m7.001s",
            ),
            (8 * MINUTE as i64 + 1, "8m0.000000001s"),
            (90 * MINUTE as i64, "1h30m0s"),
            (168 * HOUR as i64, "168h0m0s"),
            (-2 * MINUTE as i64, "-2m0s"),
            (-1, "-1ns"),
            (i64::MAX, "2562047h47m16.854775807s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
            // Request times in the daemon log, as Pebble printed them.
            (1_810_531, "1.810531ms"),
            (58_307, "58.307µs"),
            (1_004_404_658, "1.004404658s"),
            (1_005_000, "1.005ms"),
            (10_000_020, "10.00002ms"),
        ];
        for &(nanos, want) in cases {
            assert_eq!(format_duration(nanos), want, "nanos {nanos}");
        }
    }

    #[test]
    fn go_duration_std_conversion_clamps_negative() {
        assert_eq!(GoDuration(-5).as_std(), std::time::Duration::ZERO);
        assert_eq!(
            GoDuration(1_500).as_std(),
            std::time::Duration::from_nanos(1_500)
        );
        assert_eq!(GoDuration(90 * SECOND as i64).to_string(), "1m30s");
    }

    proptest::proptest! {
        #[test]
        fn format_then_parse_round_trips(nanos in proptest::num::i64::ANY) {
            proptest::prop_assert_eq!(parse_duration(&format_duration(nanos)), Ok(nanos));
        }

        #[test]
        fn parse_never_panics(text in "\\PC{0,24}") {
            let _ = parse_duration(&text);
        }
    }
}
