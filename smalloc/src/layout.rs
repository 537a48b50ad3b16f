//! The address layout: every fact about a slot is a bit field of its address.
//!
//! ```text
//!  63        43 42   39 38      34 33                              0
//! +------------+-------+----------+---------------------------------+
//! |    base    | slab  |   size   |   slot number   |    offset     |
//! | (aligned)  | 4 bits|  class   | (34 - sc bits)  |   (sc bits)   |
//! |            |       |  5 bits  |                 |               |
//! +------------+-------+----------+---------------------------------+
//! ```
//!
//! * The reservation is `2^TOTAL_BITS` bytes, aligned to its own size, so `base`
//!   has zeros in every bit below `TOTAL_BITS`.
//! * Each (slab, size class) pair owns a region of `2^REGION_BITS` bytes.
//! * A slot of size class `sc` is `2^sc` bytes and `2^sc`-aligned.
//! * The regions of size classes 0 and 1 in each slab hold no slots (no
//!   size class below [`MIN_SC`] exists); they hold the slab's metadata
//!   instead (`metadata.rs`).
//! * Free lists link slots by *link*: a slot's offset in its region in
//!   4-byte units, plus one ([`link_of`]); 0 ends a list.
//!
//! Under Miri and in the `valgrind` build the geometry shrinks (a terabyte
//! reservation is not possible there), and under ThreadSanitizer the regions
//! do (see [`REGION_BITS`]), but every formula stays the same.

use crate::features::config;

/// Number of address bits of one (slab, size class) region. Smaller in the
/// `valgrind` build (memcheck keeps state for every 64 KiB of a mapping, so
/// an 8 TiB reservation costs it gigabytes; 32 GiB costs it little) and
/// under ThreadSanitizer (`--cfg smalloc_tsan`, set by `devutils/verify.sh`:
/// TSan serves application mappings only from a few fixed ranges of a few
/// TiB, which an 8 TiB reservation aligned to 8 TiB does not fit; 2 TiB
/// does; only the slot counts change).
#[cfg(not(miri))]
pub const REGION_BITS: u32 = if config::VALGRIND {
    26
} else if cfg!(smalloc_tsan) {
    32
} else {
    34
};
/// Number of address bits of one (slab, size class) region under Miri.
#[cfg(miri)]
pub const REGION_BITS: u32 = 18;

/// Largest size class: slots of `2^MAX_SC` bytes (2 GiB; 8 MiB in the
/// `valgrind` build, eight to a region, as the default build's 2 GiB slots
/// are).
#[cfg(not(miri))]
pub const MAX_SC: u32 = if config::VALGRIND { 23 } else { 31 };
/// Largest size class under Miri.
#[cfg(miri)]
pub const MAX_SC: u32 = 15;

/// Smallest size class: 4-byte slots, just large enough for a free-list link
/// (16 bytes in the secure mode: a link and its check).
pub const MIN_SC: u32 = if config::SECURE { 4 } else { 2 };

/// Width of the size class field.
pub const SC_BITS: u32 = 5;
/// Width of the slab field.
pub const SLAB_BITS: u32 = 4;
/// Number of slabs per size class.
pub const NUM_SLABS: usize = 1 << SLAB_BITS;
/// The slab of the sampled allocations of the `profile` feature: the last.
/// No thread lives on it, and no allocation but a sampled one takes its
/// slots, so a free knows a sampled block by its slab.
pub const PROFILE_SLAB: usize = NUM_SLABS - 1;
/// Slabs that threads live on: all of them, but [`PROFILE_SLAB`] with the
/// `profile` feature.
pub const THREAD_SLABS: usize = NUM_SLABS - config::PROFILE as usize;
/// The slabs no thread lives on, as a bit set (empty without `profile`).
pub const RESERVED_SLABS: usize = ((1 << NUM_SLABS) - 1) & !((1 << THREAD_SLABS) - 1);
/// Number of size class codes (0 and 1 are never used for slots).
pub const NUM_SCS: usize = 1 << SC_BITS;

/// Bit position of the size class field.
pub const SC_SHIFT: u32 = REGION_BITS;
/// Bit position of the slab field.
pub const SLAB_SHIFT: u32 = REGION_BITS + SC_BITS;
/// Bits covered by the whole reservation.
pub const TOTAL_BITS: u32 = SLAB_SHIFT + SLAB_BITS;
/// Size of the whole reservation in bytes (8 TiB).
pub const TOTAL_SIZE: usize = 1 << TOTAL_BITS;

/// Largest slot size in bytes.
pub const MAX_SLOT_SIZE: usize = 1 << MAX_SC;

/// Slot numbers of any size class fit in this many bits, so that a link
/// (a slot's offset in 4-byte units, plus one, 0 ending a list) fits in a
/// `u32`: the smallest slots (4 bytes) use the first 4 GiB of a region.
pub const MAX_SLOT_NUM_BITS: u32 = 30;

/// Smallest size class of the *large* slots (64 KiB and more), which take
/// their own, longer path on allocation and free (see `hot_path`), leaving
/// the hot path to the smaller ones. It is the top bit of the size class
/// field, so one bit of an address says whether its slot is large.
pub const LARGE_SC: u32 = 1 << (SC_BITS - 1);

/// Whether the slot at `addr` is large (of at least [`LARGE_SC`]).
#[inline(always)]
pub const fn is_large(addr: usize) -> bool {
    addr & (1 << (SC_SHIFT + SC_BITS - 1)) != 0
}

/// Whether a request of `size` bytes aligned to `align` (a power of two)
/// needs a large slot or a big mapping: [`size_class`] would be at least
/// [`LARGE_SC`]. True for size 0. The cheap test front ends use to pick
/// the hot path.
#[inline(always)]
pub const fn needs_large(size: usize, align: usize) -> bool {
    // size_class is the bit length of this OR (at least MIN_SC); it is below
    // LARGE_SC exactly when the OR is below 2^(LARGE_SC - 1).
    (size.wrapping_sub(1) | (align - 1)) >= (1 << (LARGE_SC - 1))
}

/// Freed slots of this size class and above (128 MiB) give their pages but
/// the first back to the kernel (`purge`). Measured: docs/decisions.md
/// ("Which freed slots give their pages back").
pub const RELEASE_SC: u32 = 27;

/// Bytes of never-used slots between two looks for freed slots elsewhere
/// (64 KiB; every never-used slot, for slots that large): before touching
/// a new step of its region, a thread looks for freed slots on other
/// slabs, and an owner claims a whole step into its fresh run. Measured:
/// docs/decisions.md ("New-memory step").
pub const NEW_MEMORY_STEP: usize = 1 << 16;

const _: () = assert!(
    MAX_SC < REGION_BITS,
    "a region must hold at least two slots"
);
const _: () = assert!(MAX_SC < NUM_SCS as u32);
const _: () = assert!(TOTAL_BITS < usize::BITS);

/// Number of slots of size class `sc` in one slab.
#[inline(always)]
pub const fn num_slots(sc: u32) -> u32 {
    debug_assert!(sc >= MIN_SC && sc <= MAX_SC);
    let bits = REGION_BITS - sc;
    let bits = if bits > MAX_SLOT_NUM_BITS {
        MAX_SLOT_NUM_BITS
    } else {
        bits
    };
    1 << bits
}

/// Smallest size class whose slots hold `size` bytes aligned to `align`.
/// May exceed [`MAX_SC`]; the caller checks. `align` must be a power of two.
#[inline(always)]
pub const fn size_class(size: usize, align: usize) -> u32 {
    debug_assert!(align.is_power_of_two());
    // ceil(log2(x)) is the bit length of x - 1; the bit length of an OR is
    // the largest bit length of its operands, so this is
    // max(ceil_log2(size), log2(align), MIN_SC) in one OR chain.
    let x = size.wrapping_sub(1) | (align - 1) | ((1 << MIN_SC) - 1);
    // size == 0 wraps to usize::MAX: a request for nothing of an enormous
    // class. Callers never pass size 0 (GlobalAlloc forbids it; the C ABI
    // maps malloc(0) to 1).
    usize::BITS - x.leading_zeros()
}

/// Offset of the region of (slab, size class) from the reservation base.
#[inline(always)]
pub const fn region_offset(slab: usize, sc: u32) -> usize {
    (slab << SLAB_SHIFT) | ((sc as usize) << SC_SHIFT)
}

/// Address of slab `slab` of the reservation at `base`: its private block
/// and shared lines live in its size-class-0 region, which holds no slots.
#[inline(always)]
pub const fn slab_addr(base: usize, slab: usize) -> usize {
    base | (slab << SLAB_SHIFT)
}

/// Bytes of the region of size class `sc` that its slots span (the whole
/// region but for size classes 2 and 3, whose slot numbers run out first).
#[inline(always)]
pub const fn slots_span(sc: u32) -> usize {
    (num_slots(sc) as usize) << sc
}

/// Address of the region of (slab, size class), given the slab's address.
#[inline(always)]
pub const fn region_addr(slab_addr: usize, sc: u32) -> usize {
    slab_addr + ((sc as usize) << SC_SHIFT)
}

/// The *link* naming the slot at `addr`: its offset in its region in units
/// of 4 bytes, plus one, so that 0 can mean "no slot" (the end of a list, an
/// empty list). It fits 32 bits: offsets are below 2^34 and, from 8-byte
/// slots on, multiples of 8, and 4-byte slots use only the first 4 GiB.
#[inline(always)]
pub const fn link_of(addr: usize) -> u32 {
    // Bits 2..34 of `offset + 4` depend only on the offset's bits, so with
    // the full geometry this is `(addr + 4) >> 2` truncated: two instructions.
    (((addr & ((1 << REGION_BITS) - 1)) + 4) >> 2) as u32
}

/// The address of the slot named by `link` (non-zero) in the region at
/// `region`. Any link decodes to an address inside that region.
#[inline(always)]
pub const fn slot_of_link(region: usize, link: u32) -> usize {
    (region - 4) + (link as usize) * 4
}

/// The link of slot `slot` of size class `sc`.
#[inline(always)]
pub const fn link_of_slot(sc: u32, slot: u32) -> u32 {
    link_of((slot as usize) << sc)
}

/// Address of slot `slot` of (slab, size class).
#[inline(always)]
pub const fn slot_addr(base: usize, slab: usize, sc: u32, slot: u32) -> usize {
    base | region_offset(slab, sc) | ((slot as usize) << sc)
}

/// Size class of the slot holding address `addr`.
#[inline(always)]
pub const fn sc_of(addr: usize) -> u32 {
    ((addr >> SC_SHIFT) & (NUM_SCS - 1)) as u32
}

/// Slab of the slot holding address `addr`.
#[inline(always)]
pub const fn slab_of(addr: usize) -> usize {
    (addr >> SLAB_SHIFT) & (NUM_SLABS - 1)
}

/// Slot number of the slot holding address `addr`, given its size class.
#[inline(always)]
pub const fn slot_of(addr: usize, sc: u32) -> u32 {
    ((addr & ((1 << REGION_BITS) - 1)) >> sc) as u32
}

/// Address of the slab holding `addr`.
#[inline(always)]
pub const fn slab_addr_of(addr: usize) -> usize {
    addr & !((1 << SLAB_SHIFT) - 1)
}

/// Base of the reservation holding `addr`.
#[inline(always)]
pub const fn base_of(addr: usize) -> usize {
    addr & !(TOTAL_SIZE - 1)
}

/// A slot as the allocation paths return it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Its address; null when no slot could be had.
    pub ptr: *mut u8,
    /// Whether it was never handed out before, so its memory is still zero.
    pub fresh: bool,
}

impl Slot {
    /// No slot.
    pub const NONE: Slot = Slot {
        ptr: core::ptr::null_mut(),
        fresh: false,
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    /// A base address with the required alignment, for pure arithmetic.
    const FAKE_BASE: usize = 5 << TOTAL_BITS;

    #[test]
    fn layout_round_trips_for_every_size_class_and_slab() {
        for sc in MIN_SC..=MAX_SC {
            let n = num_slots(sc);
            for slab in 0..NUM_SLABS {
                let region = region_addr(slab_addr(FAKE_BASE, slab), sc);
                assert_eq!(region, FAKE_BASE + region_offset(slab, sc));
                for slot in [0, 1, n / 2, n - 2, n - 1] {
                    let a = slot_addr(FAKE_BASE, slab, sc, slot);
                    assert_eq!(base_of(a), FAKE_BASE);
                    assert_eq!(sc_of(a), sc, "sc {sc} slab {slab} slot {slot}");
                    assert_eq!(slab_of(a), slab);
                    assert_eq!(slot_of(a, sc), slot);
                    assert_eq!(a % (1 << sc), 0, "slot not naturally aligned");
                    assert_eq!(slab_addr_of(a), slab_addr(FAKE_BASE, slab));
                    // The link names the slot, and is never the end marker.
                    let link = link_of(a);
                    assert_ne!(link, 0);
                    assert_eq!(link, link_of_slot(sc, slot));
                    assert_eq!(slot_of_link(region, link), a, "sc {sc} slot {slot}");
                    // The last byte of the slot maps to the same slot.
                    let last = a + (1 << sc) - 1;
                    assert_eq!(
                        (sc_of(last), slab_of(last), slot_of(last, sc)),
                        (sc, slab, slot)
                    );
                }
                // The whole region stays inside its (slab, sc) field.
                let end = slot_addr(FAKE_BASE, slab, sc, n - 1) + (1 << sc);
                assert!(end <= FAKE_BASE + region_offset(slab, sc) + (1 << REGION_BITS));
            }
        }
        // With the full geometry, any link at all decodes to an address inside
        // its region.
        let region = region_addr(slab_addr(FAKE_BASE, 3), 9);
        let links: &[u32] = if REGION_BITS == 34 {
            &[1, 2, 0x1234_5677, u32::MAX]
        } else {
            &[1, 2]
        };
        for &link in links {
            let a = slot_of_link(region, link);
            assert!(a >= region && a < region + (1 << REGION_BITS), "{link:#x}");
        }
    }

    #[test]
    fn size_class_of_sizes_and_alignments() {
        let cases: &[(usize, usize, u32)] = &[
            (1, 1, 2),
            (4, 4, 2),
            (5, 1, 3),
            (8, 8, 3),
            (9, 1, 4),
            (16, 16, 4),
            (17, 1, 5),
            (1, 16, 4),
            (1, 4096, 12),
            (4097, 4096, 13),
            (100, 1 << 20, 20),
            (1 << 31, 1, 31),
            ((1 << 31) + 1, 1, 32),
            (1, 1 << 31, 31),
            (1, 1 << 32, 32),
            (usize::MAX / 2, 1, 63),
        ];
        for &(size, align, sc) in cases {
            // (The secure mode's slots start at 16 bytes.)
            assert_eq!(
                size_class(size, align),
                sc.max(MIN_SC),
                "size {size} align {align}"
            );
        }
    }

    #[test]
    #[cfg(not(any(miri, smalloc_tsan)))]
    fn slot_counts() {
        assert_eq!(num_slots(MIN_SC), 1 << 30);
        assert_eq!(num_slots(4), 1 << 30);
        assert_eq!(num_slots(5), 1 << 29);
        assert_eq!(num_slots(31), 8);
        assert_eq!(TOTAL_SIZE, 1 << 43);
    }

    #[test]
    #[cfg(miri)]
    fn slot_counts() {
        // The small geometry Miri runs with (see layout.rs).
        assert_eq!(num_slots(2), 1 << 16);
        assert_eq!(num_slots(15), 8);
        assert_eq!(TOTAL_SIZE, 1 << 27);
    }

    #[test]
    fn the_large_slot_tests_agree_with_size_class() {
        // needs_large (the front ends' one-test dispatch) must say exactly
        // "size class >= LARGE_SC": an off-by-one sends 2^(LARGE_SC) - byte
        // requests down the hot path, which never handles large slots.
        let mut sizes: Vec<usize> = (1..=600).collect();
        for k in 2..40 {
            let p = 1usize << k;
            sizes.extend([p - 1, p, p + 1]);
        }
        for &size in &sizes {
            for a in 0..20 {
                let align = 1usize << a;
                let sc = size_class(size, align);
                assert_eq!(
                    needs_large(size, align),
                    sc >= LARGE_SC,
                    "size {size} align {align} (class {sc})"
                );
            }
        }
        assert!(needs_large(0, 1), "size 0 takes the slow path");
        // is_large (free's one-bit test) agrees with the size class of every
        // slot address.
        for sc in MIN_SC..=MAX_SC {
            for slab in [0, NUM_SLABS - 1] {
                let last = num_slots(sc) - 1;
                for slot in [0, last] {
                    let addr = slot_addr(1 << TOTAL_BITS, slab, sc, slot);
                    assert_eq!(is_large(addr), sc >= LARGE_SC, "class {sc}");
                }
            }
        }
    }
}
