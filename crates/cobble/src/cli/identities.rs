//! `identities`, `identity`, `add-identities`, `update-identities` and `remove-identities`:
//! the daemon's named identities, listed or changed from a YAML file of the form
//! `identities: {name: {access: ..., local: {user-id: ...}}}`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::Args;
use cobble_client::Client;
use cobble_client::identities::{IdentitiesFile, Identity};

use super::format::tabulate;
use super::structured::{self, Fields, Format, Value};
use super::{Output, write_all};

/// Arguments of `identities`.
#[derive(Debug, Args)]
pub(super) struct IdentitiesArgs {
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// Arguments of `identity`.
#[derive(Debug, Args)]
pub(super) struct IdentityArgs {
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// The identity to show.
    #[arg(value_name = "<name>")]
    name: String,
}

/// Arguments of `add-identities` and `remove-identities`.
#[derive(Debug, Args)]
pub(super) struct FromArgs {
    /// Path of YAML file to read identities from (required)
    #[arg(long, value_name = "FILE")]
    from: PathBuf,
}

/// Arguments of `update-identities`.
#[derive(Debug, Args)]
pub(super) struct UpdateArgs {
    /// Path of YAML file to read identities from (required)
    #[arg(long, value_name = "FILE")]
    from: PathBuf,
    /// Replace (add or update) identities; remove null identities
    #[arg(long)]
    replace: bool,
}

/// Runs `identities`.
pub(super) async fn list(
    args: IdentitiesArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    let identities = client.identities().await?;
    if !args.format.is_text() {
        let by_name = identities
            .iter()
            .map(|(name, identity)| (name.clone(), structured::identity(identity)))
            .collect();
        let value = Fields::new()
            .field("identities", Value::Map(by_name))
            .build();
        return args.format.write(out, &value);
    }
    if identities.is_empty() {
        eprintln!("No identities.");
        return Ok(());
    }
    let mut rows = vec![vec!["Name".to_owned(), "Access".into(), "Types".into()]];
    for (name, identity) in &identities {
        rows.push(vec![name.clone(), identity.access.clone(), types(identity)]);
    }
    write_all(out, &tabulate(&rows))
}

/// The authentication types of an identity, sorted, as the table shows them.
fn types(identity: &Identity) -> String {
    let mut types = Vec::new();
    if identity.basic.is_some() {
        types.push("basic");
    }
    if identity.cert.is_some() {
        types.push("cert");
    }
    if identity.local.is_some() {
        types.push("local");
    }
    if types.is_empty() {
        types.push("unknown");
    }
    types.join(",")
}

/// Runs `identity`.
pub(super) async fn show(
    args: IdentityArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    let mut identities = client.identities().await?;
    let Some(identity) = identities.remove(&args.name) else {
        bail!("cannot find identity {}", cobble_plan::go_quote(&args.name));
    };
    // The text format is the YAML.
    let format = match args.format {
        Format::Text => Format::Yaml,
        other => other,
    };
    format.write(out, &structured::identity(&identity))
}

/// Runs `add-identities`.
pub(super) async fn add(args: FromArgs, client: &Client, out: &mut Output) -> anyhow::Result<()> {
    let identities = read_identities(&args.from).await?;
    let count = identities.len();
    client.post_identities("add", identities).await?;
    let added = match count {
        1 => "1 new identity".to_owned(),
        n => format!("{n} new identities"),
    };
    write_all(out, &format!("Added {added}.\n"))
}

/// Runs `update-identities`.
pub(super) async fn update(
    args: UpdateArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    let identities = read_identities(&args.from).await?;
    let count = identities.len();
    if args.replace {
        client.post_identities("replace", identities).await?;
        write_all(out, &format!("Replaced {}.\n", items(count)))
    } else {
        client.post_identities("update", identities).await?;
        write_all(out, &format!("Updated {}.\n", items(count)))
    }
}

/// Runs `remove-identities`: the file names the identities; their values do not matter.
pub(super) async fn remove(
    args: FromArgs,
    client: &Client,
    out: &mut Output,
) -> anyhow::Result<()> {
    let identities = read_identities(&args.from).await?;
    let count = identities.len();
    let names = identities.into_keys().map(|name| (name, None)).collect();
    client.post_identities("remove", names).await?;
    write_all(out, &format!("Removed {}.\n", items(count)))
}

fn items(count: usize) -> String {
    match count {
        1 => "1 identity".into(),
        n => format!("{n} identities"),
    }
}

/// Reads a YAML file of identities.
pub(super) async fn read_identities(
    path: &std::path::Path,
) -> anyhow::Result<BTreeMap<String, Option<Identity>>> {
    // The CLI's runtime serves this one command; a small file read cannot hold anyone up.
    let bytes = std::fs::read(path).map_err(|e| {
        anyhow::anyhow!(
            "{}",
            super::go_path_error("open", &path.to_string_lossy(), &e)
        )
    })?;
    parse_identities(&bytes)
}

/// Parses the YAML of an identities file.
pub(super) fn parse_identities(bytes: &[u8]) -> anyhow::Result<BTreeMap<String, Option<Identity>>> {
    let text = std::str::from_utf8(bytes).context("cannot parse identities: not UTF-8")?;
    let file: IdentitiesFile = serde_saphyr::from_str(text)
        .map_err(|e| anyhow::anyhow!("cannot parse identities: {e}"))?;
    Ok(file.identities)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_names_identities_with_their_types() {
        let parsed = parse_identities(
            b"identities:\n  bob:\n    access: admin\n    local:\n      user-id: 42\n  gone: null\n",
        )
        .unwrap();
        assert_eq!(parsed["bob"].as_ref().unwrap().access, "admin");
        assert_eq!(
            parsed["bob"]
                .as_ref()
                .unwrap()
                .local
                .as_ref()
                .unwrap()
                .user_id,
            Some(42)
        );
        assert_eq!(parsed["gone"], None);
        assert_eq!(types(parsed["bob"].as_ref().unwrap()), "local");
        assert_eq!(items(1), "1 identity");
        assert_eq!(items(2), "2 identities");
    }
}
