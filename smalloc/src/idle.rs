//! *Idle slots*: freed slots that stayed on a list, untaken, from one sweep
//! to the next. A list in use is never quiet, so a sweep that waited for
//! quiet lists kept a class's whole free pool resident while the program
//! used a few of its slots (a compiler's parse frees thousands of one size,
//! then each function takes a handful). A sweep of a list that changed
//! takes it whole, gives back the spans (and the pages past the first of
//! large slots) whose slots carry the stamp it wrote into each slot it put
//! back last time, and stamps the rest. A slot taken and freed meanwhile
//! usually lost the stamp to its user's writes; when it did not, the only
//! cost is a page given back that was in use a moment ago.
//!
//! Only where the sweeping thread is the only one that allocates (no
//! background thread): it then holds no list another thread is waiting
//! for. Not in the secure mode (its check word is where the stamp goes).

use core::sync::atomic::{AtomicU32, Ordering};

use crate::features::config;
use crate::features::links::{SlotLink, follow_link, second_word, set_second_word};
use crate::free_list::LinkCell;
use crate::layout::{self, LARGE_SC, NUM_SCS, NUM_SLABS};
use crate::spans::{self, Scratch};

/// Per (slab, size class): the stamp generation of the last pass
/// ([`GENERATION`]), and how many sweeps the next pass waits (from
/// [`WAIT_SHIFT`]) and the level that set it (from [`LEVEL_SHIFT`]) after
/// passes that found idle slots but no whole span (a fragmented pool, not
/// worth a walk each sweep).
static STATE: [[AtomicU32; NUM_SCS]; NUM_SLABS] =
    [const { [const { AtomicU32::new(0) }; NUM_SCS] }; NUM_SLABS];

/// The longest wait: 2^6 - 1 sweeps (about 19 s at the default delay).
const MAX_LEVEL: u32 = 6;

/// In a [`STATE`] word: the generation (20 bits).
const GENERATION: u32 = (1 << 20) - 1;
/// In a [`STATE`] word: where the wait starts (6 bits, up to 63).
const WAIT_SHIFT: u32 = 20;
/// In a [`STATE`] word: where the level starts (3 bits, up to 6).
const LEVEL_SHIFT: u32 = 26;

/// Whether passes run for size class `sc` (slots of 8 bytes and more, which
/// hold a stamp after the link).
pub fn applies(sc: u32) -> bool {
    !config::SECURE && layout::slot_size(sc) >= 8
}

/// Whether the pass for (slab, size class) waits this sweep (counts the
/// wait down). The caller holds the sweep lock.
pub fn waits(slab: usize, sc: u32) -> bool {
    let cell = cell(slab, sc);
    // Relaxed: ours under the sweep lock.
    let st = cell.load(Ordering::Relaxed);
    if (st >> WAIT_SHIFT) & 0x3f == 0 {
        return false;
    }
    cell.store(st - (1 << WAIT_SHIFT), Ordering::Relaxed);
    true
}

fn cell(slab: usize, sc: u32) -> &'static AtomicU32 {
    &STATE[slab % NUM_SLABS][sc as usize % NUM_SCS]
}

/// The stamp of a generation for the slot at `slot`: mixed with the
/// address, so that a block's leftover data rarely passes for it.
fn stamp(generation: u32, slot: usize) -> u32 {
    let x = (slot as u32 ^ (slot >> 32) as u32).wrapping_mul(0x9e37_79b1) ^ generation;
    (x ^ (x >> 15)).wrapping_mul(0x85eb_ca6b) | 1
}

/// What a pass leaves: the chain to put back.
pub struct Kept {
    /// Its first link (0 if every slot went back to the kernel).
    pub first: u32,
    /// Its last slot's address.
    pub last: usize,
    /// Resident bytes given back.
    pub released: usize,
    /// Of which by whole spans (the rest [`release_slot`] counted).
    ///
    /// [`release_slot`]: crate::purge::release_slot
    pub spans_released: usize,
}

/// A sweep holds the chain starting at `first` of (slab, size class),
/// taken whole from its shared list (every slot below `tail`): gives back
/// the spans whose slots are all idle (for large slots: each idle slot's
/// pages past the first), stamps what is left and returns it, the slots
/// taken since the last pass first, then the idle ones in address order.
/// The caller holds the sweep lock.
pub fn pass(slab_addr: usize, sc: u32, first: u32, tail: u32) -> Kept {
    let slab = layout::slab_of(slab_addr);
    let region = layout::region_addr(slab_addr, sc);
    let cell = cell(slab, sc);
    // Relaxed: ours under the sweep lock.
    let st = cell.load(Ordering::Relaxed);
    let generation = st & GENERATION;
    let next = (generation + 1) & GENERATION;
    let geometry = if sc < LARGE_SC {
        spans::geometry(sc)
    } else {
        None
    };
    // Small slots: idle ones are marked here and go back by whole spans.
    let scratch = geometry.and_then(|_| Scratch::new(tail as usize / 64 + 1));
    let mut bits = scratch.as_ref().map(|s| s.words());
    // The slots that are not idle (or cannot be marked), chained as met.
    let (mut busy_first, mut busy_last) = (0u32, 0usize);
    let (mut idle, mut released) = (0u32, 0usize);
    let mut link = first;
    let mut n = 0;
    while link != 0 && n <= tail {
        n += 1;
        let slot = layout::slot_of_link(region, link);
        // The take's Acquire ordered the pushes before us.
        link = follow_link(slot);
        let was_idle = second_word(slot) == stamp(generation, slot);
        if was_idle {
            idle += 1;
            if let Some(bits) = bits.as_deref_mut() {
                let k = layout::slot_index(slot - region, sc) as usize;
                if let Some(w) = bits.get_mut(k / 64) {
                    *w |= 1 << (k % 64);
                    continue;
                }
            } else if sc >= LARGE_SC {
                released += crate::purge::release_slot(slot, sc);
            }
        }
        set_second_word(slot, stamp(next, slot));
        // SAFETY: the slot is free and this sweep holds it.
        unsafe { SlotLink::of(slot).store_link(0) };
        if busy_last == 0 {
            busy_first = layout::link_of(slot);
        } else {
            // SAFETY: as above.
            unsafe { SlotLink::of(busy_last).store_link(layout::link_of(slot)) };
        }
        busy_last = slot;
    }
    let (mut whole, mut spans_released) = (0, 0);
    let (mut first, mut last) = (busy_first, busy_last);
    if let (Some(g), Some(bits)) = (geometry, bits) {
        if let Some((r, given)) = spans::give_back_marked(slab_addr, sc, g, bits, tail) {
            spans_released = r;
            whole = given;
        }
        let (idle_first, idle_last, _) = spans::relink_marked(region, sc, bits, |slot| {
            set_second_word(slot, stamp(next, slot))
        });
        if idle_first != 0 {
            if busy_last == 0 {
                first = idle_first;
            } else {
                // SAFETY: the slot is free and this sweep holds it.
                unsafe { SlotLink::of(busy_last).store_link(idle_first) };
            }
            last = idle_last;
        }
    } else if released != 0 {
        whole = 1;
    }
    // Idle slots but nothing whole: wait longer before the next walk.
    let level = if idle != 0 && whole == 0 {
        ((st >> LEVEL_SHIFT) + 1).min(MAX_LEVEL)
    } else {
        0
    };
    let wait = (1 << level) - 1;
    cell.store(
        next | wait << WAIT_SHIFT | level << LEVEL_SHIFT,
        Ordering::Relaxed,
    );
    Kept {
        first,
        last,
        released: released + spans_released,
        spans_released,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_wait_counts_down_without_touching_the_generation_or_level() {
        let (slab, sc) = (3, 9);
        let st = 12345 | ((1 << MAX_LEVEL) - 1) << WAIT_SHIFT | MAX_LEVEL << LEVEL_SHIFT;
        cell(slab, sc).store(st, Ordering::Relaxed);
        for _ in 0..(1 << MAX_LEVEL) - 1 {
            assert!(waits(slab, sc));
        }
        assert!(!waits(slab, sc));
        let st = cell(slab, sc).load(Ordering::Relaxed);
        assert_eq!((st & GENERATION, st >> LEVEL_SHIFT), (12345, MAX_LEVEL));
    }

    #[test]
    fn a_stamp_depends_on_the_generation_and_the_slot() {
        let slot = 0x7000_0000_1230;
        assert_ne!(stamp(1, slot), stamp(2, slot));
        assert_ne!(stamp(1, slot), stamp(1, slot + 16));
        assert_ne!(stamp(0, slot), 0, "a zeroed slot never passes for idle");
    }
}
