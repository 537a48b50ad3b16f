//! Sampled heap profiling, compiled only with the `profile` cargo feature
//! (off by default): which call stacks hold the memory, at production
//! cost. See docs/profiling.md.
//!
//! Each thread counts down the bytes it asks for; the allocation that takes
//! the count below zero is sampled (`sampler`), and the next count is
//! drawn from an exponential distribution with the mean given to [`start`]
//! (`exponential`). A sampled allocation is served from
//! [`PROFILE_SLAB`](crate::layout::PROFILE_SLAB), where no other allocation
//! comes from, so its free is known by the slot's address, on the cold path
//! of free that every free of that slab takes; its stack (`stack`) and
//! clock go to a fixed table outside the heap (`table`); each sampling
//! thread keeps a few free slots of that slab and its recent stacks in a
//! record (`thread`). Nothing is symbolized until a profile is written
//! ([`Profile`]).

mod approx;
mod exponential;
mod output;
pub mod pprof;
pub(crate) mod sampler;
mod stack;
mod table;
mod thread;

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

pub use output::{Kind, Profile, SampleOut, StackOut, Totals};
pub use stack::Unwind;
pub use table::{BIG_SLOTS, MAP_SLOTS, MAX_FRAMES, STACKS};
pub use thread::RECORDS;

use super::Core;
use crate::layout::Slot;

/// The default mean sampling interval: 512 KiB, as jemalloc's and
/// tcmalloc's.
pub const DEFAULT_MEAN: usize = 512 << 10;

/// The largest mean interval (a larger one given to [`start`] is taken as
/// this): 2^62 bytes, so that sizes and means convert to `f64` and back
/// through `i64`.
pub const MAX_MEAN: usize = 1 << 62;

/// Whether stacks are walked with libgcc's DWARF unwinder instead of frame
/// pointers.
static DWARF: AtomicBool = AtomicBool::new(false);

/// A function called after each sample is taken (0: none).
static HOOK: AtomicUsize = AtomicUsize::new(0);

/// Calls `hook` after each sample, on the sampling thread, inside the
/// profiler (its allocations are not sampled): for a front end that
/// writes a profile when asked by a signal, which cannot write it in the
/// handler.
pub fn set_sample_hook(hook: fn()) {
    // Release: the function is code; nothing else to publish.
    HOOK.store(hook as usize, Ordering::Release);
}

/// Starts sampling, one sample per `mean` bytes on average, stacks walked
/// by `unwind`. Other threads begin at their next look, within 64 MiB of
/// allocation (1 MiB for one that allocated little while it was off); the
/// calling thread at once. False if the table could not be mapped.
pub fn start(mean: usize, unwind: Unwind) -> bool {
    if !table::init() || !thread::init() {
        return false;
    }
    // Relaxed: a setting.
    DWARF.store(unwind == Unwind::Dwarf, Ordering::Relaxed);
    sampler::set_mean(mean.clamp(1, MAX_MEAN));
    true
}

/// Stops sampling; the samples taken stay, and their frees are still seen.
pub fn stop() {
    sampler::set_mean(0);
}

/// Runs `f` with the calling thread's allocations kept out of the profile
/// (for a front end writing a profile).
pub fn without_sampling<R>(f: impl FnOnce() -> R) -> R {
    let _inside = sampler::Inside::enter();
    f()
}

/// Whether sampling is on.
pub fn running() -> bool {
    sampler::mean() != 0
}

/// Counts `bytes` (a request served) towards the next sample; true when the
/// caller should call [`sample`].
#[inline(always)]
pub(crate) fn due(bytes: usize) -> bool {
    sampler::due(bytes)
}

/// The countdown ran out on the cold path, before a slot of size class
/// `sc` was taken for a request of `size` bytes: if sampling is on, a slot
/// of `sc` from the profile's slab with the sample recorded; `None` (the
/// caller takes its slot as usual) when not sampling or when the sample
/// finds no slot or no room. Inlined into its three out-of-line callers:
/// one frame fewer for every sample's stack check.
#[cold]
#[inline(always)]
pub(crate) fn sample_new(sc: u32, size: usize, core: &Core) -> Option<Slot> {
    // Re-armed first, whatever follows: the count has wrapped.
    if !sampler::rearm(size) {
        return None;
    }
    let _inside = sampler::Inside::enter();
    let record = thread::mine();
    let kept = record.and_then(|r| r.take_slot(sc));
    let kept = kept.map(|ptr| Slot { ptr, fresh: false });
    let Some(q) = kept.or_else(|| (core.profile_slot)(sc)) else {
        table::lose();
        return None;
    };
    if !q.fresh {
        crate::features::links::handed_out(q.ptr.addr());
    }
    let added = stack_index(record)
        .is_some_and(|i| table::add(q.ptr.addr(), size, weight(size), i, shard(record), now_ns()));
    if !added {
        // SAFETY: `q` was handed to us just now and to nobody else.
        unsafe { (core.free)(q.ptr) };
        return None;
    }
    after_sample();
    Some(q)
}

/// A big block (its own mapping, at `start`) was mapped for a request of
/// `size` bytes: counted towards the next sample, and sampled when due. Its
/// free is known by its address ([`big_unmapped`]).
#[inline]
pub(crate) fn big_mapped(start: *mut u8, size: usize) {
    if !due(size) || !sampler::rearm(size) {
        return;
    }
    let _inside = sampler::Inside::enter();
    let record = thread::mine();
    let added = stack_index(record).is_some_and(|i| {
        table::add_big(start.addr(), size, weight(size), i, shard(record), now_ns())
    });
    if added {
        after_sample();
    }
}

/// The shard of the stack totals a sample adds to: its record's number
/// (beyond the exclusive shards, or without a record: the shared one).
fn shard(record: Option<&thread::Record>) -> usize {
    record.map_or(usize::MAX, thread::Record::shard)
}

/// The big block mapped at `start` is being unmapped.
#[inline]
pub(crate) fn big_unmapped(start: *mut u8) {
    table::big_freed(start.addr());
}

/// The big block mapped at `from` moved to `to`.
#[inline]
pub(crate) fn big_moved(from: *mut u8, to: *mut u8) {
    table::big_moved(from.addr(), to.addr());
}

/// The index in the stack table of the calling thread's stack, walked as
/// configured (by frame pointers with a record: not walked again if it is
/// the stack of one of the record's last samples); `None` (the sample
/// counted lost) when the table has no room for it.
#[inline(always)]
fn stack_index(record: Option<&thread::Record>) -> Option<usize> {
    // Relaxed: a setting.
    if DWARF.load(Ordering::Relaxed) {
        let mut frames = stack::Frames::new();
        stack::capture_dwarf(&mut frames);
        return table::intern(&frames);
    }
    let Some(r) = record else {
        let mut w = stack::Walks::<1>::new();
        w.find_or_walk();
        return table::intern(w.walked());
    };
    // SAFETY: this thread holds the record; nothing else refers to its walks.
    let walks = unsafe { r.walks() };
    if let Some(i) = walks.find_or_walk() {
        return Some(i);
    }
    let i = table::intern(walks.walked())?;
    walks.remember(i);
    Some(i)
}

/// Calls the sample hook, if one is set.
fn after_sample() {
    // Acquire: pairs with `set_sample_hook`.
    let hook = HOOK.load(Ordering::Acquire);
    if hook != 0 {
        // SAFETY: only `set_sample_hook` stores here, a `fn()`.
        let hook: fn() = unsafe { core::mem::transmute::<usize, fn()>(hook) };
        hook();
    }
}

/// The blocks a sample of `size` bytes stands for (the unbiased estimate of
/// Poisson sampling by bytes): it was sampled with probability
/// `1 - exp(-size / mean)`.
fn weight(size: usize) -> f64 {
    let x = approx::to_f64(size) * sampler::inverse_mean();
    let p = if x >= 40.0 {
        // exp(-40) is below f64's precision next to 1.
        return 1.0;
    } else if x >= 1.0 / 64.0 {
        // 1 - exp(-x) loses at most 6 bits here.
        1.0 - approx::exp_neg(x)
    } else {
        // The series, to x^4: relative error below x^4 / 120 < 1e-9.
        x * (1.0 - x * (0.5 - x * (1.0 / 6.0 - x / 24.0)))
    };
    1.0 / p
}

/// The countdown ran out on the hot path, which took the slot at `p` off a
/// private list of the request's own size class (reused memory): if
/// sampling is on, swaps it for a slot of the profile's slab with the
/// sample recorded, and gives `p` back. Out of line and with few arguments,
/// so the hot path carries as little code for it as can be.
#[cold]
#[inline(never)]
pub(crate) fn sample_hot(p: *mut u8, size: usize, core: &Core) -> *mut u8 {
    let Some(q) = sample_new(crate::layout::sc_of(p.addr()), size, core) else {
        return p;
    };
    crate::features::counters::alloc(q.ptr);
    // SAFETY: `p` was handed to us by the hot path and to nobody else.
    unsafe { (core.free)(p) };
    q.ptr
}

#[cfg(test)]
#[test]
fn weight_is_one_over_the_probability() {
    sampler::set_mean(DEFAULT_MEAN);
    for size in [
        1,
        7,
        100,
        8191,
        8192,
        8193,
        100_000,
        1 << 20,
        20 << 20,
        1 << 40,
    ] {
        let x = size as f64 / DEFAULT_MEAN as f64;
        let want = 1.0 / -(-x).exp_m1();
        let got = weight(size);
        assert!((got / want - 1.0).abs() < 1e-9, "{size}: {got} {want}");
    }
    sampler::set_mean(0);
}

/// A slot of the profile's slab at `addr`, of size class `sc`, is being
/// freed: it leaves the live profile; true if the calling thread's record
/// keeps the slot (the caller then pushes it nowhere).
#[cold]
#[inline(never)]
pub(crate) fn freed(addr: usize, sc: u32) -> bool {
    table::freed(addr);
    thread::keep(addr, sc)
}

/// Slots of size class `sc` of the profile's slab kept by the sampling
/// threads' records (free, on no list).
pub(crate) fn kept(sc: u32) -> u64 {
    thread::kept(sc)
}

/// A slot of size class `sc` of the profile's slab kept by the record of a
/// thread that ended, if any.
pub(crate) fn idle_slot(sc: u32) -> Option<*mut u8> {
    thread::idle_slot(sc)
}

/// Puts the slots kept by the records of ended threads and the calling
/// thread's on the shared lists, for a trim.
pub(crate) fn flush_idle() {
    thread::flush_idle()
}

/// The wall clock in nanoseconds since the epoch, to the kernel's tick (a
/// few ms): the coarse clock is a read of the vDSO page, the precise one
/// costs a sixth of a sample.
pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; the clock exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
