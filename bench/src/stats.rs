//! Summaries of repeated measurements.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

/// The durations of one repeated measurement.
#[derive(Debug, Clone, Default)]
pub(crate) struct Samples {
    /// Every sample, in the order taken.
    values: Vec<Duration>,
}

impl Samples {
    /// Adds one sample.
    pub(crate) fn push(&mut self, value: Duration) {
        self.values.push(value);
    }

    /// Every sample, in the order taken.
    pub(crate) fn values(&self) -> &[Duration] {
        &self.values
    }

    /// How many samples there are.
    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }

    /// The median (nearest rank); zero without samples.
    pub(crate) fn median(&self) -> Duration {
        self.percentile(50.0)
    }

    /// The 99th percentile (nearest rank); with fewer than 100 samples this is the maximum.
    pub(crate) fn p99(&self) -> Duration {
        self.percentile(99.0)
    }

    /// The largest sample; zero without samples.
    pub(crate) fn max(&self) -> Duration {
        self.values.iter().copied().max().unwrap_or_default()
    }

    /// The nearest-rank percentile `p` (0 < p <= 100): the smallest sample that at least
    /// `p` percent of the samples do not exceed.
    fn percentile(&self, p: f64) -> Duration {
        if self.values.is_empty() {
            return Duration::ZERO;
        }
        let mut sorted = self.values.clone();
        sorted.sort_unstable();
        let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
        sorted[rank.clamp(1, sorted.len()) - 1]
    }
}

/// Runs the Python timing script `script` (in the bench crate's directory) with `args`, and
/// reads one duration in seconds per line of its output: `runs` of them, or an error.
pub(crate) fn python_samples(
    python: &Path,
    script: &str,
    args: &[&str],
    runs: usize,
) -> Result<Samples> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    let output = std::process::Command::new(python)
        .arg(&script)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {}", python.display()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().last().unwrap_or_default();
        bail!("{} {}: {last}", python.display(), output.status);
    }
    let mut samples = Samples::default();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let secs: f64 = line.parse().with_context(|| format!("bad line {line:?}"))?;
        samples.push(Duration::from_secs_f64(secs));
    }
    ensure!(
        samples.len() == runs,
        "expected {runs} samples from {}, got {}",
        script.display(),
        samples.len()
    );
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(values: &[u64]) -> Samples {
        let mut samples = Samples::default();
        for &v in values {
            samples.push(Duration::from_millis(v));
        }
        samples
    }

    #[test]
    fn nearest_rank_percentiles() {
        let samples = ms(&[5, 1, 4, 2, 3]);
        assert_eq!(samples.median(), Duration::from_millis(3));
        assert_eq!(samples.p99(), Duration::from_millis(5));

        let hundred = ms(&(1..=100).rev().collect::<Vec<_>>());
        assert_eq!(hundred.median(), Duration::from_millis(50));
        assert_eq!(hundred.p99(), Duration::from_millis(99));
        assert_eq!(hundred.max(), Duration::from_millis(100));
    }

    #[test]
    fn empty_samples_are_zero() {
        let samples = Samples::default();
        assert_eq!(samples.len(), 0);
        assert_eq!(samples.median(), Duration::ZERO);
        assert_eq!(samples.max(), Duration::ZERO);
    }
}
