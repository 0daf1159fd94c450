//! `notify <key> [name=value...]`: record a custom notice.

use std::collections::BTreeMap;
use std::time::Duration;

use clap::Args;
use cobble_client::{Client, NotifyOptions};

use super::notices::go_duration;
use super::{Output, write_all};

/// Arguments of `notify`.
#[derive(Debug, Args)]
pub(super) struct NotifyArgs {
    /// Prevent notice with same type and key from reoccurring within this duration
    #[arg(long, value_parser = go_duration)]
    repeat_after: Option<i64>,
    /// The notice's key, in `domain.com/path` form.
    #[arg(required = true, value_name = "key")]
    key: String,
    /// Data fields of this occurrence.
    #[arg(value_name = "name=value")]
    data: Vec<String>,
}

/// Runs `notify`.
pub(super) async fn execute(
    args: NotifyArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    let mut data = BTreeMap::new();
    for pair in &args.data {
        let Some((name, value)) = pair.split_once('=') else {
            anyhow::bail!(
                r#"data args must be in "name=value" format, not {}"#,
                cobble_plan::go_quote(pair)
            );
        };
        data.insert(name.to_string(), value.to_string());
    }
    let options = NotifyOptions {
        key: args.key,
        data,
        repeat_after: args
            .repeat_after
            .filter(|n| *n != 0)
            .map(|n| Duration::from_nanos(n.max(0) as u64)),
    };
    let id = client.notify(&options).await?;
    write_all(out, &format!("Recorded notice {id}\n"))
}
