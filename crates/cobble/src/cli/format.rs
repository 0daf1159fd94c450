//! Text layout shared by the commands: Go-tabwriter tables and Pebble's wrapping of errors.

/// Lays rows out like Go's `tabwriter.NewWriter(w, 5, 3, 2, ' ', 0)`, which Pebble uses for
/// every table: each column but the last is padded to its widest cell plus two spaces, and
/// to at least five characters; the last cell of a row is written as is.
pub(super) fn tabulate<R: AsRef<[String]>>(rows: &[R]) -> String {
    const MIN_WIDTH: usize = 5;
    const PADDING: usize = 2;

    let columns = rows.iter().map(|r| r.as_ref().len()).max().unwrap_or(0);
    let mut widths = vec![MIN_WIDTH; columns.saturating_sub(1)];
    for row in rows {
        let row = row.as_ref();
        for (column, cell) in row.iter().enumerate().take(row.len().saturating_sub(1)) {
            widths[column] = widths[column].max(cell.chars().count() + PADDING);
        }
    }

    let mut out = String::new();
    for row in rows {
        let row = row.as_ref();
        for (column, cell) in row.iter().enumerate() {
            out.push_str(cell);
            if column + 1 < row.len() {
                let pad = widths[column] - cell.chars().count();
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push('\n');
    }
    out
}

/// Wraps an error message the way Pebble's CLI does before printing it after `error: `:
/// words are re-flowed to the terminal width (from `COLUMNS`, else 80, at most 100, minus
/// one), and continuation lines are indented to line up after the prefix.
pub(super) fn fill(message: &str, indent: usize) -> String {
    let columns = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse::<usize>().ok())
        .filter(|&c| c >= 40)
        .unwrap_or(80)
        .min(100);
    wrap(message, indent, columns - 1)
}

fn wrap(message: &str, indent: usize, width: usize) -> String {
    let limit = width.saturating_sub(indent).max(1);
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in message.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > limit {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines.join(&format!("\n{}", " ".repeat(indent)))
}

/// Quotes a string like Go's `%q` for the plain text Pebble quotes (names, labels, paths).
pub(super) fn quote(text: &str) -> String {
    format!("{text:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(cells: &[&str]) -> Vec<String> {
        cells.iter().map(|c| c.to_string()).collect()
    }

    #[test]
    fn services_table_matches_pebble_layout() {
        let table = tabulate(&[
            row(&["Service", "Startup", "Current", "Since"]),
            row(&["srv1", "enabled", "active", "today at 15:26 UTC"]),
            row(&["srv2", "disabled", "inactive", "-"]),
        ]);
        assert_eq!(
            table,
            "Service  Startup   Current   Since\n\
             srv1     enabled   active    today at 15:26 UTC\n\
             srv2     disabled  inactive  -\n"
        );
    }

    #[test]
    fn short_columns_get_the_minimum_width() {
        let table = tabulate(&[row(&["ID", "Status", "Summary"]), row(&["1", "Done", "x"])]);
        assert_eq!(table, "ID   Status  Summary\n1    Done    x\n");
    }

    #[test]
    fn version_table() {
        let table = tabulate(&[row(&["client", "v1.0.0"]), row(&["server", "-"])]);
        assert_eq!(table, "client  v1.0.0\nserver  -\n");
    }

    #[test]
    fn wrap_keeps_short_messages() {
        assert_eq!(wrap("no default services", 7, 79), "no default services");
    }

    #[test]
    fn wrap_indents_continuation_lines() {
        let message = "cannot start services: service \"a-rather-long-service-name\" does not exist in the plan at all";
        assert_eq!(
            wrap(message, 7, 40),
            "cannot start services: service\n       \"a-rather-long-service-name\" does\n       not exist in the plan at all"
        );
    }
}
