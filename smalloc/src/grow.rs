//! Where `realloc` moves a block that outgrows its slot, for both front
//! ends (the `GlobalAlloc` impl and the C ABI in `smalloc-ffi`).
//!
//! A block that must move goes to its "growers" size class
//! ([`grower_sc`]: the smallest of 64 B, 128 B, 4 KiB,
//! 16 KiB, 64 KiB, 256 KiB and 2 MiB that fits, else its own class), so
//! that a block which keeps growing is not copied at every step.
//!
//! A block that **doubles** to more than [`DOUBLING_JUMP_ABOVE`] (64 KiB)
//! skips the 256 KiB rung and goes straight to a 2 MiB slot
//! ([`DOUBLING_SC`]). Doubling is how `Vec`, `String` and most C dynamic
//! arrays grow (a full buffer asks for twice its size), and such a block
//! usually doubles again: from 128 KiB on it grows in place up to 2 MiB,
//! where the ladder moved it to 256 KiB and copied it again, 256 KiB of
//! it, at 512 KiB (63% of the bytes `bench --compare`'s `vec-grow` row
//! copied). "Doubles" means exactly twice the old size (Rust: the old
//! layout's size; C: the old slot's size, the only size it knows and the
//! number of bytes it copies); random resizes practically never ask for
//! that, and keep the ladder.
//!
//! What the jump costs in page-table pages, and what jumping earlier
//! would cost: docs/decisions.md ("Growth: the doubling jump").
//!
//! Moving the pages of the old slot instead of copying them (`mremap`,
//! `UFFDIO_MOVE`) was measured too and lost at these sizes. Measurements:
//! docs/vec-grow.md.

use core::ptr;

use crate::features;
use crate::hot_path;
use crate::layout::{self, MAX_SC, class_of_mask, slot_size};

/// A block that doubles to more than this many bytes moves straight to a
/// slot of [`DOUBLING_SC`].
pub const DOUBLING_JUMP_ABOVE: usize = 64 << 10;

/// The size class (2 MiB) a doubling block of more than
/// [`DOUBLING_JUMP_ABOVE`] bytes jumps to: the largest "growers" rung.
pub const DOUBLING_SC: u32 = class_of_mask((2 << 20) - 1);

/// Size class the "growers" policy moves a reallocation to when it needs a
/// slot of at least size class `sc`: the smallest of 64 B, 128 B, 4 KiB,
/// 16 KiB, 64 KiB, 256 KiB and 2 MiB that fits, else `sc` itself.
#[inline]
pub const fn grower_sc(sc: u32) -> u32 {
    const GROWERS: [usize; 7] = [64, 128, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 2 << 20];
    let mut i = 0;
    while i < GROWERS.len() {
        let rung = class_of_mask(GROWERS[i] - 1);
        if rung >= sc && rung <= MAX_SC {
            return rung;
        }
        i += 1;
    }
    sc
}

/// Smallest slot that a shrinking reallocation leaves (1 MiB).
pub const SHRINK_MOVE_MIN: usize = 1 << 20;

/// Whether a reallocation that shrinks a block in a slot of `slot_size`
/// bytes to `new_size` bytes moves it to a smaller slot: when the slot is
/// at least 1 MiB ([`SHRINK_MOVE_MIN`]) and the new size is an eighth
/// of it or less. The slot given up goes back to its free list for the next
/// allocation of its size class (and from 128 MiB on, its pages back to the
/// kernel) instead of staying with a block that no longer needs it.
/// Otherwise the block keeps its slot. The C realloc asks this in bytes, to
/// keep its fast path free of a size-class computation; it agrees with
/// [`moves_on_shrink`] because an eighth of such a slot is a size class.
///
/// Why 1 MiB and an eighth, measured: docs/decisions.md ("Shrinking out of
/// a slot").
#[inline(always)]
pub const fn shrink_leaves_slot(slot_size: usize, new_size: usize) -> bool {
    slot_size >= SHRINK_MOVE_MIN && new_size <= slot_size >> 3
}

/// [`shrink_leaves_slot`] in size classes: a block in a slot of `cur_sc`
/// shrinking to a size of size class `new_sc`.
#[inline]
pub const fn moves_on_shrink(cur_sc: u32, new_sc: u32) -> bool {
    shrink_leaves_slot(slot_size(cur_sc), slot_size(new_sc))
}

/// Size class of the slot a block of `old_size` bytes moves to when it
/// grows to `new_size` bytes, which need size class `new_sc` (with the
/// block's alignment) and do not fit its current slot. The C front end,
/// which does not know the old size, passes the old slot's size.
#[inline]
const fn target_sc(old_size: usize, new_size: usize, new_sc: u32) -> u32 {
    if doubles_past_jump(old_size, new_size) && new_sc <= DOUBLING_SC && DOUBLING_SC <= MAX_SC {
        DOUBLING_SC
    } else {
        grower_sc(new_sc)
    }
}

/// Whether `new_size` is exactly twice `old_size` and more than
/// [`DOUBLING_JUMP_ABOVE`].
#[inline]
const fn doubles_past_jump(old_size: usize, new_size: usize) -> bool {
    new_size > DOUBLING_JUMP_ABOVE && new_size % 2 == 0 && new_size / 2 == old_size
}

/// Whether [`realloc_slot`] without the old size (C's `realloc`) keeps a
/// block of a slot of `slot_size` bytes that is asked to hold `new_size <=
/// slot_size` bytes, where the shrink rule ([`shrink_leaves_slot`]) would
/// move it to a smaller slot.
///
/// Without the old size growth cannot be told from shrinking, so a doubling array that [`target_sc`] put in a 2 MiB slot
/// at 128 KiB would be moved out again at 256 KiB (an eighth of the slot)
/// and back at 512 KiB: copied twice where the ladder copied once. Such an
/// array asks for powers of two (it doubled from a whole slot), so a 2 MiB
/// slot keeps a block asked to be a power of two above
/// [`DOUBLING_JUMP_ABOVE`]. A real shrink to exactly such a size keeps the
/// slot too, as shrinking to any size above an eighth does.
#[inline]
const fn c_keeps_doubling_block(slot_size: usize, new_size: usize) -> bool {
    DOUBLING_SC <= MAX_SC
        && slot_size == self::slot_size(DOUBLING_SC)
        && new_size > DOUBLING_JUMP_ABOVE
        && new_size.is_power_of_two()
}

/// `realloc` of a block in a slot, for both front ends: the block at `p`
/// (its slot's start) asks to hold `new_size` bytes (`> 0`) with alignment
/// `align`. `old_size` is the block's size when the caller knows it (Rust),
/// `None` when it knows only the slot (C: the slot's size stands for it, and
/// a doubling block that a jump placed in a 2 MiB slot stays there, see
/// `c_keeps_doubling_block`). Returns `p` when the block stays, else a
/// new block holding the kept bytes (`p` is then freed), or null when no
/// slot or mapping could be had (`p` untouched). `big` maps a block above
/// the largest slot (each front end keeps its own kind).
///
/// # Safety
/// `p` is the start of a live slot the caller owns, of at least `old_size`
/// bytes.
#[inline]
pub unsafe fn realloc_slot(
    p: *mut u8,
    old_size: Option<usize>,
    new_size: usize,
    align: usize,
    big: impl FnOnce(usize, usize) -> *mut u8,
) -> *mut u8 {
    debug_assert!(new_size > 0);
    let cur_sc = layout::sc_of(p.addr());
    let slot = slot_size(cur_sc);
    let old = old_size.unwrap_or(slot);
    let new_sc = layout::size_class(new_size, align);
    let req = crate::features::Request::new(new_size);
    // The slot may be larger than the block asked for (growers, failover to
    // a larger size class): stay while it fits, unless the block shrinks to
    // an eighth of a slot of 1 MiB or more. Growing never leaves a slot that
    // fits (a doubling block in a 2 MiB slot grows there from 128 KiB on).
    if new_sc <= cur_sc
        && (new_size >= old
            || !moves_on_shrink(cur_sc, new_sc)
            || (old_size.is_none() && c_keeps_doubling_block(slot, new_size)))
    {
        features::resized(p, old_size, new_size);
        return p;
    }
    let (q, keep) = if new_sc > crate::geometry::largest_sc() {
        // Also a shrink, out of a slot above those new blocks get now.
        (big(new_size, align), old.min(new_size))
    } else if new_sc > cur_sc {
        let q = hot_path::alloc(target_sc(old, new_size, new_sc), req).ptr;
        // No slot left for it: a mapping of its own, as a new block gets.
        (if q.is_null() { big(new_size, align) } else { q }, old)
    } else {
        // Shrinking: the smaller slot holds exactly what is kept.
        (hot_path::alloc(new_sc, req).ptr, new_size)
    };
    // Memcheck knows the block's size when the front end does not.
    let keep = features::copy_len(p, old_size, keep);
    if !q.is_null() {
        // SAFETY: `q` is a new block of at least `keep` bytes, the smaller of
        // the two sizes; the caller owns `p`, a slot.
        unsafe {
            ptr::copy_nonoverlapping(p, q, keep);
            hot_path::dealloc(p);
        }
    } else if new_sc <= cur_sc {
        // No smaller slot to be had: the block fits where it is.
        features::resized(p, old_size, new_size);
        return p;
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::MIN_SC;
    use crate::layout::size_class;
    use std::vec::Vec;

    #[test]
    #[cfg_attr(miri, ignore = "no 2 MiB slots in Miri's geometry")]
    fn doubling_past_64_kib_jumps_to_2_mib() {
        let kib = 1 << 10;
        for (old, new, want) in [
            (64 * kib, 128 * kib, 2048 * kib), // a full 64 KiB Vec doubles
            (48 * kib, 96 * kib, 2048 * kib),  // Vec<[u8; 24]>: 3/4 of its slot
            (512 * kib, 1024 * kib, 2048 * kib),
            (1024 * kib, 2048 * kib, 2048 * kib),
            (2048 * kib, 4096 * kib, 4096 * kib), // past 2 MiB: its own class
            (32 * kib, 64 * kib, 64 * kib),       // not above 64 KiB: the ladder
            (16 * kib, 32 * kib, 64 * kib),
            (64 * kib, 128 * kib + 1, 256 * kib), // not exactly doubling: the ladder
            (64 * kib, 160 * kib, 256 * kib),
            (100 * kib, 150 * kib, 256 * kib),
            ((1 << 63) + 64 * kib, 128 * kib, 256 * kib), // a huge old size: no doubling
        ] {
            let sc = size_class(new.max(1), 1);
            assert_eq!(slot_size(target_sc(old, new, sc)), want, "{old} -> {new}");
        }
    }

    #[test]
    fn without_doubling_the_ladder_decides() {
        for sc in crate::layout::MIN_SC..=MAX_SC {
            assert_eq!(
                target_sc(1, slot_size(sc) - 1, sc),
                grower_sc(sc),
                "sc {sc}"
            );
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "no 2 MiB slots in Miri's geometry")]
    fn c_keeps_what_a_doubling_jump_placed() {
        let slot = 2 << 20;
        for n in [128 << 10, 256 << 10] {
            assert!(shrink_leaves_slot(slot, n), "{n}: the shrink rule applies");
            assert!(c_keeps_doubling_block(slot, n), "{n}");
        }
        // Not a power of two, not above 64 KiB, or not a 2 MiB slot: the
        // shrink rule decides.
        for (slot, n) in [
            (slot, 200 << 10),
            (slot, 64 << 10),
            (slot, 1000),
            (4 << 20, 256 << 10),
            (1 << 20, 128 << 10),
        ] {
            assert!(!c_keeps_doubling_block(slot, n), "{slot} {n}");
        }
    }

    #[test]
    fn growers() {
        let kib = 1 << 10;
        let want: &[(usize, usize)] = &[
            (4, 64),
            (64, 64),
            (80, 128),
            (128, 128),
            (160, 4 * kib),
            (256, 4 * kib),
            (4 * kib, 4 * kib),
            (5 * kib, 16 * kib),
            (16 * kib, 16 * kib),
            (20 * kib, 64 * kib),
            (64 * kib, 64 * kib),
            (80 * kib, 256 * kib),
            (320 * kib, 2048 * kib),
            (2048 * kib, 2048 * kib),
            (4096 * kib, 4096 * kib),
            (1 << 31, 1 << 31),
        ];
        // Under Miri's small geometry the growers above MAX_SC do not exist.
        for &(size, g) in want.iter().filter(|&&(_, g)| g <= layout::MAX_SLOT_SIZE) {
            let sc = size_class(size, 1).max(MIN_SC);
            assert_eq!(slot_size(sc), size.max(1 << MIN_SC), "{size} is a class");
            assert_eq!(slot_size(grower_sc(sc)), g.max(1 << MIN_SC), "size {size}");
        }
    }

    #[test]
    fn the_shrink_rule_agrees_in_bytes_and_in_size_classes() {
        // The C realloc asks `shrink_leaves_slot` in bytes; core realloc asks
        // `moves_on_shrink` in size classes. They must agree for every slot and
        // every smaller size around the powers of two and the class sizes.
        let mut moving = 0;
        let mut sizes: Vec<usize> = (MIN_SC..=MAX_SC).map(slot_size).collect();
        sizes.extend((0..32).map(|k| 1usize << k));
        for cur_sc in MIN_SC..=MAX_SC {
            let slot = slot_size(cur_sc);
            for &s in &sizes {
                for size in [s - 1, s, s + 1] {
                    if size == 0 || size > slot {
                        continue;
                    }
                    let bytes = shrink_leaves_slot(slot, size);
                    let classes = moves_on_shrink(cur_sc, size_class(size, 16));
                    assert_eq!(bytes, classes, "slot {slot}, size {size}");
                    moving += usize::from(bytes);
                }
            }
        }
        // Miri's small geometry has no slot of 1 MiB: nothing moves there.
        assert_eq!(moving > 0, layout::MAX_SLOT_SIZE >= SHRINK_MOVE_MIN);
        assert!(!shrink_leaves_slot(1 << 19, 1));
        assert!(shrink_leaves_slot(1 << 20, 1 << 17));
        assert!(!shrink_leaves_slot(1 << 20, (1 << 17) + 1));
        assert!(shrink_leaves_slot(1280 << 10, 160 << 10));
        assert!(!shrink_leaves_slot(1280 << 10, (160 << 10) + 1));
    }
}
