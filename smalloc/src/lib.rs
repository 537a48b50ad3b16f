#![doc = include_str!("../README.md")]
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

#[cfg(test)]
extern crate std;

mod big;
mod capped;
mod cold_path;
mod commit;
mod features;
pub mod free_list;
mod geometry;
pub mod grow;
pub mod guest;
mod held;
mod home_slab;
#[doc(hidden)]
pub mod hooks;
mod hot_path;
mod idle;
#[doc(hidden)]
pub mod large_freed;
pub mod layout;
mod metadata;
pub mod nudge;
mod occupancy;
pub mod ownership;
mod pressure;
pub mod private_list;
mod purge;
mod purger;
pub mod raw;
mod reservation;
mod shrink;
#[doc(hidden)]
pub mod spans;
pub mod stats;
mod sys;
mod thread_words;
mod trim;
mod zeroed;

pub use features::public::*;

use core::alloc::{GlobalAlloc, Layout};
use core::ptr;

use features::Request;
use layout::size_class;

/// The smalloc allocator. All instances share one process-wide state, so it
/// costs nothing to create; use it as the global allocator.
#[derive(Clone, Copy, Debug, Default)]
pub struct Smalloc;

impl Smalloc {
    /// Creates the allocator (no work is done until the first allocation).
    pub const fn new() -> Smalloc {
        Smalloc
    }

    /// Usable size of the allocation at `p` made with `layout`: the whole
    /// slot for slot allocations, the page-rounded mapping for big ones.
    ///
    /// # Safety
    /// `p` is a live allocation of this allocator made with `layout`.
    pub unsafe fn usable_size(&self, p: *const u8, layout: Layout) -> usize {
        if hot_path::contains(p) {
            hot_path::slot_size(p)
        } else {
            let page = sys::page_size();
            (layout.size() + page - 1) & !(page - 1)
        }
    }

    /// Whether `p` points into smalloc's reservation (rather than to a big
    /// allocation or to memory of another allocator).
    pub fn owns_slot(&self, p: *const u8) -> bool {
        hot_path::contains(p)
    }
}

// SAFETY: every block handed out is a slot (or mapping) of at least the
// requested size and alignment that no other live block overlaps: a slot is
// owned by whoever popped it from its free list until it is pushed back
// (free_list.rs), and dealloc/realloc only push slots the caller owns.
unsafe impl GlobalAlloc for Smalloc {
    #[inline(always)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let req = Request::new(layout.size());
        hot_path::alloc_request::<false>(layout.size(), layout.align(), req, alloc_cold)
    }

    #[inline(always)]
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // A big allocation is outside the reservation, so the hot path,
        // which takes only small slots of the thread's own slab, needs no
        // look at the layout.
        // SAFETY: the caller owns `p`, a live allocation of ours.
        if !unsafe { hot_path::free_owned(p) } {
            // SAFETY: as above.
            unsafe { dealloc_cold(p, layout.size()) }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let sc = size_class(layout.size(), layout.align());
        if sc < layout::LARGE_SC || sc <= geometry::largest_sc() {
            let p = zeroed::alloc_zeroed_slot(sc, layout.size());
            if !p.is_null() || !geometry::slots_used_up() {
                return p;
            }
        }
        // Fresh mappings are zero.
        big::alloc(layout.size(), layout.align())
    }

    #[inline]
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let align = layout.align();
        let old_size = layout.size();
        let new_sc = size_class(new_size, align);
        if hot_path::contains(p) {
            // SAFETY: a slot; the caller owns it and `new_size` is not zero.
            unsafe { grow::realloc_slot(p, Some(old_size), new_size, align, big::alloc) }
        } else if new_sc <= geometry::largest_sc() {
            // A block that slots serve lives in one; a mapping made while
            // they were used up may grow into one.
            let q = hot_path::alloc(new_sc, Request::new(new_size)).ptr;
            if q.is_null() {
                // No slot of that class left: the mapping is resized.
                // SAFETY: `p` is a big allocation of `old_size` and `align`.
                return unsafe { big::realloc(p, old_size, align, new_size) };
            }
            // SAFETY: both are ours, distinct, and hold at least the
            // smaller size.
            unsafe {
                ptr::copy_nonoverlapping(p, q, old_size.min(new_size));
                big::dealloc(p, old_size);
            }
            q
        } else {
            // SAFETY: `p` is a big allocation of `old_size` and `align`.
            unsafe { big::realloc(p, old_size, align, new_size) }
        }
    }
}

/// Sets the purge delay: how long freed memory stays untouched before its
/// pages go back to the kernel, without any call from the program
/// (docs/memory.md); zero: never (only [`stats::trim`] gives pages back).
/// The default is 300 ms, or `SMALLOC_PURGE_DELAY_MS` from the
/// environment. Below a millisecond counts as one.
pub fn set_purge_delay(delay: core::time::Duration) {
    let ms = if delay.is_zero() {
        0
    } else {
        delay.as_millis().clamp(1, u128::from(u32::MAX - 1)) as u32
    };
    purge::set_delay_ms(ms);
}

/// Starts the background thread that gives freed memory back, also in a
/// process where one thread allocates, which otherwise has none and gives
/// memory back only on its own cold paths (so not while it sleeps). The
/// same as `SMALLOC_PURGE_THREAD=1` in the environment, which starts it at
/// that thread's first sweep. Returns whether the thread runs: it does not
/// start while the purge delay is 0 (but when one is set), nor where the C
/// library refused a thread or `SMALLOC_PURGE_THREAD=0` kept it from
/// starting earlier. Why a process with one thread has none unasked:
/// docs/design.md (the purge, "Who").
pub fn start_purge_thread() -> bool {
    purger::want()
}

/// Gives up the 8 TiB reservation: from now on the layout is mapped on
/// demand, as under an address-space limit, and everything of it that no
/// region has committed is unmapped (live blocks stay where they are).
/// Call it before lowering the process's own `RLIMIT_AS` or `RLIMIT_DATA`
/// (the reservation counts against both, so that afterwards every new
/// mapping, thread stacks and `dlopen` included, would be refused) and
/// before `mlockall(MCL_CURRENT)` (which would fault in all 8 TiB). Makes the layout
/// first if no allocation has; false if the calling thread is committing
/// memory itself (a signal handler) or the layout cannot be made.
/// docs/design.md ("The reservation and its fallback").
pub fn map_on_demand() -> bool {
    reservation::give_up()
}

/// The purge delay (zero: never); see [`set_purge_delay`].
pub fn purge_delay() -> core::time::Duration {
    core::time::Duration::from_millis(u64::from(purge::delay_ms()))
}

/// [`GlobalAlloc::dealloc`] of anything but a small slot of the thread's
/// own slab.
///
/// # Safety
/// As for [`GlobalAlloc::dealloc`], with the layout's size.
#[inline(never)]
unsafe fn dealloc_cold(p: *mut u8, size: usize) {
    if hot_path::contains(p) {
        // SAFETY: a pointer in the layout is a slot (big mappings are never
        // there); the caller owns it.
        unsafe { cold_path::dealloc(p) }
    } else {
        // SAFETY: the caller passes the layout `p` was allocated with.
        unsafe { big::dealloc(p, size) }
    }
}

/// [`GlobalAlloc::alloc`] when the hot path found nothing: a small slot the
/// longer way, a large slot, or a big mapping.
#[inline(never)]
fn alloc_cold(size: usize, align: usize) -> *mut u8 {
    let sc = metadata::size_class_by_table::<false>(size, align);
    let p = if sc < layout::LARGE_SC {
        cold_path::alloc_small(sc, Request::new(size)).ptr
    } else if sc <= geometry::largest_sc() {
        cold_path::alloc_large(sc, Request::new(size)).ptr
    } else {
        return big::alloc(size, align);
    };
    if p.is_null() && geometry::slots_used_up() {
        return big::alloc(size, align);
    }
    p
}
