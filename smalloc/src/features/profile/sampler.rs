//! When to sample: each thread counts down the bytes of the slots it is
//! handed; the allocation that takes the count below zero is sampled, and
//! the next count is drawn from an exponential distribution with the
//! configured mean (Poisson sampling by bytes, as jemalloc and tcmalloc
//! do). A slot of `s` bytes is then sampled with probability
//! `1 - exp(-s / mean)`, whatever came before it.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::thread_words::profile::{FLAGS, LEFT, RNG};
use crate::thread_words::{
    load as profile_word, store as set_profile_word, sub as sub_profile_word,
};

/// In [`FLAGS`]: the thread is inside the profiler (a sample being taken, a
/// profile being written); its allocations are not sampled.
const INSIDE: usize = 1;
/// In [`FLAGS`]: the thread's countdown was drawn (not the zero a thread
/// starts with, which would sample every thread's first allocation).
const ARMED: usize = 2;

/// In [`FLAGS`], from this bit up: how many looks in a row found profiling
/// off (at most [`MAX_LOOKS`]).
const LOOKS: usize = 2;

/// While profiling is off, a thread looks whether it is on after
/// allocating `RECHECK << looks` bytes: 1 MiB after a first look, doubling
/// up to 64 MiB, so a thread that allocates much while it is off looks
/// seldom (a look is a call out of line, a tenth of a medium allocation;
/// see docs/decisions.md).
const RECHECK: usize = 1 << 20;
/// The most doublings of [`RECHECK`].
const MAX_LOOKS: usize = 6;

/// The mean sampling interval in bytes; 0 when profiling is off.
static MEAN: AtomicUsize = AtomicUsize::new(0);
/// The mean of the last start.
static LAST_MEAN: AtomicUsize = AtomicUsize::new(0);
/// `1.0 / mean` of the last start, as `f64` bits (a sample's weight
/// multiplies by it instead of dividing).
static INVERSE_MEAN: AtomicU64 = AtomicU64::new(0);

/// Counts `bytes` down; true when the count went below zero (the caller
/// then calls [`super::sample_new`], which draws the next count).
#[inline(always)]
pub fn due(bytes: usize) -> bool {
    sub_profile_word::<LEFT>(bytes)
}

/// Sets the mean interval (0: off). Other threads notice at their next
/// look (within 64 MiB of allocation, see [`RECHECK`]); the calling thread
/// at once.
pub fn set_mean(mean: usize) {
    // Relaxed: a setting; samples taken under either value are valid.
    MEAN.store(mean, Ordering::Relaxed);
    if mean != 0 {
        // Relaxed: as above.
        LAST_MEAN.store(mean, Ordering::Relaxed);
        INVERSE_MEAN.store((1.0 / mean as f64).to_bits(), Ordering::Relaxed);
    }
    set_profile_word::<LEFT>(0);
    set_profile_word::<FLAGS>(profile_word::<FLAGS>() & !ARMED);
}

/// The mean interval in bytes (0: off).
pub fn mean() -> usize {
    // Relaxed: as in `set_mean`.
    MEAN.load(Ordering::Relaxed)
}

/// `1.0 / mean` of the last start (0 before any).
pub fn inverse_mean() -> f64 {
    // Relaxed: as in `set_mean`.
    f64::from_bits(INVERSE_MEAN.load(Ordering::Relaxed))
}

/// The mean interval of the last start (0: never started).
pub fn last_mean() -> usize {
    // Relaxed: as in `set_mean`.
    LAST_MEAN.load(Ordering::Relaxed)
}

/// The countdown went below zero during an allocation of `size` bytes:
/// whether to sample it. Draws the next countdown either way. A countdown
/// that was not drawn (the zero a thread starts with, or what was left when
/// sampling was off) says nothing: a first one is drawn, and the allocation
/// is sampled only if it reaches past it. Inlined into the sample's
/// functions, which save the registers it needs anyway.
#[inline(always)]
pub fn rearm(size: usize) -> bool {
    let mean = mean();
    let flags = profile_word::<FLAGS>();
    if mean == 0 {
        let looks = flags >> LOOKS;
        let next = (looks + 1).min(MAX_LOOKS) << LOOKS;
        set_profile_word::<FLAGS>(flags & INSIDE | next);
        set_profile_word::<LEFT>(RECHECK << looks);
        return false;
    }
    if flags & ARMED == 0 {
        // Looks start over at the next stop.
        set_profile_word::<FLAGS>(flags & INSIDE | ARMED);
        let left = draw(mean);
        if left > size {
            set_profile_word::<LEFT>(left - size);
            return false;
        }
    }
    set_profile_word::<LEFT>(draw(mean));
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
    let e = super::exponential::standard(|| {
        // xorshift64*
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    });
    set_profile_word::<RNG>(x as usize);
    super::approx::to_u64(e * super::approx::to_f64(mean)) as usize + 1
}
