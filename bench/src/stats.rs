//! Percentiles of round-trip samples (microseconds). Samples are kept whole and sorted once per
//! phase: a 10-second phase at N = 2,000 is a million `u32`s, cheap next to what they measure, and
//! exact percentiles need no bucket-width caveat in the report. A sample of `u32::MAX` is a lost
//! frame (`load::LOST_US`) and reads as infinite.

/// p50 / p99 / p99.9 / max of one phase, in milliseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Summary {
    pub count: usize,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Summary {
    pub fn of(samples: &mut [u32]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        samples.sort_unstable();
        let at = |q: f64| {
            // Nearest-rank: the smallest sample with at least q of all samples at or below it.
            let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
            match samples[rank - 1] {
                u32::MAX => f64::INFINITY,
                us => f64::from(us) / 1000.0,
            }
        };
        Self { count: samples.len(), p50: at(0.50), p99: at(0.99), p999: at(0.999), max: at(1.0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut samples: Vec<u32> = (1..=1000).rev().map(|i| i * 1000).collect();
        let s = Summary::of(&mut samples);
        assert_eq!((s.count, s.p50, s.p99, s.p999, s.max), (1000, 500.0, 990.0, 999.0, 1000.0));
        assert_eq!(Summary::of(&mut []).count, 0);
        // One lost frame in a hundred: p99 is still a round trip, the maximum is infinite.
        let mut samples: Vec<u32> = (1..=99).map(|i| i * 1000).chain([u32::MAX]).collect();
        let s = Summary::of(&mut samples);
        assert_eq!((s.p99, s.max), (99.0, f64::INFINITY));
    }
}
