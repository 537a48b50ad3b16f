//! Giving the pages of freed slots back to the kernel on request
//! (`malloc_trim`). A freed slot of at least two pages keeps its link in
//! its first page; the others hold nothing anyone needs, so they can be
//! released (`MADV_DONTNEED`) and read as zero when the slot is next used.
//! Slots from 128 MiB on already give them back when freed
//! ([`purge`](crate::purge)); smaller slots keep them for reuse unless
//! trimmed.
//!
//! A trim must never release a page of a slot that someone is handed
//! meanwhile: it takes each shared list whole (allocating threads then find
//! it empty and look elsewhere), releases the pages of the slots it now
//! holds, and pushes them back; it walks the private lists of its own
//! slab, and of slabs nobody owns, which it claims for the while. The
//! private lists of slabs other live threads own are left alone.

use core::sync::atomic::Ordering;

use crate::features::links::{SlotLink, follow_link};
use crate::home_slab::{self, is_owner};
use crate::layout::{self, LARGE_SC, RELEASE_SC};
use crate::metadata::{self, private_index, shared, tables};
use crate::{free_list, geometry, occupancy, ownership, sys};

/// Releases the pages past the first of freed slots, largest size classes
/// first, until about `budget` bytes of them were resident. Returns the
/// bytes released that were resident. Safe while other threads allocate and
/// free.
pub fn release(budget: usize) -> usize {
    let Some(base) = geometry::base() else {
        return 0;
    };
    let page = sys::page_size();
    let first_sc = layout::class_of_mask(2 * page - 1);
    let owned = home_slab::owned();
    let mine = is_owner(owned).then(|| layout::slab_of(home_slab::owned_slab(owned)));
    let used = occupancy::ever_used() | layout::RESERVED_SLABS;
    let mut released = 0;
    for sc in (first_sc..RELEASE_SC).rev() {
        for slab in (0..layout::NUM_SLABS).filter(|i| used & (1 << i) != 0) {
            if released >= budget {
                return released;
            }
            let slab_addr = layout::slab_addr(base, slab);
            let region = layout::region_addr(slab_addr, sc);
            let list = &shared(slab_addr, sc).flh;
            let mut link = free_list::take_all(list);
            while link != 0 {
                let slot = layout::slot_of_link(region, link);
                // The take's Acquire ordered the pushes before us.
                let next = follow_link(slot);
                released += release_slot(slot, sc);
                // SAFETY: the slot was on the list we took: ours to push
                // back, in its own region.
                unsafe { free_list::push(list, &SlotLink::of(slot), link) };
                link = next;
            }
            let claimed = mine != Some(slab) && ownership::claim(slab);
            if mine == Some(slab) || claimed {
                let block = metadata::private_block(slab_addr);
                let head = if sc < LARGE_SC {
                    tables(block).head(private_index(sc))
                } else {
                    tables(block).large_head(sc)
                };
                // Relaxed: we own the slab (a claim's Acquire, or since we
                // became its owner), so no one else writes these.
                let mut link = head.load(Ordering::Relaxed);
                while link != 0 {
                    let slot = layout::slot_of_link(region, link);
                    released += release_slot(slot, sc);
                    link = follow_link(slot);
                }
                if claimed {
                    ownership::release(slab);
                }
            }
        }
    }
    released
}

/// Releases the pages past the first of the free slot at `slot`, of size
/// class `sc`, which the caller holds; returns how many bytes of them were
/// resident.
fn release_slot(slot: usize, sc: u32) -> usize {
    let (start, len) = sys::whole_pages(slot + 1, slot + layout::slot_size(sc));
    let resident = sys::resident(start, len);
    if resident != 0 {
        // SAFETY: `[start, start + len)` is page-aligned and inside a free
        // slot the caller holds, past its link's page; its contents are
        // needed by no one.
        unsafe { sys::release(sys::ptr_at(start), len) };
    }
    resident
}
