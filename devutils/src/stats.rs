//! Median and spread of repeated measurements, and the geometric mean:
//! one definition for every benchmark of the workspace.

/// Summary of one cell's samples (ns/op per batch).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Median.
    pub median: f64,
    /// Fastest batch.
    pub min: f64,
    /// Slowest batch.
    pub max: f64,
    /// Median absolute deviation, in percent of the median.
    pub mad_pct: f64,
}

fn median_of(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Summarizes `samples` (NaN fields if empty).
pub fn summarize(samples: &[f64]) -> Summary {
    let mut v = samples.to_vec();
    let median = median_of(&mut v);
    let min = v.first().copied().unwrap_or(f64::NAN);
    let max = v.last().copied().unwrap_or(f64::NAN);
    let mut dev: Vec<f64> = v.iter().map(|x| (x - median).abs()).collect();
    let mad_pct = 100.0 * median_of(&mut dev) / median;
    Summary {
        median,
        min,
        max,
        mad_pct,
    }
}

/// Geometric mean of positive values (NaN if empty).
pub fn geomean(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_mad() {
        let s = summarize(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!(s.median, 3.0);
        assert_eq!((s.min, s.max), (1.0, 5.0));
        assert!((s.mad_pct - 100.0 / 3.0).abs() < 1e-9);
        assert_eq!(summarize(&[1.0, 3.0]).median, 2.0);
    }

    #[test]
    fn geomean_of_reciprocals_is_one() {
        assert!((geomean(&[2.0, 0.5]) - 1.0).abs() < 1e-12);
    }
}
