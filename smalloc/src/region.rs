//! The one virtual-memory reservation, made lazily by the first allocation.

use core::sync::atomic::{AtomicUsize, Ordering};

use crate::layout::{TOTAL_BITS, TOTAL_SIZE};
use crate::sys;

/// The reservation's base address, or one of the two states below.
static BASE: AtomicUsize = AtomicUsize::new(UNINIT);
/// No reservation yet.
const UNINIT: usize = 0;
/// One thread is making the reservation; others wait for it.
const RESERVING: usize = 1;

/// The base address if the reservation exists; a value `<= RESERVING`
/// otherwise.
#[inline(always)]
pub fn base_raw() -> usize {
    // Acquire: pairs with the Release store in `init`, so a thread that
    // sees the base also sees the mapping as made by the reserving thread.
    BASE.load(Ordering::Acquire)
}

/// Whether `raw` (from [`base_raw`]) is a real base.
#[inline(always)]
pub fn is_ready(raw: usize) -> bool {
    raw > RESERVING
}

/// The base address, reserving on the first call. `None` when the operating
/// system refuses the reservation (every later call tries again).
#[cold]
#[inline(never)]
pub fn init() -> Option<usize> {
    loop {
        // Acquire on both outcomes: a thread that sees a finished base must
        // see the reservation (as in `base_raw`).
        match BASE.compare_exchange(UNINIT, RESERVING, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => {
                let base = reserve();
                // Release: publishes the reservation with its address.
                BASE.store(base.unwrap_or(UNINIT), Ordering::Release);
                return base;
            }
            Err(RESERVING) => sys::yield_now(),
            Err(base) => return Some(base),
        }
    }
}

/// Maps `TOTAL_SIZE` bytes aligned to `TOTAL_SIZE`.
fn reserve() -> Option<usize> {
    // First choice: map twice the size anywhere and trim both ends to the
    // aligned middle. Costs nothing but address space, which is free.
    if let Some(p) = sys::map(0, 2 * TOTAL_SIZE, false) {
        let start = p.addr();
        let aligned = (start + TOTAL_SIZE - 1) & !(TOTAL_SIZE - 1);
        let end = start + 2 * TOTAL_SIZE;
        sys::unmap(start, aligned - start);
        sys::unmap(aligned + TOTAL_SIZE, end - (aligned + TOTAL_SIZE));
        return Some(sys::expose(p.wrapping_add(aligned - start)));
    }
    // Second choice, when the address space is too fragmented or limited for
    // the double mapping: ask for aligned addresses directly.
    for k in 1..(1usize << (47 - TOTAL_BITS)) {
        let want = k << TOTAL_BITS;
        if let Some(p) = sys::map(want, TOTAL_SIZE, true) {
            if p.addr() == want {
                return Some(sys::expose(p));
            }
            sys::unmap(p.addr(), TOTAL_SIZE);
        }
    }
    None
}
