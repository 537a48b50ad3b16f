//! *Capped private lists*: an owner's frees of the small slots from
//! [`CAPPED_SC`] (16 KiB) up to the large ones take the cold path, and go on
//! the slab's private list only while it holds less than
//! [`PRIVATE_LARGE_BYTES`] of slots (at least one); the rest go on the
//! shared list, where a sweep gives them back and other threads find them.
//! A private list is out of every other thread's reach, so without a cap a
//! thread that frees a peak and then sleeps keeps all of it; these classes
//! hold most of the bytes of the small ones. Allocations of them stay on
//! the hot path.
//!
//! The list's length is its first slot's *depth*: each slot pushed here
//! holds, in its second word, the number of slots from it to the list's
//! end. A pop leaves the next slot first, whose depth is still right, so
//! the hot path keeps no count. Slots that came onto the list some other
//! way (a shared list taken whole, a sweep's stamp) hold any value there: a
//! wrong depth only moves a free to the other list, both of them right.
//! Measured: docs/decisions.md ("Capped private lists").

use core::sync::atomic::Ordering;

use crate::features::links::{SlotLink, second_word, set_second_word};
use crate::layout::{self, CAPPED_SC, LARGE_SC};
use crate::metadata::{self, private_index, tables};
use crate::private_list;

/// Bytes of freed large or capped slots of one size class that an owner
/// keeps on its private list (at least one slot), beyond which it frees them
/// onto the shared list, where other threads can reuse them and sweeps give
/// them back. Measured: docs/decisions.md ("Private lists of large slots").
pub const PRIVATE_LARGE_BYTES: usize = 256 << 10;

/// Whether size class `sc` has capped private lists.
#[inline(always)]
pub fn applies(sc: u32) -> bool {
    (CAPPED_SC..LARGE_SC).contains(&sc)
}

/// Whether a private list of size class `sc` that holds `n` slots may take
/// one more under the cap of [`PRIVATE_LARGE_BYTES`] (at least one slot).
/// A product, not a quotient: a division is the slowest instruction here.
#[inline(always)]
pub fn under_cap(sc: u32, n: u32) -> bool {
    n == 0 || (n as u64 + 1) * layout::slot_size(sc) as u64 <= PRIVATE_LARGE_BYTES as u64
}

/// The owner of the slab at `slab_addr` frees the slot at `addr`, of capped
/// size class `sc` (`cell` its link): onto the slab's private list if that
/// is under its cap. Returns whether it did; the caller then frees it onto
/// the shared list.
///
/// # Safety
/// The caller owns the slab, and the slot, which is of this slab and class.
#[inline]
pub unsafe fn owner_free(slab_addr: usize, sc: u32, addr: usize, cell: &SlotLink) -> bool {
    debug_assert!(applies(sc));
    let head = tables(metadata::private_block(slab_addr)).head(private_index(sc));
    // Relaxed: the owner's cell (see private_list).
    let first = head.load(Ordering::Relaxed);
    let depth = if first == 0 {
        0
    } else {
        let region = layout::region_addr(slab_addr, sc);
        second_word(layout::slot_of_link(region, first))
    };
    if !under_cap(sc, depth) {
        return false;
    }
    set_second_word(addr, depth + 1);
    // SAFETY: per the contract; the slot belongs to this list's region.
    unsafe { private_list::push(head, cell, layout::link_of(addr)) };
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_is_the_byte_budget_in_slots() {
        for sc in (layout::MIN_SC..=layout::MAX_SC).filter(|&sc| applies(sc)) {
            let size = layout::slot_size(sc);
            let slots = (PRIVATE_LARGE_BYTES / size).max(1) as u32;
            assert!(under_cap(sc, slots - 1), "class {sc}");
            assert!(!under_cap(sc, slots), "class {sc}");
            assert!(!under_cap(sc, u32::MAX), "class {sc}");
        }
        // A class larger than the budget still keeps one slot.
        let big = layout::size_class(2 * PRIVATE_LARGE_BYTES, 8);
        if big <= layout::MAX_SC {
            assert!(under_cap(big, 0) && !under_cap(big, 1));
        }
    }

    #[test]
    fn capped_classes_are_the_small_ones_from_16_kib() {
        if crate::features::config::SECURE {
            assert!(!(layout::MIN_SC..=layout::MAX_SC).any(applies));
            return;
        }
        assert_eq!(layout::slot_size(CAPPED_SC), 16 << 10);
        assert!(!applies(CAPPED_SC - 1) && applies(CAPPED_SC));
        assert!(applies(LARGE_SC - 1) && !applies(LARGE_SC));
    }
}
