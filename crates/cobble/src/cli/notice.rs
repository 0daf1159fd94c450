//! `notice <id>` or `notice <type> <key>`: one notice as YAML.

use clap::Args;
use cobble_client::types::NoticeInfo;
use cobble_client::{Client, NoticesOptions};

use super::{Output, write_all};

/// Arguments of `notice`.
#[derive(Debug, Args)]
pub struct NoticeArgs {
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
pub async fn execute(args: NoticeArgs, client: &Client, out: &mut Output) -> anyhow::Result<()> {
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
    write_all(out, &yaml(&notice)?)
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

/// The notice as YAML, field for field as Pebble prints it: times and durations plain (Go's
/// YAML writes them unquoted), other strings quoted only where YAML needs it.
fn yaml(n: &NoticeInfo) -> anyhow::Result<String> {
    let scalar = |text: &str| -> anyhow::Result<String> {
        Ok(serde_saphyr::to_string(&text)?.trim_end().to_string())
    };
    let mut out = format!("id: {}\n", scalar(&n.id)?);
    match n.user_id {
        Some(uid) => out.push_str(&format!("user-id: {uid}\n")),
        None => out.push_str("user-id: null\n"),
    }
    out.push_str(&format!("type: {}\n", scalar(&n.kind)?));
    out.push_str(&format!("key: {}\n", scalar(&n.key)?));
    out.push_str(&format!("first-occurred: {}\n", n.first_occurred));
    out.push_str(&format!("last-occurred: {}\n", n.last_occurred));
    out.push_str(&format!("last-repeated: {}\n", n.last_repeated));
    out.push_str(&format!("occurrences: {}\n", n.occurrences));
    if !n.last_data.is_empty() {
        out.push_str("last-data:\n");
        for (name, value) in &n.last_data {
            out.push_str(&format!("    {}: {}\n", scalar(name)?, scalar(value)?));
        }
    }
    if let Some(d) = &n.repeat_after {
        out.push_str(&format!("repeat-after: {d}\n"));
    }
    if let Some(d) = &n.expire_after {
        out.push_str(&format!("expire-after: {d}\n"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

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
            yaml(&notice).unwrap(),
            "id: \"1\"\nuser-id: null\ntype: custom\nkey: a.b/c\n\
             first-occurred: 2023-09-05T17:18:00Z\nlast-occurred: 2023-09-05T19:18:00.5Z\n\
             last-repeated: 2023-09-05T18:18:00Z\noccurrences: 3\nlast-data:\n    name: value\n\
             repeat-after: 1h0m0s\nexpire-after: 168h0m0s\n"
        );
    }
}
