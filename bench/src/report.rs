//! The results table: cobble's figures beside Pebble v1.12.0's and the targets.

use std::fmt::Write as _;
use std::time::Duration;

use crate::daemon::{Memory, Rss};
use crate::stats::Samples;

/// The unit a row is shown in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    /// A duration, shown in microseconds.
    Micros,
    /// A duration, shown in milliseconds.
    Millis,
    /// A duration, shown in seconds.
    Seconds,
    /// A size, shown in MiB.
    MiB,
    /// A ratio of two figures, shown as `1.23×`.
    Ratio,
}

impl Unit {
    /// Formats `value` (seconds for durations, MiB for sizes).
    fn format(self, value: f64) -> String {
        match self {
            Unit::Micros => format!("{:.3} µs", value * 1e6),
            Unit::Millis if value * 1e3 < 10.0 => format!("{:.3} ms", value * 1e3),
            Unit::Millis => format!("{:.1} ms", value * 1e3),
            Unit::Seconds => format!("{value:.3} s"),
            Unit::MiB => format!("{value:.1} MiB"),
            Unit::Ratio => format!("{value:.2}×"),
        }
    }
}

/// An upper bound that a row should stay under.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target {
    /// The bound, in the row's base unit.
    limit: f64,
    /// Whether the bound itself still meets the target (`<=` rather than `<`).
    inclusive: bool,
}

impl Target {
    /// Strictly less than `limit`: "faster than Pebble", "under 2 s".
    pub(crate) fn below(limit: f64) -> Target {
        Target {
            limit,
            inclusive: false,
        }
    }

    /// At most `limit`: "at most a third of Pebble's memory".
    pub(crate) fn at_most(limit: f64) -> Target {
        Target {
            limit,
            inclusive: true,
        }
    }

    fn met_by(self, value: f64) -> bool {
        if self.inclusive {
            value <= self.limit
        } else {
            value < self.limit
        }
    }
}

/// One line of the table.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// What was measured.
    what: String,
    /// How the figures are shown.
    unit: Unit,
    /// The headline figure (the median of a distribution), in the base unit.
    value: f64,
    /// The 99th percentile, for distributions.
    p99: Option<f64>,
    /// How many samples the figure summarises.
    samples: usize,
    /// Pebble v1.12.0's figure on the same kind of machine, in the base unit.
    pebble: Option<f64>,
    /// The bound cobble should stay under.
    target: Option<Target>,
}

impl Row {
    /// A single figure.
    pub(crate) fn single(what: &str, unit: Unit, value: f64) -> Row {
        Row {
            what: what.to_string(),
            unit,
            value,
            p99: None,
            samples: 1,
            pebble: None,
            target: None,
        }
    }

    /// The median and p99 of a distribution of durations.
    pub(crate) fn distribution(what: &str, unit: Unit, samples: &Samples) -> Row {
        Row {
            p99: (samples.len() > 1).then(|| samples.p99().as_secs_f64()),
            samples: samples.len(),
            ..Row::single(what, unit, samples.median().as_secs_f64())
        }
    }

    /// The median of several RSS readings, shown in MiB with its anonymous and file-backed
    /// parts in the description.
    pub(crate) fn memory(what: &str, readings: &[Rss]) -> Row {
        let mut sorted = readings.to_vec();
        sorted.sort_unstable_by_key(|rss| rss.total_kib);
        let Some(median) = sorted.get(sorted.len().saturating_sub(1) / 2).copied() else {
            return Row::single(what, Unit::MiB, 0.0);
        };
        let mib = |kib: u64| kib as f64 / 1024.0;
        Row {
            samples: sorted.len(),
            ..Row::single(
                &format!(
                    "{what} (anon {:.1} + file {:.1} MiB)",
                    mib(median.anon_kib),
                    mib(median.file_kib)
                ),
                Unit::MiB,
                mib(median.total_kib),
            )
        }
    }

    /// Sets Pebble's figure (seconds or MiB).
    #[must_use]
    pub(crate) fn pebble(mut self, value: f64) -> Row {
        self.pebble = Some(value);
        self
    }

    /// Sets the target.
    #[must_use]
    pub(crate) fn target(mut self, target: Target) -> Row {
        self.target = Some(target);
        self
    }

    /// `met`, `MISSED` or empty when there is no target.
    fn verdict(&self) -> &'static str {
        match self.target {
            Some(target) if target.met_by(self.value) => "met",
            Some(_) => "**MISSED**",
            None => "",
        }
    }
}

/// Whether any row misses its target.
pub(crate) fn any_missed(rows: &[Row]) -> bool {
    rows.iter()
        .any(|row| row.target.is_some_and(|t| !t.met_by(row.value)))
}

/// Renders the rows as a Markdown table.
pub(crate) fn markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "| Measurement | cobble (median) | p99 | n | Pebble v1.12.0 | Target | Verdict |\n\
         |---|---:|---:|---:|---:|---:|---|\n",
    );
    for row in rows {
        let dash = || "–".to_string();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            row.what,
            row.unit.format(row.value),
            row.p99.map(|v| row.unit.format(v)).unwrap_or_else(dash),
            row.samples,
            row.pebble.map(|v| row.unit.format(v)).unwrap_or_else(dash),
            row.target
                .map(|t| format!(
                    "{} {}",
                    if t.inclusive { "≤" } else { "<" },
                    row.unit.format(t.limit)
                ))
                .unwrap_or_else(dash),
            row.verdict(),
        );
    }
    out
}

/// Renders a plain Markdown table: the first column left-aligned, the others right-aligned.
/// Used by the checks and path-watching groups, whose figures do not fit [`markdown`]'s
/// median/p99/Pebble/target columns.
pub(crate) fn plain_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!("| {} |\n|---|", header.join(" | "));
    for _ in 1..header.len() {
        out.push_str("---:|");
    }
    out.push('\n');
    for row in rows {
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    out
}

/// The memory table: one line per case, each column the median of its readings.
pub(crate) fn memory_table(cases: &[(&str, &[Memory])]) -> String {
    let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
    let rows: Vec<Vec<String>> = cases
        .iter()
        .map(|(what, readings)| {
            let median = |field: fn(&Memory) -> u64| median_kib(readings.iter().map(field));
            let cgroup = if readings.iter().all(|m| m.cgroup_bytes.is_some()) {
                mib(median(|m| m.cgroup_bytes.unwrap_or_default() / 1024))
            } else {
                "–".to_string()
            };
            vec![
                (*what).to_string(),
                mib(median(|m| m.rss.total_kib)),
                mib(median(|m| m.rss.anon_kib)),
                mib(median(|m| m.rss.file_kib)),
                mib(median(|m| m.pss_kib)),
                mib(median(|m| m.pss_anon_kib)),
                mib(median(|m| m.pss_file_kib)),
                cgroup,
                readings.len().to_string(),
            ]
        })
        .collect();
    plain_table(
        &[
            "Case",
            "VmRSS",
            "RssAnon",
            "RssFile",
            "Pss",
            "Pss_Anon",
            "Pss_File",
            "memory.current",
            "n",
        ],
        &rows,
    )
}

/// The lower median of some sizes; zero without any.
fn median_kib(values: impl Iterator<Item = u64>) -> u64 {
    let mut sorted: Vec<u64> = values.collect();
    sorted.sort_unstable();
    sorted
        .get(sorted.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or_default()
}

/// A duration in milliseconds, with three decimals below 10 ms (as [`Unit::Millis`]).
pub(crate) fn millis(d: Duration) -> String {
    Unit::Millis.format(d.as_secs_f64())
}

/// `VmRSS` in MiB with its anonymous and file-backed parts: `9.8 MiB (1.0 + 8.8)`.
pub(crate) fn rss_mib(rss: Rss) -> String {
    let mib = |kib: u64| kib as f64 / 1024.0;
    format!(
        "{:.1} MiB ({:.1} + {:.1})",
        mib(rss.total_kib),
        mib(rss.anon_kib),
        mib(rss.file_kib)
    )
}

/// CPU time over a window as a percentage of one core, with the time itself:
/// `0.27 % (80 ms)`.
pub(crate) fn cpu_share(cpu: Duration, window: Duration) -> String {
    let share = if window.is_zero() {
        0.0
    } else {
        cpu.as_secs_f64() / window.as_secs_f64() * 100.0
    };
    format!("{share:.2} % ({:.0} ms)", cpu.as_secs_f64() * 1e3)
}

/// Seconds of a duration, for [`Row::single`].
pub(crate) fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rss(total_kib: u64) -> Rss {
        Rss {
            total_kib,
            anon_kib: total_kib / 4,
            file_kib: total_kib - total_kib / 4,
        }
    }

    #[test]
    fn rows_render_with_verdicts() {
        let mut samples = Samples::default();
        samples.push(Duration::from_micros(200));
        samples.push(Duration::from_micros(400));
        let rows = vec![
            Row::distribution("GET", Unit::Millis, &samples)
                .pebble(0.34e-3)
                .target(Target::below(0.34e-3)),
            Row::memory("RSS", &[rss(4096), rss(1024), rss(2048)]).target(Target::at_most(1.0)),
            Row::single("size", Unit::MiB, 3.0),
        ];
        let table = markdown(&rows);
        assert!(
            table.contains("| GET | 0.200 ms | 0.400 ms | 2 | 0.340 ms | < 0.340 ms | met |"),
            "{table}"
        );
        assert!(
            table.contains(
                "| RSS (anon 0.5 + file 1.5 MiB) | 2.0 MiB | – | 3 | – | ≤ 1.0 MiB | **MISSED** |"
            ),
            "{table}"
        );
        assert!(
            table.contains("| size | 3.0 MiB | – | 1 | – | – |  |"),
            "{table}"
        );
        assert!(any_missed(&rows));
    }

    #[test]
    fn plain_tables_and_helpers_render() {
        let table = plain_table(
            &["What", "CPU", "RSS"],
            &[vec![
                "x".into(),
                cpu_share(Duration::from_millis(300), Duration::from_secs(30)),
                rss_mib(rss(4096)),
            ]],
        );
        assert_eq!(
            table,
            "| What | CPU | RSS |\n|---|---:|---:|\n| x | 1.00 % (300 ms) | 4.0 MiB (1.0 + 3.0) |\n"
        );
        assert_eq!(millis(Duration::from_micros(1234)), "1.234 ms");
        assert_eq!(cpu_share(Duration::ZERO, Duration::ZERO), "0.00 % (0 ms)");
    }

    #[test]
    fn memory_table_shows_per_column_medians() {
        let reading = |total_kib: u64, pss_kib: u64, cgroup_bytes: Option<u64>| Memory {
            rss: rss(total_kib),
            pss_kib,
            pss_anon_kib: pss_kib / 2,
            pss_file_kib: pss_kib / 2,
            cgroup_bytes,
        };
        let table = memory_table(&[
            (
                "a",
                &[
                    reading(1024, 4096, Some(1 << 20)),
                    reading(3072, 1024, Some(3 << 20)),
                    reading(2048, 2048, Some(2 << 20)),
                ],
            ),
            ("b", &[reading(1024, 1024, None)]),
        ]);
        assert!(
            table.contains(
                "| a | 2.0 MiB | 0.5 MiB | 1.5 MiB | 2.0 MiB | 1.0 MiB | 1.0 MiB | 2.0 MiB | 3 |"
            ),
            "{table}"
        );
        assert!(
            table.contains(
                "| b | 1.0 MiB | 0.2 MiB | 0.8 MiB | 1.0 MiB | 0.5 MiB | 0.5 MiB | – | 1 |"
            ),
            "{table}"
        );
    }

    #[test]
    fn at_most_includes_the_bound_and_below_does_not() {
        assert!(Target::at_most(1.0).met_by(1.0));
        assert!(!Target::below(1.0).met_by(1.0));
    }
}
