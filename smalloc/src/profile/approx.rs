//! The two functions of the exponential distribution a sample needs, to
//! about 1e-9 relative, inline: libm's `log` and `exp` cost a call and a
//! tenth of a sample each. An error this small moves the sampling
//! probabilities, and so the estimates, by as little.

/// ln 2, split in two so that `n * LN2_HI` is exact for the `n` used here.
const LN2_HI: f64 = 0.693_147_180_369_123_8;
const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;

/// The natural logarithm of `u`, for a normal positive `u`.
#[inline]
pub fn ln(u: f64) -> f64 {
    debug_assert!(u.is_normal() && u > 0.0);
    let bits = u.to_bits();
    // u = m * 2^e with m in [sqrt(1/2), sqrt(2)).
    let mut e = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mut m = f64::from_bits((bits & ((1 << 52) - 1)) | (1023 << 52));
    if m > core::f64::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    // ln m = 2 atanh(t), t = (m - 1) / (m + 1), |t| < 0.172: the series to
    // t^11 leaves less than 2 t^13 / 13 < 2e-11.
    let t = (m - 1.0) / (m + 1.0);
    let t2 = t * t;
    let s = 1.0
        + t2 * (1.0 / 3.0
            + t2 * (1.0 / 5.0 + t2 * (1.0 / 7.0 + t2 * (1.0 / 9.0 + t2 * (1.0 / 11.0)))));
    e as f64 * LN2_HI + (2.0 * t * s + e as f64 * LN2_LO)
}

/// `exp(-x)`, for `x` in `[0, 700]`.
#[inline]
pub fn exp_neg(x: f64) -> f64 {
    debug_assert!((0.0..=700.0).contains(&x));
    // exp(-x) = 2^-n exp(r), r = n ln 2 - x in [-ln 2 / 2, ln 2 / 2].
    let n = (x * core::f64::consts::LOG2_E + 0.5) as i64;
    let r = (n as f64 * LN2_HI - x) + n as f64 * LN2_LO;
    // The series to r^10 leaves less than |r|^11 / 11! < 4e-13.
    let mut p = 1.0 / 3_628_800.0;
    for k in (1..10).rev() {
        p = p * r + 1.0 / FACTORIALS[k];
    }
    let p = p * r + 1.0;
    p * f64::from_bits(((1023 - n) as u64) << 52)
}

/// k! for k below 10.
const FACTORIALS: [f64; 10] = [
    1.0, 1.0, 2.0, 6.0, 24.0, 120.0, 720.0, 5040.0, 40320.0, 362_880.0,
];

#[cfg(test)]
#[test]
fn close_to_libm() {
    let mut worst: f64 = 0.0;
    let mut x = 1e-300_f64;
    while x < 1e300 {
        let r2 = core::f64::consts::SQRT_2;
        for u in [
            x,
            x * 1.234_567,
            x * r2 * 0.999_999,
            x * r2 * 1.000_001,
            x * 1.999_999,
        ] {
            let (want, got) = (u.ln(), ln(u));
            let err = (got - want).abs() / want.abs().max(1e-300);
            if (u - 1.0).abs() > 1e-6 {
                worst = worst.max(err);
            }
            assert!(
                (got - want).abs() <= 1e-15 + 1e-9 * want.abs(),
                "ln {u}: {got} {want}"
            );
        }
        x *= 1.7;
    }
    let mut x = 0.0_f64;
    while x <= 700.0 {
        let (want, got) = ((-x).exp(), exp_neg(x));
        assert!((got / want - 1.0).abs() < 1e-12, "exp(-{x}): {got} {want}");
        x += 0.001_37;
    }
    assert!(worst < 1e-9, "{worst}");
}
