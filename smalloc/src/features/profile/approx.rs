//! The two functions of the exponential distribution a sample needs, inline
//! and by table: libm's `log` and `exp` cost a call and a tenth of a sample
//! each, a series long enough for the whole range a division and a dozen
//! multiplications. Both are within 1e-12 of libm (relative, or absolute
//! near zero), which moves the sampling probabilities, and so the
//! estimates, by as little. The tables are computed at compile time, and
//! so are the ziggurat's (`exponential`), with these same functions.

/// ln 2, split in two so that `n * LN2_HI` is exact for the `n` used here.
const LN2_HI: f64 = 0.693_147_180_369_123_8;
const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;

/// Table bits of [`ln`]: the mantissa's first 7 bits pick a centre `c`.
const LN_BITS: u32 = 7;

/// The first table entry whose centre is above sqrt 2: from it on, `m` is
/// taken as `2 (m / 2)` (see [`ln`]).
const LN_HIGH: u64 = 53;

/// For each centre `c = 1 + (j + 0.5) / 128`: `1 / c` and `ln c`, or
/// `ln(c / 2)` from [`LN_HIGH`] on.
const LN_TABLE: [(f64, f64); 1 << LN_BITS] = {
    let mut t = [(0.0, 0.0); 1 << LN_BITS];
    let mut j = 0;
    while j < t.len() {
        let c = 1.0 + (j as f64 + 0.5) / (1 << LN_BITS) as f64;
        let centre = if j as u64 >= LN_HIGH { c / 2.0 } else { c };
        t[j] = (1.0 / c, series_ln(centre));
        j += 1;
    }
    t
};

/// `ln c` for `c` in `[1/2, 2]` by the series of `2 atanh((c - 1) / (c + 1))`
/// to full precision (compile time only).
const fn series_ln(c: f64) -> f64 {
    let t = (c - 1.0) / (c + 1.0);
    let (mut sum, mut power, mut k) = (0.0, t, 1.0);
    while k < 80.0 {
        sum += power / k;
        power *= t * t;
        k += 2.0;
    }
    2.0 * sum
}

/// The natural logarithm of `u`, for a normal positive `u`: `u = 2^e m`,
/// `m` in `[1, 2)`, `ln m = ln c + ln(m / c)` for the table's centre `c`
/// nearest `m`, and `|m / c - 1| < 1/256`, where five terms of the series of
/// `ln(1 + r)` leave less than `r^6 / 6 < 1e-15`. Above sqrt 2, `u = 2^(e+1)
/// (m / 2)`: just below 1, `e ln 2` would cancel `ln m` to a few bits.
#[inline]
pub const fn ln(u: f64) -> f64 {
    debug_assert!(u.is_normal() && u > 0.0);
    let bits = u.to_bits();
    let j = (bits >> (52 - LN_BITS)) & ((1 << LN_BITS) - 1);
    let e = ((bits >> 52) & 0x7ff) as i64 - 1023 + (j >= LN_HIGH) as i64;
    let m = f64::from_bits((bits & ((1 << 52) - 1)) | (1023 << 52));
    let (inverse, ln_c) = LN_TABLE[j as usize];
    let r = m * inverse - 1.0;
    let series = r * (1.0 - r * (0.5 - r * (1.0 / 3.0 - r * (0.25 - r * 0.2))));
    e as f64 * LN2_HI + (ln_c + series + e as f64 * LN2_LO)
}

/// Table bits of [`exp_neg`]: 64 steps of `2^(-1/64)`.
const EXP_BITS: u32 = 6;

/// `2^(-j / 64)` for each `j`.
const EXP_TABLE: [f64; 1 << EXP_BITS] = {
    let mut t = [0.0; 1 << EXP_BITS];
    let mut j = 0;
    while j < t.len() {
        t[j] = series_exp(-(j as f64) / (1 << EXP_BITS) as f64 * core::f64::consts::LN_2);
        j += 1;
    }
    t
};

/// `exp(x)` for `x` in `[-1, 0]` by its series to full precision (compile
/// time only).
const fn series_exp(x: f64) -> f64 {
    let (mut sum, mut term, mut k) = (1.0, 1.0, 1.0);
    while k < 30.0 {
        term *= x / k;
        sum += term;
        k += 1.0;
    }
    sum
}

/// `exp(-x)`, for `x` in `[0, 700]`: `x / ln 2 = n + j / 64 + d`, `d` in
/// `[0, 1/64)`, so `exp(-x) = 2^-n 2^(-j/64) exp(-d ln 2)`, and `d ln 2 <
/// 0.011`, where six terms of the series leave less than `z^6 / 720 <
/// 3e-15`.
#[inline]
pub const fn exp_neg(x: f64) -> f64 {
    debug_assert!(x >= 0.0 && x <= 700.0);
    let steps = (x * (core::f64::consts::LOG2_E * (1 << EXP_BITS) as f64)) as i64;
    // The remainder from `x` itself, not from the scaled product (whose
    // rounding would be scaled by 64): `z = x - steps ln 2 / 64`.
    let step = steps as f64 * (1.0 / (1 << EXP_BITS) as f64);
    let z = (x - step * LN2_HI) - step * LN2_LO;
    let series =
        1.0 - z * (1.0 - z * (0.5 - z * (1.0 / 6.0 - z * (1.0 / 24.0 - z * (1.0 / 120.0)))));
    let (n, j) = (steps >> EXP_BITS, steps & ((1 << EXP_BITS) - 1));
    EXP_TABLE[j as usize] * series * f64::from_bits(((1023 - n) as u64) << 52)
}

/// `x as f64` for `x < 2^63` (sizes and means): through `i64`, one
/// instruction where `u64`'s conversion takes six.
#[inline(always)]
pub fn to_f64(x: usize) -> f64 {
    debug_assert!(x <= i64::MAX as usize);
    x as i64 as f64
}

/// `x as u64` for `x >= 0` (estimates and countdowns), saturating at 2^62:
/// a maximum, a minimum and one conversion, where `u64`'s saturating
/// conversion takes a dozen instructions.
#[inline(always)]
pub fn to_u64(x: f64) -> u64 {
    debug_assert!(x >= 0.0);
    // `max` makes a NaN 0.
    let x = x.max(0.0).min((1u64 << 62) as f64);
    // SAFETY: `x` is in `[0, 2^62]`, which `i64` holds.
    unsafe { x.to_int_unchecked::<i64>() as u64 }
}

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
                (got - want).abs() <= 1e-14 + 1e-12 * want.abs(),
                "ln {u}: {got} {want}"
            );
        }
        x *= 1.7;
    }
    // Around 1, where ln is near 0, and every table entry's interval.
    for i in 0..100_000 {
        let u = 0.5 + i as f64 / 100_000.0;
        let (want, got) = (u.ln(), ln(u));
        assert!(
            (got - want).abs() <= 1e-14 + 1e-12 * want.abs(),
            "ln {u}: {got} {want}"
        );
    }
    let mut x = 0.0_f64;
    while x <= 700.0 {
        let (want, got) = ((-x).exp(), exp_neg(x));
        assert!((got / want - 1.0).abs() < 1e-12, "exp(-{x}): {got} {want}");
        x += 0.001_37;
    }
    assert!(worst < 1e-12, "{worst}");
}

#[cfg(test)]
#[test]
fn conversions_through_i64_truncate_and_saturate() {
    assert_eq!(to_u64(0.0), 0);
    assert_eq!(to_u64(3.99), 3);
    assert_eq!(to_u64(1e300), 1 << 62);
    assert_eq!(to_u64(f64::INFINITY), 1 << 62);
    assert_eq!(to_f64(usize::MAX >> 1), 2f64.powi(63));
    assert_eq!(to_f64(12345), 12345.0);
}
