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
use crate::features::links::{SlotLink, follow_link, load_stamp, store_stamp};
use crate::free_list::LinkCell;
use crate::layout::{self, LARGE_SC, NUM_SCS, NUM_SLABS};
use crate::spans::{self, Scratch};

/// Per (slab, size class): the stamp generation of the last pass (bits
/// 0-23), and how many sweeps the next pass waits (bits 24-27) and the
/// level that set it (bits 28-31) after passes that found idle slots but
/// no whole span (a fragmented pool, not worth a walk each sweep).
static STATE: [[AtomicU32; NUM_SCS]; NUM_SLABS] =
    [const { [const { AtomicU32::new(0) }; NUM_SCS] }; NUM_SLABS];

/// The longest wait: 2^6 - 1 sweeps (about 19 s at the default delay).
const MAX_LEVEL: u32 = 6;

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
    let wait = (st >> 24) & 0xf;
    if wait == 0 {
        return false;
    }
    cell.store(st - (1 << 24), Ordering::Relaxed);
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
    let generation = st & 0xff_ffff;
    let next = (generation + 1) & 0xff_ffff;
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
        let was_idle = load_stamp(slot) == stamp(generation, slot);
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
        store_stamp(slot, stamp(next, slot));
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
            store_stamp(slot, stamp(next, slot))
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
        ((st >> 28) + 1).min(MAX_LEVEL)
    } else {
        0
    };
    let wait = (1 << level) - 1;
    cell.store(next | wait << 24 | level << 28, Ordering::Relaxed);
    Kept {
        first,
        last,
        released: released + spans_released,
        spans_released,
    }
}
