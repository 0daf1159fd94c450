//! `notice <id>` or `notice <type> <key>`: one notice as YAML (or JSON).

use clap::Args;
use cobble_client::types::NoticeInfo;
use cobble_client::{Client, NoticesOptions};

use super::Output;
use super::structured::{self, Format};

/// Arguments of `notice`.
#[derive(Debug, Args)]
pub(super) struct NoticeArgs {
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Look up notice from user with this UID (admin only; 2-arg variant only)
    #[arg(long)]
    uid: Option<u32>,
    /// The notice's ID, or its type when a key follows.
    #[arg(required = true, value_name = "id-or-type")]
    id_or_type: String,
    /// The notice's key.
    #[arg(value_name = "key")]
    key: Option<String>,
}

/// Runs `notice`.
pub(super) async fn execute(
    args: NoticeArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    let notice = match &args.key {
        Some(key) if !key.is_empty() => {
            let options = NoticesOptions {
                user_id: args.uid,
                types: vec![args.id_or_type.clone()],
                keys: vec![key.clone()],
                ..Default::default()
            };
            let notices = client.notices(&options).await?;
            pick(notices).ok_or_else(|| {
                anyhow::anyhow!(
                    "cannot find {} notice with key {}",
                    args.id_or_type,
                    cobble_plan::go_quote(key)
                )
            })?
        }
        _ => {
            if args.uid.is_some() {
                anyhow::bail!("cannot use --uid option when looking up notice by key");
            }
            client.notice(&args.id_or_type).await?
        }
    };
    // The text format is the YAML.
    let format = match args.format {
        Format::Text => Format::Yaml,
        other => other,
    };
    format.write(out, &structured::notice(&notice))
}

/// Of the notices with one type and key (a user's and a public one), the user's.
fn pick(notices: Vec<NoticeInfo>) -> Option<NoticeInfo> {
    let owned = notices.iter().position(|n| n.user_id.is_some());
    let mut notices = notices;
    match owned {
        Some(i) => Some(notices.swap_remove(i)),
        None => notices.into_iter().next(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// The YAML of `pebble notice`, as Pebble v1.32.1 prints it.
    #[test]
    fn yaml_reads_like_pebbles() {
        let notice = NoticeInfo {
            id: "1".into(),
            user_id: None,
            kind: "custom".into(),
            key: "a.b/c".into(),
            first_occurred: "2023-09-05T17:18:00Z".into(),
            last_occurred: "2023-09-05T19:18:00.5Z".into(),
            last_repeated: "2023-09-05T18:18:00Z".into(),
            occurrences: 3,
            last_data: BTreeMap::from([("name".into(), "value".into())]),
            repeat_after: Some("1h0m0s".into()),
            expire_after: Some("168h0m0s".into()),
        };
        assert_eq!(
            structured::notice(&notice).to_yaml(),
            "id: \"1\"\nuser-id: null\ntype: custom\nkey: a.b/c\n\
             first-occurred: 2023-09-05T17:18:00Z\nlast-occurred: 2023-09-05T19:18:00.5Z\n\
             last-repeated: 2023-09-05T18:18:00Z\noccurrences: 3\nlast-data:\n    name: value\n\
             repeat-after: 1h0m0s\nexpire-after: 168h0m0s\n"
        );
    }
}
