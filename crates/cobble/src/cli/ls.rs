//! `ls [-d] [-l] <path>`: lists files on the daemon's side; the last path element may be a
//! glob pattern.

use clap::Args;
use cobble_client::Client;
use cobble_client::types::FileInfo;

use super::format::tabulate;
use super::structured::{self, Fields, Format, Value};
use super::times::{TimeFormatter, rfc3339_seconds};
use super::{Output, write_all};

/// Arguments of `ls`.
#[derive(Debug, Args)]
pub(super) struct LsArgs {
    /// Display absolute times (in RFC 3339 format). Otherwise, display relative times up to
    /// 60 days, then YYYY-MM-DD.
    #[arg(long)]
    abs_time: bool,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// List matching entries themselves, not directory contents
    #[arg(short = 'd')]
    directory: bool,
    /// Use a long listing format
    #[arg(short = 'l')]
    long_format: bool,
    /// The path (or glob) to list.
    #[arg(value_name = "path")]
    path: String,
}

/// Runs `ls`.
pub(super) async fn execute(args: LsArgs, client: &Client, out: &mut Output) -> anyhow::Result<()> {
    let (path, pattern) = parse_glob(&args.path)?;
    let files = client
        .list_files(&path, Some(&pattern), args.directory)
        .await?;
    if !args.format.is_text() {
        let list = files.iter().map(entry).collect();
        let value = Fields::new().field("files", Value::Seq(list)).build();
        return args.format.write(out, &value);
    }
    let text = if args.long_format {
        let times = TimeFormatter::new(args.abs_time);
        let rows: Vec<Vec<String>> = files.iter().map(|f| long_row(f, &times)).collect();
        tabulate(&rows)
    } else {
        files.iter().map(|f| format!("{}\n", f.name)).collect()
    };
    write_all(out, &text)
}

/// Pebble's `fileEntry`, made from what its client rebuilds of the daemon's answer: a type
/// it does not know is `unknown`, the size is there for regular files only, the time is
/// RFC 3339 at second precision in the offset the daemon used.
fn entry(file: &FileInfo) -> Value {
    let file_type = match file.file_type.as_str() {
        known @ ("file" | "directory" | "symlink" | "socket" | "named-pipe" | "device") => known,
        _ => "unknown",
    };
    let permissions = u32::from_str_radix(&file.permissions, 8).unwrap_or(0) & 0o777;
    Fields::new()
        .str("path", &file.path)
        .str("name", &file.name)
        .str("type", file_type)
        .some(
            "size",
            file.size
                .filter(|_| file_type == "file")
                .map(structured::int),
        )
        .str("permissions", &format!("{permissions:03o}"))
        .str(
            "last-modified",
            &rfc3339_seconds(&file.last_modified).unwrap_or_else(|| file.last_modified.clone()),
        )
        .some(
            "user-id",
            file.user_id.map(|u| structured::int(u64::from(u))),
        )
        .str_omitempty("user", &file.user)
        .some(
            "group-id",
            file.group_id.map(|g| structured::int(u64::from(g))),
        )
        .str_omitempty("group", &file.group)
        .build()
}

/// Pebble's `parseGlob`: a pattern is allowed in the last element only, and then the rest is
/// the directory to list.
fn parse_glob(path: &str) -> anyhow::Result<(String, String)> {
    const PATTERN_CHARS: &[char] = &['*', '?', '['];
    let trimmed = path.trim_end_matches('/');
    let (dir, file) = match trimmed.rfind('/') {
        Some(at) => (&trimmed[..=at], &trimmed[at + 1..]),
        None => ("", trimmed),
    };
    if dir.contains(PATTERN_CHARS) {
        anyhow::bail!("can only use globs on the last path element");
    }
    if file.contains(PATTERN_CHARS) {
        return Ok((dir.to_string(), file.to_string()));
    }
    Ok((path.to_string(), String::new()))
}

/// One line of `ls -l`: mode, user, group, size, time, name.
fn long_row(file: &FileInfo, times: &TimeFormatter) -> Vec<String> {
    let size = match (file.file_type.as_str(), file.size) {
        ("file", Some(size)) => format!("{:>6}", format!("{}B", format_amount(size))),
        _ => format!("{:>6}", "-"),
    };
    vec![
        mode_string(&file.file_type, &file.permissions),
        file.user.clone(),
        file.group.clone(),
        size,
        times.format(&file.last_modified),
        file.name.clone(),
    ]
}

/// Go's `os.FileMode.String()` for the mode Pebble's client rebuilds from type and
/// permissions: `drwxr-xr-x`, `-rw-r--r--`, `Lrwxrwxrwx`.
fn mode_string(file_type: &str, permissions: &str) -> String {
    let prefix = match file_type {
        "file" => "-",
        "directory" => "d",
        "symlink" => "L",
        "socket" => "S",
        "named-pipe" => "p",
        "device" => "D",
        _ => "?",
    };
    let bits = u32::from_str_radix(permissions, 8).unwrap_or(0) & 0o777;
    let mut out = prefix.to_string();
    for (i, c) in "rwxrwxrwx".chars().enumerate() {
        out.push(if bits & (1 << (8 - i)) != 0 { c } else { '-' });
    }
    out
}

/// canonical/x-go's `quantity.FormatAmount(amount, -1)`: at most five characters, with an
/// SI prefix (`k`, `M`, `G`, ...) above 5000.
fn format_amount(amount: u64) -> String {
    const WIDTH: usize = 5;
    if amount <= 5000 {
        return format!("{amount:>WIDTH$}");
    }
    let mut value = amount as f64;
    let mut prefix = 'k';
    for p in ['k', 'M', 'G', 'T', 'P', 'E', 'Z', 'Y'] {
        prefix = p;
        value /= 1000.0;
        if value < 999.5 {
            break;
        }
    }
    let width = WIDTH - 1;
    let digits = if value < 0.95 {
        0
    } else if value < 9.5 {
        1
    } else if value < 99.5 {
        2
    } else {
        3
    };
    let precision = (width - digits).saturating_sub(1);
    format!("{value:>width$.precision$}{prefix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_only_in_the_last_element() {
        assert_eq!(
            parse_glob("/etc/*.conf").unwrap(),
            ("/etc/".to_string(), "*.conf".to_string())
        );
        assert_eq!(
            parse_glob("/etc/").unwrap(),
            ("/etc/".to_string(), String::new())
        );
        assert_eq!(
            parse_glob("/e?c/x").unwrap_err().to_string(),
            "can only use globs on the last path element"
        );
    }

    #[test]
    fn modes_and_sizes_read_like_pebble() {
        assert_eq!(mode_string("directory", "755"), "drwxr-xr-x");
        assert_eq!(mode_string("file", "644"), "-rw-r--r--");
        assert_eq!(mode_string("symlink", "777"), "Lrwxrwxrwx");
        assert_eq!(format_amount(4), "    4");
        assert_eq!(format_amount(5000), " 5000");
        assert_eq!(format_amount(1_048_576), "1.05M");
        assert_eq!(format_amount(123_456), " 123k");
        assert_eq!(format_amount(12_345_678), "12.3M");
    }
}
