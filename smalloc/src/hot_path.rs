//! Handing out and taking back slots: the hot paths.
//!
//! A thread that owns its slab allocates small slots (below 64 KiB) from,
//! and frees the small slots of its slab below 16 KiB to, the slab's
//! private lists, with plain loads and stores. Everything else — a private
//! list running dry, a thread that owns no slab, large slots, frees of
//! capped slots ([`capped`](crate::capped)) and of other slabs' slots —
//! goes to the cold paths ([`cold_path`](crate::cold_path)).

use core::sync::atomic::Ordering;

use crate::features::links::{SlotLink, follow_link};
use crate::features::{self, Request};
use crate::free_list::LinkStore;
use crate::layout::{self, LARGE_SC, MAX_SC, Slot};
use crate::metadata::{self, tables};
use crate::{cold_path, geometry, home_slab, private_list, sys};

/// The links of the region of private index `index` of the private block
/// at `block`, found through the block's region table, which is read only
/// once a link is to be followed; the slot whose link was read last is kept
/// for the caller.
struct TableLinks {
    block: usize,
    index: usize,
    slot: core::cell::Cell<usize>,
}

impl LinkStore for TableLinks {
    #[inline(always)]
    unsafe fn load_link(&self, link: u32) -> u32 {
        // A list holds a link only for the small size classes, whose
        // entries the table has.
        debug_assert!(self.index < LARGE_SC as usize);
        // Relaxed: the entry was written by an owner of the slab before
        // its release, which our claim acquired (see `fill_regions`).
        let link_base = tables(self.block)
            .region(self.index)
            .load(Ordering::Relaxed) as usize;
        let slot = link_base + link as usize;
        self.slot.set(slot);
        let next = follow_link(slot);
        // The next pop reads the new head's link: start its miss now.
        sys::prefetch(link_base, next as usize);
        next
    }
}

/// Takes a slot of size class `sc` (or larger, when every slab of `sc` is
/// empty) for `req`; [`Slot::NONE`] when no slot is left or the layout
/// could not be made.
#[inline(always)]
pub fn alloc(sc: u32, req: Request) -> Slot {
    debug_assert!((layout::MIN_SC..=MAX_SC).contains(&sc));
    if sc >= LARGE_SC {
        cold_path::alloc_large(sc, req)
    } else {
        alloc_small(sc, req)
    }
}

/// [`alloc`] for size classes below [`LARGE_SC`].
#[inline(always)]
pub fn alloc_small(sc: u32, req: Request) -> Slot {
    debug_assert!((layout::MIN_SC..LARGE_SC).contains(&sc));
    match alloc_hot(metadata::private_index(sc), req) {
        Some(ptr) => Slot { ptr, fresh: false },
        None => cold_path::alloc_small(sc, req),
    }
}

/// The hot path of allocation for a request of `size` bytes aligned to
/// `align` (a power of two; at least 16 with `ALIGN_16`), for `req`, or
/// `cold(size, align)` where it finds nothing ([`alloc_hot`]). The size
/// class of a request below 1 KiB comes from a table, inline; a larger one
/// goes to [`alloc_medium`] (a tail call), so that the small requests'
/// path is no longer for it.
#[inline(always)]
pub fn alloc_request<const ALIGN_16: bool>(
    size: usize,
    align: usize,
    req: Request,
    cold: fn(usize, usize) -> *mut u8,
) -> *mut u8 {
    debug_assert!(!ALIGN_16 || align >= 16);
    match metadata::table_index::<ALIGN_16>(layout::request_mask(size, align)) {
        Some(index) => match alloc_hot(index, req) {
            Some(p) => p,
            None => cold(size, align),
        },
        None => alloc_medium(size, align, req, cold),
    }
}

/// [`alloc_request`] of a request of 1 KiB or more: the size class from a
/// second table up to 64 KiB; larger requests (large slots, big mappings,
/// size 0) go to `cold` at once.
#[inline(never)]
fn alloc_medium(
    size: usize,
    align: usize,
    req: Request,
    cold: fn(usize, usize) -> *mut u8,
) -> *mut u8 {
    match metadata::medium_index(layout::request_mask(size, align)) {
        Some(index) => match alloc_hot(index, req) {
            Some(p) => p,
            None => cold(size, align),
        },
        None => cold(size, align),
    }
}

/// The hot path of allocation: a slot of the size class of private index
/// `index` ([`metadata::private_index`]) from the private list of the slab
/// the thread owns, for `req`. `None` when the thread owns no slab (its
/// alloc word is EMPTY_TABLES), the list is empty, or the size class is not
/// small (its list is always empty): the caller then takes the cold path.
#[inline(always)]
pub fn alloc_hot(index: usize, req: Request) -> Option<*mut u8> {
    debug_assert!(index < metadata::PRIVATE_HEADS);
    let block = home_slab::alloc_word();
    let links = TableLinks {
        block,
        index,
        slot: core::cell::Cell::new(0),
    };
    // SAFETY: the thread owns the slab (or the block is EMPTY_TABLES, whose
    // lists are empty); the links are its region's.
    unsafe { private_list::pop(tables(block).head(index), &links) }?;
    features::owner_alloc(block, index);
    let p: *mut u8 = sys::ptr_at(links.slot.get());
    debug_assert_eq!(layout::sc_of(p.addr()) as usize, index + 1);
    debug_assert!(
        layout::is_slot_start(p.addr(), index as u32 + 1),
        "off a slot"
    );
    Some(features::hot_alloc(p, req, &cold_path::CORE))
}

/// Returns the slot at `p` to its free list.
///
/// # Safety
/// `p` is the start of a slot handed out by [`alloc`] and not freed since.
#[inline(always)]
pub unsafe fn dealloc(p: *mut u8) {
    // SAFETY: per the contract.
    if !unsafe { free_owned(p) } {
        // SAFETY: per the contract.
        unsafe { cold_path::dealloc(p) }
    }
}

/// The hot path of free: if the slot at `p` is a small slot below
/// [`layout::CAPPED_SC`] of the slab the thread owns, puts it on its private
/// list and returns true.
///
/// # Safety
/// `p` is null, not in the reservation, or the start of a slot handed out
/// by [`alloc`] and not freed since.
#[inline(always)]
pub unsafe fn free_owned(p: *mut u8) -> bool {
    if features::frees_cold() {
        return false;
    }
    let block = home_slab::owned();
    // A slot's offset from the owned slab's private block, in regions, is
    // its size class minus one; any other address (another slab, another
    // allocator's, null, or any address when the word is NOT_OWNER) is
    // off by far more than the small classes span.
    let index = sys::opaque(p.addr().wrapping_sub(block) >> layout::SC_SHIFT);
    if index >= layout::CAPPED_SC as usize - 1 {
        return false;
    }
    // (Below 2^32, so the cast is exact.)
    let sc = index as u32 + 1;
    let cell = SlotLink::freed(p.addr(), sc);
    debug_assert!(sc >= layout::MIN_SC, "not a slot: {p:?}");
    debug_assert!(
        layout::is_slot_start(p.addr(), sc),
        "not the start of a slot"
    );
    // SAFETY: the thread owns the slab and, per the contract, the slot,
    // which belongs to this region.
    unsafe { private_list::push(tables(block).head(index), &cell, layout::link_of(p.addr())) };
    features::owner_free(block, index);
    true
}

/// Size in bytes of the slot holding `p`.
#[inline(always)]
pub fn slot_size(p: *const u8) -> usize {
    layout::slot_size(layout::sc_of(p.addr()))
}

/// Whether `p` lies in the reservation (is a slot of this allocator).
#[inline(always)]
pub fn contains(p: *const u8) -> bool {
    let base = geometry::base_raw();
    geometry::is_ready(base) && layout::base_of(p.addr()) == base
}
