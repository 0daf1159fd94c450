//! `notices`: list notices, oldest repeat first, optionally waiting for one to arrive.
//!
//! Like Pebble, the command keeps client-side bookkeeping in `$XDG_CONFIG_HOME/pebble/cli.json`
//! (per socket path): the last-repeated time of the newest notice it listed, and the time the
//! user acknowledged with `okay`; only notices repeated after that acknowledgement are listed.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use cobble_client::types::NoticeInfo;
use cobble_client::{Client, ClientConfig, NoticesOptions};
use cobble_plan::duration::{format_duration, parse_duration};
use serde_json::{Map, Value};

use super::format::tabulate;
use super::structured::{self, Fields, Format};
use super::times::TimeFormatter;
use super::{Output, write_all};

/// Go's zero `time.Time`, as it is written to `cli.json` for "never".
const GO_ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// The `cli.json` fields: when the newest notice or warning listed last repeated, and the
/// time `okay` acknowledged for each.
pub(super) const NOTICES_LAST_LISTED: &str = "notices-last-listed";
pub(super) const NOTICES_LAST_OKAYED: &str = "notices-last-okayed";
pub(super) const WARNINGS_LAST_LISTED: &str = "warnings-last-listed";
pub(super) const WARNINGS_LAST_OKAYED: &str = "warnings-last-okayed";

/// Arguments of `notices`.
#[derive(Debug, Args)]
pub(super) struct NoticesArgs {
    /// Display absolute times (in RFC 3339 format). Otherwise, display relative times up to
    /// 60 days, then YYYY-MM-DD.
    #[arg(long)]
    abs_time: bool,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// The only valid value is 'all', which lists notices with any user ID (admin only;
    /// cannot be used with --uid)
    #[arg(long)]
    users: Option<String>,
    /// Only list notices with this user ID (admin only; cannot be used with --users)
    #[arg(long)]
    uid: Option<u32>,
    /// Only list notices of this type (multiple allowed)
    #[arg(long = "type")]
    types: Vec<String>,
    /// Only list notices with this key (multiple allowed)
    #[arg(long = "key")]
    keys: Vec<String>,
    /// Wait up to this duration for matching notices to arrive
    #[arg(long, value_parser = go_duration)]
    timeout: Option<i64>,
}

/// A flag value parsed as Go's `time.ParseDuration`.
pub(super) fn go_duration(text: &str) -> Result<i64, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

/// Runs `notices`.
pub(super) async fn execute(
    args: NoticesArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    let all_users = match args.users.as_deref() {
        None => false,
        Some("all") => true,
        Some(_) => anyhow::bail!(r#"invalid "users" filter: must be "all""#),
    };
    let mut state = CliState::load(&socket_path())?;
    let options = NoticesOptions {
        all_users,
        user_id: args.uid,
        types: args.types,
        keys: args.keys,
        after: state.time(NOTICES_LAST_OKAYED),
    };
    let timeout = args.timeout.unwrap_or(0);
    let notices = if timeout != 0 {
        let wait = Duration::from_nanos(timeout.max(0) as u64);
        client.wait_notices(&options, wait).await?
    } else {
        client.notices(&options).await?
    };
    if let Some(last) = notices.last() {
        state.set(NOTICES_LAST_LISTED, &last.last_repeated);
        state
            .save()
            .map_err(|e| anyhow::anyhow!("cannot save CLI state: {e}"))?;
    }
    if !args.format.is_text() {
        let list = notices.iter().map(structured::notice).collect();
        let value = Fields::new()
            .field("notices", structured::Value::Seq(list))
            .build();
        return args.format.write(out, &value);
    }
    if notices.is_empty() {
        if timeout != 0 {
            eprintln!(
                "No matching notices after waiting {}.",
                format_duration(timeout)
            );
        } else {
            eprintln!("No matching notices.");
        }
        return Ok(());
    }
    write_all(out, &table(&notices, &TimeFormatter::new(args.abs_time)))
}

/// `ID  User  Type  Key  First  Repeated  Occurrences`.
fn table(notices: &[NoticeInfo], times: &TimeFormatter) -> String {
    let mut rows = vec![
        [
            "ID",
            "User",
            "Type",
            "Key",
            "First",
            "Repeated",
            "Occurrences",
        ]
        .map(String::from),
    ];
    for n in notices {
        rows.push([
            n.id.clone(),
            n.user_id
                .map_or_else(|| "public".to_string(), |u| u.to_string()),
            n.kind.clone(),
            shorten_key(&n.key),
            times.format(&n.first_occurred),
            times.format(&n.last_repeated),
            n.occurrences.to_string(),
        ]);
    }
    tabulate(&rows)
}

/// Keys over 32 bytes keep their first 14 and last 15 bytes around an ellipsis.
fn shorten_key(key: &str) -> String {
    let bytes = key.as_bytes();
    if bytes.len() <= 32 {
        return key.to_string();
    }
    format!(
        "{}...{}",
        String::from_utf8_lossy(&bytes[..14]),
        String::from_utf8_lossy(&bytes[bytes.len() - 15..])
    )
}

/// The socket the client talks to: the key of its entry in `cli.json`.
pub(super) fn socket_path() -> String {
    ClientConfig::from_env().socket.display().to_string()
}

/// The notices bookkeeping of one socket in `cli.json`; other entries and fields are kept
/// as they are.
pub(super) struct CliState {
    path: PathBuf,
    socket: String,
    whole: Map<String, Value>,
}

impl CliState {
    /// Pebble's `$XDG_CONFIG_HOME/pebble/cli.json`, `$HOME/.config` without it.
    fn file() -> PathBuf {
        let config = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".config")
            });
        config.join("pebble").join("cli.json")
    }

    // The CLI's runtime runs this one command: reading and writing a small file in place
    // holds up nothing else.
    pub(super) fn load(socket: &str) -> anyhow::Result<CliState> {
        let path = Self::file();
        let whole = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| anyhow::anyhow!("cannot load CLI state: {e}"))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Map::new(),
            Err(e) => anyhow::bail!("cannot load CLI state: {e}"),
        };
        Ok(CliState {
            path,
            socket: socket.to_string(),
            whole,
        })
    }

    fn entry(&mut self) -> &mut Map<String, Value> {
        let sockets = self
            .whole
            .entry("pebble")
            .or_insert_with(|| Value::Object(Map::new()));
        if !sockets.is_object() {
            *sockets = Value::Object(Map::new());
        }
        let entry = sockets
            .as_object_mut()
            .expect("an object")
            .entry(self.socket.clone())
            .or_insert_with(|| {
                let mut fresh = Map::new();
                for key in [
                    NOTICES_LAST_LISTED,
                    NOTICES_LAST_OKAYED,
                    WARNINGS_LAST_LISTED,
                    WARNINGS_LAST_OKAYED,
                ] {
                    fresh.insert(key.into(), Value::String(GO_ZERO_TIME.into()));
                }
                Value::Object(fresh)
            });
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        entry.as_object_mut().expect("an object")
    }

    /// The time stored under `key`, unless it is Go's zero time ("never").
    pub(super) fn time(&self, key: &str) -> Option<String> {
        self.whole
            .get("pebble")?
            .get(&self.socket)?
            .get(key)?
            .as_str()
            .filter(|t| *t != GO_ZERO_TIME)
            .map(str::to_owned)
    }

    /// Makes sure this socket has an entry, as Pebble's save always writes one.
    pub(super) fn touch(&mut self) {
        self.entry();
    }

    pub(super) fn set(&mut self, key: &str, time: &str) {
        self.entry().insert(key.into(), Value::String(time.into()));
    }

    pub(super) fn save(&self) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        if let Some(dir) = self.path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        let bytes = serde_json::to_vec(&self.whole).expect("JSON serialises");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&self.path)?;
        file.write_all(&bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice(id: &str, user: Option<u32>, kind: &str, key: &str) -> NoticeInfo {
        NoticeInfo {
            id: id.into(),
            user_id: user,
            kind: kind.into(),
            key: key.into(),
            first_occurred: "2023-09-05T17:18:00Z".into(),
            last_occurred: "2023-09-05T19:18:00Z".into(),
            last_repeated: "2023-09-05T18:18:00Z".into(),
            occurrences: 3,
            last_data: Default::default(),
            repeat_after: None,
            expire_after: Some("168h0m0s".into()),
        }
    }

    #[test]
    fn table_shows_owner_or_public_and_shortens_long_keys() {
        let notices = [
            notice("1", Some(1000), "custom", "a.b/c"),
            notice(
                "2",
                None,
                "warning",
                "a very long warning message that goes on and on",
            ),
        ];
        let times = TimeFormatter::at(true, jiff::ZonedDateTime::now());
        assert_eq!(
            table(&notices, &times),
            "ID   User    Type     Key                               First                 Repeated              Occurrences\n\
             1    1000    custom   a.b/c                             2023-09-05T17:18:00Z  2023-09-05T18:18:00Z  3\n\
             2    public  warning  a very long wa... goes on and on  2023-09-05T17:18:00Z  2023-09-05T18:18:00Z  3\n"
        );
    }
}
