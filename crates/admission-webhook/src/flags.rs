//! Command-line flags, parsed the way Go's `flag` package parses them, so that every command
//! line the Go webhook accepts means the same here: `-f=v`, `--f=v`, `-f v`, `--f v`, bare
//! `-cache` for a boolean, `--` or the first non-flag argument ending the flags, `-h` and
//! `-help` printing the usage (exit 0), and an unknown flag or a bad value printing the
//! error and the usage (exit 2).

use std::path::PathBuf;

/// What the command line asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub tls_cert_file: PathBuf,
    pub tls_key_file: PathBuf,
    /// Go reads any `int`; a value that is no TCP port fails when binding, as there.
    pub webhook_port: i64,
    /// Empty: look for a configuration as controller-runtime does.
    pub kubeconfig: PathBuf,
    /// Serve from a watch-fed cache instead of a LIST per admission.
    pub cache: bool,
    /// Which passed socket to accept on (`LISTEN_FDNAMES`); `None` (or empty, which Go
    /// cannot tell from unset): the one named `https`, else the first.
    pub listen_fd_name: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            tls_cert_file: "/etc/webhook/certs/cert.pem".into(),
            tls_key_file: "/etc/webhook/certs/key.pem".into(),
            webhook_port: 4443,
            kubeconfig: PathBuf::new(),
            cache: false,
            listen_fd_name: None,
        }
    }
}

/// Why parsing stopped without options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// `-h` or `-help`: print the usage and exit 0.
    Help,
    /// Print the message, then the usage, and exit 2.
    Error(String),
}

struct Flag {
    name: &'static str,
    kind: &'static str,
    usage: &'static str,
    default: &'static str,
}

const FLAGS: &[Flag] = &[
    Flag {
        name: "cache",
        kind: "",
        usage: "Answer from a watch-fed cache of PodDefaults instead of listing them for every admission\n(faster, but a PodDefault created a moment before a pod may not be seen yet).",
        default: "",
    },
    Flag {
        name: "kubeconfig",
        kind: "string",
        usage: "Paths to a kubeconfig. Only required if out-of-cluster.",
        default: "",
    },
    Flag {
        name: "listen-fd-name",
        kind: "string",
        usage: "Accept on the listening socket of this name (LISTEN_FDNAMES) that a service manager\npassed (LISTEN_FDS, LISTEN_PID) instead of listening on -webhookPort. Unset: the\none named \"https\", else the first. Without passed sockets, -webhookPort is used.",
        default: "",
    },
    Flag {
        name: "tlsCertFile",
        kind: "string",
        usage: "File containing the x509 Certificate for HTTPS.",
        default: "\"/etc/webhook/certs/cert.pem\"",
    },
    Flag {
        name: "tlsKeyFile",
        kind: "string",
        usage: "File containing the x509 private key to --tlsCertFile.",
        default: "\"/etc/webhook/certs/key.pem\"",
    },
    Flag {
        name: "webhookPort",
        kind: "int",
        usage: "Port number on which the webhook listens.",
        default: "4443",
    },
];

/// The usage text, laid out as Go's `flag.PrintDefaults`.
pub fn usage(program: &str) -> String {
    let mut out = format!("Usage of {program}:\n");
    for flag in FLAGS {
        out.push_str(&format!("  -{}", flag.name));
        if !flag.kind.is_empty() {
            out.push(' ');
            out.push_str(flag.kind);
        }
        out.push_str("\n    \t");
        out.push_str(&flag.usage.replace('\n', "\n    \t"));
        if !flag.default.is_empty() {
            out.push_str(&format!(" (default {})", flag.default));
        }
        out.push('\n');
    }
    out
}

/// Parses the arguments after the program name. Arguments after the flags are ignored, as
/// the Go webhook ignores them.
pub fn parse<I, S>(args: I) -> Result<Options, Stop>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut args: std::collections::VecDeque<String> = args.into_iter().map(Into::into).collect();
    let mut options = Options::default();
    while let Some(arg) = args.pop_front() {
        if arg.len() < 2 || !arg.starts_with('-') {
            break;
        }
        let body = match arg.strip_prefix("--") {
            Some("") => break,
            Some(rest) => rest,
            None => &arg[1..],
        };
        if body.is_empty() || body.starts_with('-') || body.starts_with('=') {
            return Err(Stop::Error(format!("bad flag syntax: {arg}")));
        }
        let (name, inline) = match body.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => (body, None),
        };
        let Some(flag) = FLAGS.iter().find(|f| f.name == name) else {
            if name == "h" || name == "help" {
                return Err(Stop::Help);
            }
            return Err(Stop::Error(format!(
                "flag provided but not defined: -{name}"
            )));
        };
        if flag.kind.is_empty() {
            options.cache = match inline {
                None => true,
                Some(value) => parse_bool(&value).ok_or_else(|| {
                    Stop::Error(format!(
                        "invalid boolean value {value:?} for -{name}: parse error"
                    ))
                })?,
            };
            continue;
        }
        let value = match inline.or_else(|| args.pop_front()) {
            Some(value) => value,
            None => return Err(Stop::Error(format!("flag needs an argument: -{name}"))),
        };
        match name {
            "kubeconfig" => options.kubeconfig = value.into(),
            "listen-fd-name" => options.listen_fd_name = Some(value).filter(|v| !v.is_empty()),
            "tlsCertFile" => options.tls_cert_file = value.into(),
            "tlsKeyFile" => options.tls_key_file = value.into(),
            "webhookPort" => {
                options.webhook_port = parse_int(&value).ok_or_else(|| {
                    Stop::Error(format!(
                        "invalid value {value:?} for flag -{name}: parse error"
                    ))
                })?
            }
            _ => unreachable!("every string flag is handled"),
        }
    }
    Ok(options)
}

/// Go's `strconv.ParseBool`.
fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// Go's `strconv.ParseInt(s, 0, 64)`: a sign, then decimal, `0x`, `0o`, `0b` or a leading
/// `0` for octal, with `_` between digits when a prefix is given.
fn parse_int(s: &str) -> Option<i64> {
    let (negative, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let lower = digits.to_ascii_lowercase();
    let (radix, body, prefixed) = if let Some(b) = lower.strip_prefix("0x") {
        (16, b.to_owned(), true)
    } else if let Some(b) = lower.strip_prefix("0o") {
        (8, b.to_owned(), true)
    } else if let Some(b) = lower.strip_prefix("0b") {
        (2, b.to_owned(), true)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, lower[1..].to_owned(), true)
    } else {
        (10, lower.clone(), false)
    };
    // An underscore may follow a base prefix or separate digits, nowhere else.
    let body = if prefixed {
        body.strip_prefix('_').unwrap_or(&body)
    } else {
        &body
    };
    if body.is_empty() || body.starts_with('_') || body.ends_with('_') || body.contains("__") {
        return None;
    }
    if body.contains('_') && !prefixed {
        return None;
    }
    let magnitude = i128::from_str_radix(&body.replace('_', ""), radix).ok()?;
    let value = if negative { -magnitude } else { magnitude };
    i64::try_from(value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(args: &[&str]) -> Options {
        parse(args.iter().copied()).unwrap()
    }

    #[test]
    fn every_go_form_sets_the_flag() {
        for args in [
            &["-tlsCertFile=/c"][..],
            &["--tlsCertFile=/c"],
            &["-tlsCertFile", "/c"],
            &["--tlsCertFile", "/c"],
        ] {
            assert_eq!(ok(args).tls_cert_file, PathBuf::from("/c"), "{args:?}");
        }
        let all = ok(&[
            "--tlsKeyFile",
            "/k",
            "-webhookPort=8443",
            "-kubeconfig",
            "/kc",
            "-cache",
        ]);
        assert_eq!(
            all,
            Options {
                tls_cert_file: "/etc/webhook/certs/cert.pem".into(),
                tls_key_file: "/k".into(),
                webhook_port: 8443,
                kubeconfig: "/kc".into(),
                cache: true,
                listen_fd_name: None,
            }
        );
        for args in [
            &["-listen-fd-name=web"][..],
            &["--listen-fd-name=web"],
            &["-listen-fd-name", "web"],
            &["--listen-fd-name", "web"],
        ] {
            assert_eq!(ok(args).listen_fd_name.as_deref(), Some("web"), "{args:?}");
        }
        assert_eq!(ok(&["-listen-fd-name="]).listen_fd_name, None);
        assert_eq!(ok(&[]), Options::default());
    }

    #[test]
    fn booleans_take_no_separate_value() {
        assert!(ok(&["-cache"]).cache);
        assert!(!ok(&["-cache=false"]).cache);
        assert!(ok(&["--cache=T"]).cache);
        // `-cache false` is the flag, then a positional argument that ends the flags.
        let options = ok(&["-cache", "false", "-webhookPort", "1"]);
        assert!(options.cache);
        assert_eq!(options.webhook_port, 4443);
        assert_eq!(
            parse(["-cache=maybe"]),
            Err(Stop::Error(
                "invalid boolean value \"maybe\" for -cache: parse error".into()
            ))
        );
    }

    #[test]
    fn the_flags_end_where_go_ends_them() {
        assert_eq!(ok(&["--", "-webhookPort", "1"]).webhook_port, 4443);
        assert_eq!(ok(&["x", "-webhookPort", "1"]).webhook_port, 4443);
        assert_eq!(ok(&["-", "-webhookPort", "1"]).webhook_port, 4443);
    }

    #[test]
    fn help_and_errors() {
        assert_eq!(parse(["-h"]), Err(Stop::Help));
        assert_eq!(parse(["--help"]), Err(Stop::Help));
        assert_eq!(
            parse(["-v=4"]),
            Err(Stop::Error("flag provided but not defined: -v".into()))
        );
        assert_eq!(
            parse(["-webhookPort"]),
            Err(Stop::Error("flag needs an argument: -webhookPort".into()))
        );
        assert_eq!(
            parse(["-webhookPort=abc"]),
            Err(Stop::Error(
                "invalid value \"abc\" for flag -webhookPort: parse error".into()
            ))
        );
        assert_eq!(
            parse(["---x"]),
            Err(Stop::Error("bad flag syntax: ---x".into()))
        );
        assert_eq!(
            parse(["-=x"]),
            Err(Stop::Error("bad flag syntax: -=x".into()))
        );
    }

    #[test]
    fn ints_as_go_reads_them() {
        for (text, want) in [
            ("4443", Some(4443)),
            ("0x115b", Some(4443)),
            ("010", Some(8)),
            ("0b11", Some(3)),
            ("-1", Some(-1)),
            ("1_000", None),
            ("0x_1_0", Some(16)),
            ("", None),
            ("9999999999999999999", None),
        ] {
            assert_eq!(parse_int(text), want, "{text}");
        }
    }

    #[test]
    fn usage_reads_like_go() {
        let text = usage("webhook");
        assert!(
            text.starts_with("Usage of webhook:\n  -cache\n    \t"),
            "{text}"
        );
        assert!(text.contains(
            "  -tlsCertFile string\n    \tFile containing the x509 Certificate for HTTPS. (default \"/etc/webhook/certs/cert.pem\")\n"
        ));
        assert!(text.contains(
            "  -listen-fd-name string\n    \tAccept on the listening socket of this name (LISTEN_FDNAMES) that a service manager\n    \tpassed"
        ));
        assert!(text.contains(
            "  -webhookPort int\n    \tPort number on which the webhook listens. (default 4443)\n"
        ));
    }
}
