//! New memory touched while freed large slots stay resident: the thread
//! that claims never-used slots (of any class, above its region's
//! high-water mark) gives back about as many bytes of freed large slots
//! first (their pages past the first, which holds the link; lists unchanged
//! since the last such release only), so a program whose working set moves
//! from some size classes to others (a parse of big buffers, then one of
//! small nodes or of buffers of another size) does not keep both resident
//! until the purge delay has passed. A program at a steady state reuses its
//! freed slots and claims nothing, so nothing is given back under it; one
//! that uses slots again within milliseconds of their release gets fewer
//! releases ([`BACKOFF`]). Where one thread allocates, each release also
//! sweeps the small classes whose lists it finds as it left them
//! ([`purge::release_unchanged_small`]). Why, measured: docs/decisions.md
//! ("New memory against freed large slots", "New memory against freed
//! small slots").

use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

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

/// Bytes of never-used slots claimed, ever (wrapping).
static EVER: AtomicUsize = AtomicUsize::new(0);

/// Bytes of never-used slots claimed, ever (wrapping): a program whose
/// heap grows shows it here.
#[inline]
pub fn claimed_ever() -> usize {
    // Relaxed: only says when.
    EVER.load(Ordering::Relaxed)
}

/// Called when `bytes` of never-used slots were claimed (a cold path).
#[inline]
pub fn claimed(bytes: usize) {
    // Relaxed: a counter that only says when.
    EVER.fetch_add(bytes, Ordering::Relaxed);
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
    // Relaxed: ours under the lock.
    let w = BACKOFF.load(Ordering::Relaxed);
    let (level, wait) = (w >> 8, w & 0xff);
    let next = if wait > 0 {
        w - 1
    } else {
        let (_, reused) = purge::release_large(budget);
        purge::release_unchanged_small();
        if reused > 0 {
            let level = (level + 1).min(MAX_LEVEL);
            level << 8 | ((1 << level) - 1)
        } else {
            level.saturating_sub(1) << 8
        }
    };
    // Relaxed: as above.
    BACKOFF.store(next, Ordering::Relaxed);
    purge::unlock();
}

/// Releases pass by `2^b - 1` times after one that found a list used again
/// soon after an earlier release gave its pages back (`purge::SOON_MS`;
/// `b` in bits 8 and up, raised each such time and lowered each time none
/// was, at most [`MAX_LEVEL`]; bits 0-7 the count still to pass): a
/// program that reuses its large slots right after they went back while
/// its heap grows (threads in rounds) gets fewer of them back only to fault
/// them in again. Measured: docs/decisions.md ("New memory against freed
/// large slots").
static BACKOFF: AtomicU32 = AtomicU32::new(0);

/// The highest backoff level: 1 release in 16.
const MAX_LEVEL: u32 = 4;
