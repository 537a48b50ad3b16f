//! # smalloc
//!
//! A simple, fast, lock-free memory allocator. One huge virtual-memory
//! reservation, made lazily on the first allocation, holds every slot; a
//! slot's address encodes its slab, size class and slot number, so freeing
//! needs only the pointer. Each (size class, slab) pair keeps one free list
//! whose head (the flh) is a single 64-bit word updated by compare-and-swap.
//!
//! ```no_run
//! use smalloc::Smalloc;
//!
//! #[global_allocator]
//! static ALLOC: Smalloc = Smalloc::new();
//!
//! fn main() {
//!     let v: Vec<u64> = (0..1000).collect();
//!     assert_eq!(v.iter().sum::<u64>(), 499_500);
//! }
//! ```
//!
//! See the README for the bit layout and the algorithms.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

#[cfg(test)]
extern crate std;

mod big;
pub mod diag;
pub mod free_list;
pub mod layout;
pub mod raw;
mod region;
mod release;
mod slab_occupancy;
mod slots;
mod sys;
mod thread_slab;

use core::alloc::{GlobalAlloc, Layout};
use core::ptr;

use layout::{MAX_SC, size_class};

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
        if size_class(layout.size(), layout.align()) <= MAX_SC {
            slots::slot_size(p)
        } else {
            let page = sys::page_size();
            (layout.size() + page - 1) & !(page - 1)
        }
    }

    /// Whether `p` points into smalloc's reservation (rather than to a big
    /// allocation or to memory of another allocator).
    pub fn owns_slot(&self, p: *const u8) -> bool {
        slots::contains(p)
    }
}

// SAFETY: every block handed out is a slot (or mapping) of at least the
// requested size and alignment that no other live block overlaps: a slot is
// owned by whoever popped it from its free list until it is pushed back
// (free_list.rs), and dealloc/realloc only push slots the caller owns.
unsafe impl GlobalAlloc for Smalloc {
    #[inline(always)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !layout::needs_large(layout.size(), layout.align()) {
            slots::alloc_small(size_class(layout.size(), layout.align())).0
        } else {
            alloc_large_or_big(layout)
        }
    }

    #[inline(always)]
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        if size_class(layout.size(), layout.align()) <= MAX_SC {
            // SAFETY: a layout that fits a slot was served from a slot
            // (alloc and realloc keep this invariant); the caller owns it.
            unsafe { slots::dealloc(p) }
        } else {
            // SAFETY: the caller passes the layout `p` was allocated with.
            unsafe { big::dealloc(p, layout.size()) }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let sc = size_class(layout.size(), layout.align());
        if sc <= MAX_SC {
            let (p, fresh) = slots::alloc(sc);
            // A fresh slot was never written since the kernel zeroed it;
            // clearing it would only make its pages resident.
            if !fresh && !p.is_null() {
                // SAFETY: the slot holds at least `layout.size()` bytes and
                // is naturally aligned.
                unsafe { release::clear(p, layout.size()) };
            }
            p
        } else {
            // Fresh mappings are zero.
            big::alloc(layout.size(), layout.align())
        }
    }

    #[inline]
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let align = layout.align();
        let old_size = layout.size();
        let new_sc = size_class(new_size, align);
        if size_class(old_size, align) <= MAX_SC {
            // The slot may be larger than the layout asked for (growers,
            // failover to a larger size class): stay while it fits, unless
            // the block shrinks to an eighth of a slot of 1 MiB or more.
            let cur_sc = layout::sc_of(p.addr());
            if new_sc <= cur_sc && !layout::moves_on_shrink(cur_sc, new_sc) {
                return p;
            }
            let (q, keep) = if new_sc > MAX_SC {
                (big::alloc(new_size, align), old_size)
            } else if new_sc > cur_sc {
                (slots::alloc(layout::grower_sc(new_sc)).0, old_size)
            } else {
                // Shrinking: the smaller slot holds exactly what is kept.
                (slots::alloc(new_sc).0, new_size)
            };
            if !q.is_null() {
                // SAFETY: `q` is a new allocation of at least `keep` bytes,
                // the smaller of the two sizes; the caller owns `p`.
                unsafe {
                    ptr::copy_nonoverlapping(p, q, keep);
                    slots::dealloc(p);
                }
            } else if new_sc <= cur_sc {
                // No smaller slot to be had: the block fits where it is.
                return p;
            }
            q
        } else if new_sc <= MAX_SC {
            // From a mapping down to a slot: keep the invariant that a
            // layout which fits a slot lives in a slot.
            let q = slots::alloc(new_sc).0;
            if !q.is_null() {
                // SAFETY: `new_size < old_size`; both are ours.
                unsafe {
                    ptr::copy_nonoverlapping(p, q, new_size);
                    big::dealloc(p, old_size);
                }
            }
            q
        } else {
            // SAFETY: `p` is a big allocation of `old_size` and `align`.
            unsafe { big::realloc(p, old_size, align, new_size) }
        }
    }
}

/// [`GlobalAlloc::alloc`] of a slot of at least
/// [`layout::LARGE_SC`] or of a big mapping.
#[inline(never)]
fn alloc_large_or_big(layout: Layout) -> *mut u8 {
    let sc = size_class(layout.size(), layout.align());
    if sc <= MAX_SC {
        slots::alloc(sc).0
    } else {
        big::alloc(layout.size(), layout.align())
    }
}

#[cfg(test)]
mod tests;
