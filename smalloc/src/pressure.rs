//! New memory touched while freed large slots stay resident: the thread
//! that claims never-used slots (of any class, above its region's
//! high-water mark) gives back about as many bytes of freed large slots
//! first (their pages past the first, which holds the link; lists unchanged
//! since the last such release only), so a program whose working set moves
//! from some size classes to others (a parse of big buffers, then one of
//! small nodes or of buffers of another size) does not keep both resident
//! until the purge delay has passed. A program at a steady state reuses its
//! freed slots and claims nothing, so nothing is given back under it. Why,
//! measured: docs/decisions.md ("New memory against freed large slots").

use core::sync::atomic::{AtomicUsize, Ordering};

use crate::layout;
use crate::metadata::SharedLine;
use crate::purge;

/// Bytes of never-used slots claimed since the last release.
static CLAIMED: AtomicUsize = AtomicUsize::new(0);

/// Claimed bytes after which freed large slots are given back: about
/// every 1 MiB of new memory.
pub const RELEASE_EVERY: usize = 1 << 20;

/// Called when slots `[t, end)` of size class `sc` were claimed from the
/// never-used tail of the region whose shared line is `line`: counts those
/// above its high-water mark (a fresh run handed back and claimed again
/// was never touched, and counts once).
#[inline]
pub fn claimed_tail(line: &SharedLine, sc: u32, t: u32, end: u32) {
    // Relaxed: a counter's bound; the tail's claim decided.
    let high = line.high.fetch_max(end, Ordering::Relaxed);
    if end > high {
        claimed((end - high.max(t)) as usize * layout::slot_size(sc));
    }
}

/// Called when `bytes` of never-used slots were claimed (a cold path).
#[inline]
pub fn claimed(bytes: usize) {
    // Relaxed: a counter that only says when.
    let n = CLAIMED.fetch_add(bytes, Ordering::Relaxed);
    if n.saturating_add(bytes) >= RELEASE_EVERY {
        release();
    }
}

/// Gives back up to the bytes claimed since the last release, from freed
/// large slots, unless purging is off or a sweep is in progress (which
/// gives back what is quiet anyway).
#[cold]
#[inline(never)]
fn release() {
    if purge::delay_ms() == 0 || !purge::try_lock() {
        return;
    }
    // Relaxed: as in `claimed`.
    let budget = CLAIMED.swap(0, Ordering::Relaxed);
    purge::release_large(budget);
    purge::unlock();
}
