//! Exponential variates for the countdown, by Marsaglia and Tsang's
//! ziggurat: the area under `exp(-x)` cut into 256 layers of equal area,
//! each a box and, right of the next layer's edge, a wedge. A draw picks a
//! layer and a point of its box with one random word, and is done when the
//! point lies left of the next layer's edge (99% of draws): a multiply, two
//! table loads and a comparison, where `-ln u` is a chain of some twenty
//! dependent floating-point operations that the next allocation's
//! countdown waits on. Otherwise the point is tested against `exp(-x)` (a
//! wedge), or, in the base layer, the draw lies in the tail beyond the
//! last edge, which is drawn as `R - ln u` (the distribution is
//! memoryless). Exact: the tables only place the layers, and every point
//! accepted lies under the curve.

use super::approx::{exp_neg, ln};

/// Layers.
const LAYERS: usize = 256;
/// The right edge of layer 1's box (where the tail begins) and each
/// layer's area, for 256 layers (Marsaglia and Tsang, 2000).
const R: f64 = 7.697_117_470_131_05;
const V: f64 = 0.003_949_659_822_581_557;

/// `X[i]`: the right edge of layer `i`'s box. Layer 0 is the base, a box
/// of width `V / exp(-R)` that stands for the rectangle up to `R` and the
/// tail; `X[1] = R`; each next edge makes the next layer's area `V`;
/// `X[256] = 0` (the top layer is all wedge).
const X: [f64; LAYERS + 1] = {
    let mut x = [0.0; LAYERS + 1];
    x[0] = V / exp_neg(R);
    x[1] = R;
    let mut i = 1;
    while i < LAYERS - 1 {
        x[i + 1] = -ln(V / x[i] + exp_neg(x[i]));
        i += 1;
    }
    x
};

/// `F[i] = exp(-X[i])`: the curve at each edge.
const F: [f64; LAYERS + 1] = {
    let mut f = [0.0; LAYERS + 1];
    let mut i = 0;
    while i <= LAYERS {
        f[i] = exp_neg(X[i]);
        i += 1;
    }
    f
};

/// A uniform number in `[0, 1)` from 53 bits of `r` (bits 3 to 55).
#[inline(always)]
fn unit(r: u64) -> f64 {
    ((r >> 3) & ((1 << 53) - 1)) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// An exponentially distributed number of mean 1, from the random words
/// `next` yields (their top 8 bits pick a layer, bits 3 to 55 a point).
#[inline(always)]
pub fn standard(mut next: impl FnMut() -> u64) -> f64 {
    let (i, x) = point(next());
    if x < X[i + 1] {
        return x;
    }
    // Out of line, with the loop: the common path saves no registers.
    beyond_edge(i, x, &mut next)
}

/// The layer and the point of its box that the random word `r` picks.
#[inline(always)]
fn point(r: u64) -> (usize, f64) {
    let i = (r >> 56) as usize;
    (i, unit(r) * X[i])
}

/// The rare part of [`standard`]: the point `x` of layer `i` lies right of
/// the next edge. The tail for the base layer; for the others the wedge
/// test, and when the point is above the curve the draw starts over.
#[cold]
#[inline(never)]
fn beyond_edge(mut i: usize, mut x: f64, next: &mut impl FnMut() -> u64) -> f64 {
    loop {
        if i == 0 {
            // Uniform in (0, 1].
            let u = 1.0 - unit(next());
            return R - ln(u);
        }
        let y = F[i] + (F[i + 1] - F[i]) * unit(next());
        if y < exp_neg(x) {
            return x;
        }
        (i, x) = point(next());
        if x < X[i + 1] {
            return x;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layers_close_and_have_equal_areas() {
        assert!((X[0] - 8.697_117_470_131_05).abs() < 1e-12, "{}", X[0]);
        // The recurrence ends at 0 where the top layer should.
        let last = -(V / X[LAYERS - 1] + (-X[LAYERS - 1]).exp()).ln();
        assert!(last.abs() < 1e-12, "{last}");
        assert!((X[0] * F[1] - V).abs() < 1e-15);
        for i in 1..LAYERS {
            let area = X[i] * (F[i + 1] - F[i]);
            assert!((area / V - 1.0).abs() < 1e-9, "layer {i}: {area}");
            assert!((F[i] / (-X[i]).exp() - 1.0).abs() < 1e-13, "F[{i}]");
        }
    }

    /// xorshift64*: the words the tests draw from.
    fn words(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed;
        move || {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)] // a million draws
    fn draws_follow_the_exponential_distribution() {
        const N: usize = 1 << 20;
        let mut next = words(0x9e37_79b9_7f4a_7c15);
        let mut v: std::vec::Vec<f64> = (0..N).map(|_| standard(&mut next)).collect();
        v.sort_by(f64::total_cmp);
        // Kolmogorov-Smirnov: the largest gap between the sample's and the
        // distribution's CDF; 1.95 / sqrt(N) is its 0.1% critical value.
        let gap = v
            .iter()
            .enumerate()
            .map(|(k, &x)| {
                let cdf = -(-x).exp_m1();
                (cdf - k as f64 / N as f64)
                    .abs()
                    .max((cdf - (k + 1) as f64 / N as f64).abs())
            })
            .fold(0.0, f64::max);
        assert!(gap < 1.95 / (N as f64).sqrt(), "KS gap {gap}");
        // The mean (1, standard deviation 1 / sqrt N) and the tail past R
        // (probability exp(-R) = 4.5e-4: about 475 draws, sd 22).
        let mean = v.iter().sum::<f64>() / N as f64;
        assert!((mean - 1.0).abs() < 5.0 / (N as f64).sqrt(), "mean {mean}");
        let tail = v.iter().filter(|&&x| x > R).count() as f64;
        let want = N as f64 * (-R).exp();
        assert!(
            (tail - want).abs() < 5.0 * want.sqrt(),
            "tail {tail} {want}"
        );
        assert!(v.iter().all(|&x| x >= 0.0 && x.is_finite()));
        // Chi-square over the layers' edges, where a wrong wedge or tail
        // would show: bin i holds [X[i+1], X[i]), bin 0 the tail past R.
        let mut bins = [0u64; LAYERS];
        for &x in &v {
            let i = X[1..].partition_point(|&edge| edge > x);
            bins[i.min(LAYERS - 1)] += 1;
        }
        let chi2: f64 = (0..LAYERS)
            .map(|i| {
                let upper = if i == 0 { 0.0 } else { F[i] };
                let p = F[i + 1] - upper;
                let want = p * N as f64;
                (bins[i] as f64 - want).powi(2) / want
            })
            .sum();
        // 255 degrees of freedom: mean 255, standard deviation 22.6.
        assert!(chi2 < 255.0 + 6.0 * 22.6, "chi-square {chi2}");
    }
}
