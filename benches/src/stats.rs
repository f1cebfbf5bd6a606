//! Summaries of samples: median and spread, as every scenario reports them.

use serde::Serialize;

/// The summary of one contender's samples.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
    /// Only with 100 samples or more: below that the "99th percentile" is just the maximum.
    pub p99: Option<f64>,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
}

/// Samples below this count get no p99.
pub const P99_MIN_SAMPLES: usize = 100;

/// The `p` quantile (0 ≤ p ≤ 1) of sorted samples, interpolated linearly between the two
/// nearest ranks (numpy's default), so that the median of an even count is the mean of the
/// middle two. NaN for no samples.
pub fn quantile(sorted: &[f64], p: f64) -> f64 {
    match sorted {
        [] => f64::NAN,
        [only] => *only,
        _ => {
            let rank = (sorted.len() - 1) as f64 * p.clamp(0.0, 1.0);
            let lo = rank.floor() as usize;
            let hi = rank.ceil() as usize;
            let (a, b) = (sorted[lo], sorted[hi.min(sorted.len() - 1)]);
            a + (b - a) * (rank - lo as f64)
        }
    }
}

impl Summary {
    /// Summarises `samples` (any order; non-finite values are dropped). `None` when no finite
    /// sample is left.
    pub fn of(samples: &[f64]) -> Option<Self> {
        let mut sorted: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        Some(Self {
            n,
            median: quantile(&sorted, 0.5),
            p10: quantile(&sorted, 0.1),
            p90: quantile(&sorted, 0.9),
            p99: (n >= P99_MIN_SAMPLES).then(|| quantile(&sorted, 0.99)),
            min: sorted[0],
            max: sorted[n - 1],
            mean: sorted.iter().sum::<f64>() / n as f64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn quantiles_interpolate_between_ranks() {
        let sorted = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&sorted, 0.5), 2.5);
        assert_eq!(quantile(&sorted, 0.0), 1.0);
        assert_eq!(quantile(&sorted, 1.0), 4.0);
        assert!((quantile(&sorted, 0.1) - 1.3).abs() < 1e-12);
        assert_eq!(quantile(&[7.0], 0.9), 7.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn summary_sorts_drops_non_finite_and_gates_p99() {
        let s = Summary::of(&[3.0, f64::NAN, 1.0, 2.0, f64::INFINITY]).unwrap();
        assert!(
            (s.p10 - 1.2).abs() < 1e-12 && (s.p90 - 2.8).abs() < 1e-12,
            "{s:?}"
        );
        assert_eq!(
            s,
            Summary {
                n: 3,
                median: 2.0,
                p10: s.p10,
                p90: s.p90,
                p99: None,
                min: 1.0,
                max: 3.0,
                mean: 2.0,
            }
        );
        let many: Vec<f64> = (1..=101).map(f64::from).collect();
        let s = Summary::of(&many).unwrap();
        assert_eq!(s.median, 51.0);
        assert_eq!(s.p99, Some(100.0));
        assert_eq!(Summary::of(&[f64::NAN]), None);
    }
}
