//! Summaries of repeated measurements.

use std::time::Duration;

/// The durations of one repeated measurement.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    /// Every sample, in the order taken.
    values: Vec<Duration>,
}

impl Samples {
    /// Adds one sample.
    pub fn push(&mut self, value: Duration) {
        self.values.push(value);
    }

    /// Every sample, in the order taken.
    pub fn values(&self) -> &[Duration] {
        &self.values
    }

    /// How many samples there are.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// The median (nearest rank); zero without samples.
    pub fn median(&self) -> Duration {
        self.percentile(50.0)
    }

    /// The 99th percentile (nearest rank); with fewer than 100 samples this is the maximum.
    pub fn p99(&self) -> Duration {
        self.percentile(99.0)
    }

    /// The largest sample; zero without samples.
    pub fn max(&self) -> Duration {
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
