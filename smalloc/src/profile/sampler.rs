//! When to sample: each thread counts down the bytes of the slots it is
//! handed; the allocation that takes the count below zero is sampled, and
//! the next count is drawn from an exponential distribution with the
//! configured mean (Poisson sampling by bytes, as jemalloc and tcmalloc
//! do). A slot of `s` bytes is then sampled with probability
//! `1 - exp(-s / mean)`, whatever came before it.

use core::sync::atomic::{AtomicUsize, Ordering};

use crate::home_slab::profile_words::{FLAGS, LEFT, REQUEST, RNG};
use crate::home_slab::{profile_word, set_profile_word, sub_profile_word};

/// In [`FLAGS`]: the thread is inside the profiler (a sample being taken, a
/// profile being written); its allocations are not sampled.
const INSIDE: usize = 1;
/// In [`FLAGS`]: the thread's countdown was drawn (not the zero a thread
/// starts with, which would sample every thread's first allocation).
const ARMED: usize = 2;

/// Bytes a thread allocates between two looks at whether profiling is on,
/// while it is off.
const RECHECK: usize = 1 << 20;

/// The mean sampling interval in bytes; 0 when profiling is off.
static MEAN: AtomicUsize = AtomicUsize::new(0);
/// The mean of the last start.
static LAST_MEAN: AtomicUsize = AtomicUsize::new(0);

/// Counts `bytes` down; true when the count went below zero (the caller
/// then calls [`super::sample`], which draws the next count).
#[inline(always)]
pub fn due(bytes: usize) -> bool {
    sub_profile_word::<LEFT>(bytes)
}

/// Notes the size of the request being served (for the record of a
/// sample: the countdown and the slot know only the size class).
#[inline(always)]
pub fn note_request(size: usize) {
    set_profile_word::<REQUEST>(size);
}

/// The size of the request being served, if the note fits a slot of `slot`
/// bytes (a path that took no note leaves an older request behind).
pub fn request(slot: usize) -> Option<usize> {
    let size = profile_word::<REQUEST>();
    (size <= slot && (size > slot / 2 || slot <= 16)).then_some(size)
}

/// Sets the mean interval (0: off). Threads notice within their next
/// [`RECHECK`] bytes; the calling thread at once.
pub fn set_mean(mean: usize) {
    // Relaxed: a setting; samples taken under either value are valid.
    MEAN.store(mean, Ordering::Relaxed);
    if mean != 0 {
        // Relaxed: as above.
        LAST_MEAN.store(mean, Ordering::Relaxed);
    }
    set_profile_word::<LEFT>(0);
    set_profile_word::<FLAGS>(profile_word::<FLAGS>() & !ARMED);
}

/// The mean interval in bytes (0: off).
pub fn mean() -> usize {
    // Relaxed: as in `set_mean`.
    MEAN.load(Ordering::Relaxed)
}

/// The mean interval of the last start (0: never started).
pub fn last_mean() -> usize {
    // Relaxed: as in `set_mean`.
    LAST_MEAN.load(Ordering::Relaxed)
}

/// The countdown went below zero: whether to take a sample now. Draws the
/// next countdown either way; a thread's first countdown (from the zero it
/// starts with, or from a start) is drawn without a sample.
pub fn rearm() -> bool {
    let mean = mean();
    if mean == 0 {
        set_profile_word::<LEFT>(RECHECK);
        return false;
    }
    set_profile_word::<LEFT>(draw(mean));
    let flags = profile_word::<FLAGS>();
    if flags & ARMED == 0 {
        set_profile_word::<FLAGS>(flags | ARMED);
        return false;
    }
    flags & INSIDE == 0
}

/// Marks the thread inside the profiler until the guard drops: its
/// allocations meanwhile (an unwinder's, a symbolizer's, a writer's) are
/// not sampled.
pub struct Inside(usize);

impl Inside {
    /// Enters.
    pub fn enter() -> Inside {
        let flags = profile_word::<FLAGS>();
        set_profile_word::<FLAGS>(flags | INSIDE);
        Inside(flags)
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        // Only the INSIDE bit is restored: ARMED may have been set meanwhile.
        set_profile_word::<FLAGS>(profile_word::<FLAGS>() & !INSIDE | self.0 & INSIDE);
    }
}

/// An exponentially distributed number of bytes with mean `mean`.
fn draw(mean: usize) -> usize {
    let mut x = profile_word::<RNG>() as u64;
    if x == 0 {
        // A per-thread seed: the address of a local and the clock.
        let local = 0u8;
        x = (core::ptr::from_ref(&local).addr() as u64) ^ super::now_ns() | 1;
    }
    // xorshift64*
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    set_profile_word::<RNG>(x as usize);
    let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
    // Uniform in (0, 1].
    let u = ((r >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64);
    (-ln(u) * mean as f64) as usize + 1
}

/// The natural logarithm of `u` in (0, 1], to about 1e-7 (`core` has none).
fn ln(u: f64) -> f64 {
    let bits = u.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i64 - 1023;
    // u = m * 2^exp, m in [1, 2); ln m = 2 atanh(z), z = (m-1)/(m+1) < 1/3.
    let m = f64::from_bits((bits & ((1 << 52) - 1)) | (1023 << 52));
    let z = (m - 1.0) / (m + 1.0);
    let z2 = z * z;
    let series =
        1.0 + z2 * (1.0 / 3.0 + z2 * (1.0 / 5.0 + z2 * (1.0 / 7.0 + z2 * (1.0 / 9.0 + z2 / 11.0))));
    2.0 * z * series + exp as f64 * core::f64::consts::LN_2
}

#[cfg(test)]
mod tests {
    use super::ln;

    #[test]
    fn ln_is_close() {
        for &u in &[
            1.0,
            0.999,
            0.75,
            0.5,
            0.3,
            1e-3,
            1e-9,
            1.0 / (1u64 << 53) as f64,
        ] {
            let (want, got) = (std::primitive::f64::ln(u), ln(u));
            assert!(
                (want - got).abs() <= 1e-6 * want.abs().max(1.0),
                "{u}: {want} {got}"
            );
        }
    }
}
