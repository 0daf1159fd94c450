//! Shell-style word splitting and quoting, compatible with the `strutil/shlex` package Pebble
//! uses (a fork of google/shlex).
//!
//! This is deliberately *not* POSIX `sh`: there is no expansion of any kind, a backslash inside
//! double quotes escapes whatever character follows it, and an unquoted `#` at the start of a
//! word begins a comment that runs to the end of the line. The `shlex` crate follows POSIX
//! instead, which is why the splitter lives here.

/// Why a command line could not be split. The texts are the Go library's, since Pebble
/// embeds them in its own errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShellError {
    /// The input ended inside `'...'` or `"..."`.
    #[error("EOF found when expecting closing quote")]
    UnclosedQuote,
    /// The input ended right after a backslash.
    #[error("EOF found after escape character")]
    TrailingEscape,
}

enum State {
    /// Between words.
    Start,
    /// Inside an unquoted word.
    Word,
    /// After a backslash outside quotes.
    Escape,
    /// Inside `"..."`.
    Double,
    /// After a backslash inside `"..."`.
    DoubleEscape,
    /// Inside `'...'`.
    Single,
    /// Inside a `#` comment.
    Comment,
}

/// Splits `input` into words the way Pebble splits `command` fields.
pub fn shell_split(input: &str) -> Result<Vec<String>, ShellError> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut state = State::Start;
    for c in input.chars() {
        state = match state {
            State::Start => match c {
                ' ' | '\t' | '\r' | '\n' => State::Start,
                '"' => State::Double,
                '\'' => State::Single,
                '\\' => State::Escape,
                '#' => State::Comment,
                c => {
                    word.push(c);
                    State::Word
                }
            },
            State::Word => match c {
                ' ' | '\t' | '\r' | '\n' => {
                    words.push(std::mem::take(&mut word));
                    State::Start
                }
                '"' => State::Double,
                '\'' => State::Single,
                '\\' => State::Escape,
                c => {
                    word.push(c);
                    State::Word
                }
            },
            State::Escape => {
                word.push(c);
                State::Word
            }
            State::Double => match c {
                '"' => State::Word,
                '\\' => State::DoubleEscape,
                c => {
                    word.push(c);
                    State::Double
                }
            },
            State::DoubleEscape => {
                word.push(c);
                State::Double
            }
            State::Single => match c {
                '\'' => State::Word,
                c => {
                    word.push(c);
                    State::Single
                }
            },
            State::Comment => match c {
                '\n' => State::Start,
                _ => State::Comment,
            },
        };
    }
    match state {
        State::Start | State::Comment => {}
        State::Word => words.push(word),
        State::Escape | State::DoubleEscape => return Err(ShellError::TrailingEscape),
        State::Double | State::Single => return Err(ShellError::UnclosedQuote),
    }
    Ok(words)
}

/// Quotes one word so that [`shell_split`] (and a POSIX shell) reads it back unchanged.
///
/// Words made only of `[A-Za-z0-9@%_+=:,./-]` are left alone; anything else is wrapped in
/// single quotes, with each embedded `'` written as `'"'"'`. The empty word is `''`.
pub fn shell_quote(word: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "@%_-+=:,./".contains(c);
    if word.is_empty() {
        return "''".to_owned();
    }
    if word.chars().all(safe) {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', r#"'"'"'"#))
}

/// Joins words into one command line with [`shell_quote`], separated by single spaces.
pub fn shell_join(args: &[String]) -> String {
    args.iter()
        .map(|arg| shell_quote(arg))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn splits_like_pebble() {
        let input = "\\one two \"three four\" \"five \\\"six\\\"\" seven#eight # nine # ten\n eleven 'twelve\\' thirteen=13 fourteen/14";
        assert_eq!(
            shell_split(input).unwrap(),
            words(&[
                "one",
                "two",
                "three four",
                "five \"six\"",
                "seven#eight",
                "eleven",
                "twelve\\",
                "thirteen=13",
                "fourteen/14"
            ])
        );
        assert_eq!(shell_split("").unwrap(), Vec::<String>::new());
        assert_eq!(shell_split("   ").unwrap(), Vec::<String>::new());
        assert_eq!(shell_split("#").unwrap(), Vec::<String>::new());
        assert_eq!(shell_split("a \"\" b").unwrap(), words(&["a", "", "b"]));
        assert_eq!(shell_split("a''b").unwrap(), words(&["ab"]));
        // Inside double quotes a backslash escapes anything, unlike POSIX.
        assert_eq!(shell_split(r#""a\b""#).unwrap(), words(&["ab"]));
        assert_eq!(
            shell_split(r#"cmd -v [ --foo bar -e "x [ y ] z" ]"#).unwrap(),
            words(&["cmd", "-v", "[", "--foo", "bar", "-e", "x [ y ] z", "]"])
        );
    }

    #[test]
    fn split_errors_use_go_texts() {
        for input in ["foo\"", "foo'", "foo '"] {
            assert_eq!(
                shell_split(input).unwrap_err().to_string(),
                "EOF found when expecting closing quote"
            );
        }
        for input in ["foo\\", "\"foo\\"] {
            assert_eq!(
                shell_split(input).unwrap_err().to_string(),
                "EOF found after escape character"
            );
        }
    }

    #[test]
    fn quotes_like_pebble() {
        let safe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%_-+=:,./";
        let cases = [
            ("", "''"),
            (safe, safe),
            ("foo bar xyz", "'foo bar xyz'"),
            ("foo\"bar", "'foo\"bar'"),
            ("foo`bar", "'foo`bar'"),
            ("foo\\bar", "'foo\\bar'"),
            ("foo\u{e9}bar", "'foo\u{e9}bar'"),
            ("foo!'bar'", r#"'foo!'"'"'bar'"'"''"#),
            ("'foo$'bar", r#"''"'"'foo$'"'"'bar'"#),
        ];
        for (input, want) in cases {
            assert_eq!(shell_quote(input), want, "input {input:?}");
        }
    }

    #[test]
    fn joins_like_pebble() {
        let cases: &[(&[&str], &str)] = &[
            (&["a ", "b"], "'a ' b"),
            (&["a", " b"], "a ' b'"),
            (&["a", " ", "b"], "a ' ' b"),
            (&["a", "", "b"], "a '' b"),
            (&["\"a", "b\""], "'\"a' 'b\"'"),
            (&["x y", "/foo/bar"], "'x y' /foo/bar"),
            (&[], ""),
        ];
        for (input, want) in cases {
            assert_eq!(shell_join(&words(input)), *want);
        }
    }

    proptest::proptest! {
        #[test]
        fn join_then_split_round_trips(args in proptest::collection::vec("\\PC{0,8}", 0..5)) {
            proptest::prop_assert_eq!(shell_split(&shell_join(&args)).unwrap(), args);
        }
    }
}
