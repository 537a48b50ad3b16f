//! A heap that shrinks, in a process with one thread that allocates: once
//! the bytes of large slots it freed onto shared lists and kept exceed
//! those it allocated since by [`SHRINK_AFTER`] (or more, see below), each
//! further such free gives the slot's pages past the first back before the
//! push, and is not counted: what is kept stays near the threshold, so a
//! program that loops over a few buffers after it shrank keeps them. Such a
//! program has no background thread, and its sweeps run on its cold paths:
//! one that frees its peak and then sleeps would keep it all otherwise. One
//! that takes the memory back soon after (a loop that frees and rebuilds
//! its buffers) doubles the amount kept before the next releases
//! ([`BACKOFF_MS`]). Why, measured: docs/decisions.md ("A one-thread heap
//! that shrinks").

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::layout::{self, LARGE_SC, RELEASE_SC};
use crate::{occupancy, purge, sys};

/// Bytes of large slots freed onto shared lists and kept (their pages not
/// given back on the free) less those allocated since (not below 0).
static NET: AtomicUsize = AtomicUsize::new(0);

/// The net bytes freed after which frees give their pages back; doubled by
/// each return of the memory within [`BACKOFF_MS`] of a release.
static AFTER: AtomicUsize = AtomicUsize::new(SHRINK_AFTER);

/// When the last release on a free happened (coarse milliseconds; 0: none
/// since the net bytes last fell to 0).
static RELEASED_MS: AtomicU64 = AtomicU64::new(0);

/// The first threshold: what a program that frees and rebuilds large
/// buffers in a loop frees per round, kept resident.
pub const SHRINK_AFTER: usize = 16 << 20;

/// The largest threshold.
const MAX_AFTER: usize = 1 << 30;

/// Memory taken back this soon after a release raises the threshold.
pub const BACKOFF_MS: u64 = 1000;

/// Called by a free of the slot at `addr`, of size class `sc`, onto its
/// shared list, before the push: gives its pages past the first back if
/// the heap shrinks.
///
/// # Safety
/// The caller owns the slot (it is being freed and is not yet pushed).
#[inline]
pub unsafe fn freeing(addr: usize, sc: u32) {
    if !(LARGE_SC..RELEASE_SC).contains(&sc) || occupancy::many_threads_seen() {
        return;
    }
    // Relaxed: a heuristic's count; one thread allocates (a thread that
    // only frees may race it, and the count only says when).
    let net = NET
        .load(Ordering::Relaxed)
        .saturating_add(layout::slot_size(sc));
    // Relaxed: as above.
    if net < AFTER.load(Ordering::Relaxed) || purge::delay_ms() == 0 {
        // Relaxed: as above.
        NET.store(net, Ordering::Relaxed);
        return;
    }
    // Not counted: a count of every byte freed would stay above the
    // threshold while a program that shrank loops over a few buffers, and
    // give them back on every free.
    purge::release_slot(addr, sc);
    // Relaxed: as above.
    RELEASED_MS.store(sys::coarse_ms().max(1), Ordering::Relaxed);
}

/// Called by an allocation of a large slot of size class `sc` (a cold
/// path).
#[inline]
pub fn allocating(sc: u32) {
    if occupancy::many_threads_seen() {
        return;
    }
    // Relaxed: as in `freeing`.
    let net = NET.load(Ordering::Relaxed);
    if net == 0 {
        return;
    }
    let left = net.saturating_sub(layout::slot_size(sc));
    NET.store(left, Ordering::Relaxed);
    if left == 0 {
        came_back();
    }
}

/// The net bytes freed fell to 0: if a release came shortly before, the
/// program takes back what it frees, and keeps more of it from now on.
#[cold]
fn came_back() {
    // Relaxed, these three: as in `freeing`.
    let at = RELEASED_MS.swap(0, Ordering::Relaxed);
    if at != 0 && sys::coarse_ms().wrapping_sub(at) < BACKOFF_MS {
        let after = AFTER.load(Ordering::Relaxed);
        AFTER.store((after * 2).min(MAX_AFTER), Ordering::Relaxed);
    }
}
