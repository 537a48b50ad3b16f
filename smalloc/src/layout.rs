//! The address layout: every fact about a slot is a bit field of its address.
//!
//! ```text
//!  63        43 42   39 38      32 31                              0
//! +------------+-------+----------+---------------------------------+
//! |    base    | slab  |   size   |   offset in the region:         |
//! | (aligned)  | 4 bits|  class   |   slot number * slot size       |
//! |            |       |  7 bits  |   + offset in the slot          |
//! +------------+-------+----------+---------------------------------+
//! ```
//!
//! * The reservation is `2^TOTAL_BITS` bytes, aligned to its own size, so `base`
//!   has zeros in every bit below `TOTAL_BITS`.
//! * Each (slab, size class) pair owns a region of `2^REGION_BITS` bytes.
//! * Size classes go four to a doubling up to 1 MiB, powers of two above
//!   (see [`slot_size`]): a slot of class
//!   `sc` is `slot_size(sc)` bytes, the slots of a region lie end to end from
//!   its first slot's offset ([`first_slot`]), so slot `n` is at
//!   `first_slot(sc) + n * slot_size(sc)`; an address's slot number is a
//!   multiply by a reciprocal ([`slot_index`]), never a division.
//! * The regions of size classes 0 and 1 in each slab hold no slots (no
//!   size class below [`MIN_SC`] exists); they hold the slab's metadata
//!   instead (`metadata.rs`).
//! * Free lists link slots by *link*: a slot's offset in its region plus 4
//!   ([`link_of`]); 0 ends a list.
//!
//! Under Miri and in the `valgrind` build the geometry shrinks (a terabyte
//! reservation is not possible there), and under ThreadSanitizer the regions
//! do (see [`REGION_BITS`]), but every formula stays the same.

use crate::features::config;

/// Number of address bits of one (slab, size class) region. Smaller in the
/// `valgrind` build (memcheck keeps state for every 64 KiB of a mapping, so
/// an 8 TiB reservation costs it gigabytes; 32 GiB costs it little), in the
/// `va39` build (a 128 GiB layout, which a 512 GiB address space holds)
/// and
/// under ThreadSanitizer (`--cfg smalloc_tsan`, set by `devutils/verify.sh`:
/// TSan serves application mappings only from a few fixed ranges of a few
/// TiB, which an 8 TiB reservation aligned to 8 TiB does not fit; 2 TiB
/// does; only the slot counts change).
#[cfg(not(miri))]
pub const REGION_BITS: u32 = if config::VALGRIND {
    24
} else if config::VA39 {
    26
} else if cfg!(smalloc_tsan) {
    30
} else {
    32
};
/// Number of address bits of one (slab, size class) region under Miri.
#[cfg(miri)]
pub const REGION_BITS: u32 = 18;

/// Largest size class: slots of half a region (2 GiB; 8 MiB in the
/// `valgrind` build, 128 KiB under Miri), two to a region.
pub const MAX_SC: u32 = class_of_mask((1 << (REGION_BITS - 1)) - 1);

/// Smallest size class: 4-byte slots, just large enough for a free-list link
/// (16 bytes in the secure mode: a link and its check).
pub const MIN_SC: u32 = if config::SECURE { 4 } else { 2 };

/// Width of the size class field.
pub const SC_BITS: u32 = 7;
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
/// Number of size class codes (0 and 1 are never used for slots, nor those
/// above [`MAX_SC`]).
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
pub const MAX_SLOT_SIZE: usize = slot_size(MAX_SC);

/// Slot numbers of any size class are below `2^MAX_SLOT_NUM_BITS - 1`, so
/// that a link (a slot's offset plus 4, 0 ending a list) fits in a `u32`
/// even for the last 4-byte slot of a 4 GiB region.
pub const MAX_SLOT_NUM_BITS: u32 = 30;

/// Smallest size class of the *large* slots (64 KiB and more), which take
/// their own, longer path on allocation and free (see `hot_path`), leaving
/// the hot path to the smaller ones.
pub const LARGE_SC: u32 = class_of_mask((64 << 10) - 1);

/// Smallest size class of the *capped* slots (16 KiB up to the large
/// ones): an owner frees them on the cold path, onto its private list only
/// while that holds less than a cap (`capped`). Not in the secure mode (the
/// cap's count lies where its fill is). Measured: docs/decisions.md
/// ("Capped private lists").
pub const CAPPED_SC: u32 = if config::SECURE {
    LARGE_SC
} else {
    class_of_mask((16 << 10) - 1)
};

/// Whether the slot at `addr` is large (of at least [`LARGE_SC`]).
#[inline(always)]
pub const fn is_large(addr: usize) -> bool {
    sc_of(addr) >= LARGE_SC
}

/// Freed slots of this size class and above (128 MiB: blocks of more than
/// 64 MiB) give their pages but the first back to the kernel (`purge`).
/// Measured: docs/decisions.md ("Which freed slots give their pages back").
pub const RELEASE_SC: u32 = class_of_mask(64 << 20);

/// Bytes of never-used slots between two looks for freed slots elsewhere
/// (64 KiB; every never-used slot, for slots that large): before touching
/// a new step of its region, a thread looks for freed slots on other
/// slabs, and an owner claims a whole step into its fresh run. Measured:
/// docs/decisions.md ("New-memory step").
pub const NEW_MEMORY_STEP: usize = 1 << 16;

const _: () = assert!(MAX_SC < NUM_SCS as u32);
const _: () = assert!(TOTAL_BITS < usize::BITS);
// Slot numbers come from offsets by a 64-bit reciprocal, exact below 2^32.
const _: () = assert!(REGION_BITS <= 32);

/// Size in bytes of the slots of size class `sc` (`MIN_SC..=MAX_SC`): 4
/// and 8 bytes (codes 2 and 3), then multiples of 16 up to 128 (codes 4 to
/// 11), then four to a doubling, each a quarter of the doubling's start
/// above the one before: 160, 192, 224, 256, 320, ... up to 1 MiB (code
/// 63), then powers of two (docs/decisions.md, "Size classes between the
/// powers of two"). A request up to 1 MiB gets at most 1.25 times its size
/// rounded up to 16; the alignment it asks for
/// is kept by the choice of class ([`request_mask`]). Every slot of 16 bytes
/// or more is 16-aligned.
#[inline(always)]
pub const fn slot_size(sc: u32) -> usize {
    // (Masked: no bounds check, so no panic, is reachable.)
    SLOT_SIZES[sc as usize & (NUM_SCS - 1)]
}

/// [`slot_size`] as a divisor: the size classes that hold no slots give 1.
#[inline(always)]
pub const fn slot_size_nonzero(sc: u32) -> core::num::NonZeroUsize {
    match core::num::NonZeroUsize::new(slot_size(sc)) {
        Some(n) => n,
        None => core::num::NonZeroUsize::MIN,
    }
}

/// [`slot_size`] of every size class code (0 for codes that hold no slots).
const SLOT_SIZES: [usize; NUM_SCS] = {
    let mut t = [0; NUM_SCS];
    let mut sc = 2;
    while sc < NUM_SCS {
        t[sc] = size_of_code(sc as u32);
        sc += 1;
    }
    t
};

/// The slot size of code `sc >= 2` by the formula [`slot_size`] describes.
const fn size_of_code(sc: u32) -> usize {
    if sc < 4 {
        return 1 << sc;
    }
    if sc > QUARTER_TOP_SC {
        // Powers of two above 1 MiB.
        // (Codes past any slot, which only the tables reach: capped.)
        let bits = sc - QUARTER_TOP_SC + 20;
        return 1 << if bits > 62 { 62 } else { bits };
    }
    let i = sc - 4;
    if i < 4 {
        return 16 * (i as usize + 1);
    }
    // Four classes to each doubling from 64 bytes on.
    let (e, k) = (2 + (i - 4) / 4, (i - 4) % 4);
    (16 * (5 + k as usize)) << (e - 2)
}

/// The size class of 1 MiB slots, the last of four to a doubling.
const QUARTER_TOP_SC: u32 = 63;

/// Smallest size class whose slots hold `size` bytes aligned to `align`.
/// May exceed [`MAX_SC`]; the caller checks. `align` must be a power of two.
#[inline(always)]
pub const fn size_class(size: usize, align: usize) -> u32 {
    debug_assert!(align.is_power_of_two());
    // size == 0 wraps to usize::MAX: a request for nothing of an enormous
    // class. Callers never pass size 0 (GlobalAlloc forbids it; the C ABI
    // maps malloc(0) to 1).
    class_of_mask(request_mask(size, align))
}

/// The request's *mask*: `size - 1` with the alignment's low bits (and the
/// smallest slot's) set. Its class, [`class_of_mask`], is the smallest
/// whose slots both hold `size` bytes and are aligned to `align`: the mask
/// plus one is a multiple of `align` and at least `size`, and the smallest
/// class at or above a multiple of `2^k` is itself a multiple of `2^k`.
#[inline(always)]
pub const fn request_mask(size: usize, align: usize) -> usize {
    size.wrapping_sub(1) | (align - 1) | ((1 << MIN_SC) - 1)
}

/// The smallest size class of at least `mask + 1` bytes, for a mask of at
/// least 3: a power of two below 16 bytes, then steps of 16 bytes while
/// `16 * (mask / 16 + 1)` is at most 128, then four steps to a doubling.
/// At most 107 (for `usize::MAX`).
#[inline(always)]
pub const fn class_of_mask(mask: usize) -> u32 {
    debug_assert!(mask >= 3);
    if mask < 8 {
        return if mask < 4 { 2 } else { 3 };
    }
    // In 16-byte units less one, m; e the bit length of m less one, at least
    // 2 (below 4 units every step is one unit); the next two bits of m say
    // the quarter. For m < 4, m >> 0 is m itself and 4 * 2 + m - 4 = 4 + m.
    if mask >= 1 << 20 {
        // Powers of two above 1 MiB: the bit length of the mask.
        return QUARTER_TOP_SC - 20 + mask.ilog2() + 1;
    }
    let m = mask >> 4;
    let e = (m | 4).ilog2();
    4 * e + (m >> (e - 2)) as u32 - 4
}

/// Whether every slot of size class `up` has the alignment a request of
/// size class `sc` asked for, so that a request may take a slot of `up`
/// instead (failover, a borrowed larger slot): a request's alignment
/// divides its class's slot size, and slots are aligned to their size's
/// largest power-of-two factor.
#[inline]
pub const fn keeps_alignment(sc: u32, up: u32) -> bool {
    slot_size(up).trailing_zeros() >= slot_size(sc).trailing_zeros()
}

/// Number of slots of size class `sc` in one slab.
#[inline(always)]
pub const fn num_slots(sc: u32) -> u32 {
    debug_assert!(sc >= MIN_SC && sc <= MAX_SC);
    NUM_SLOTS[sc as usize & (NUM_SCS - 1)]
}

/// [`num_slots`] of every size class code (0 for codes that hold no slots).
const NUM_SLOTS: [u32; NUM_SCS] = {
    let mut t = [0; NUM_SCS];
    let mut sc = 2;
    while sc < NUM_SCS {
        let (first, size) = (first_slot_of_code(sc as u32), size_of_code(sc as u32));
        let mut n = ((1usize << REGION_BITS) - first) / size;
        if n >= 1 << MAX_SLOT_NUM_BITS {
            n = (1 << MAX_SLOT_NUM_BITS) - 1;
        }
        // The last slot's link (its offset plus 4) must fit 32 bits.
        if n > 0 && first + (n - 1) * size + 4 > u32::MAX as usize {
            n -= 1;
        }
        t[sc] = n as u32;
        sc += 1;
    }
    t
};

/// The reciprocal of every slot size: `floor(2^64 / size) + 1` (`2^64 /
/// size` for powers of two), so that the high half of `offset *
/// reciprocal` is `offset / size` for every offset below 2^32 (the error,
/// below `offset / 2^64`, stays under `1 / size`).
const RECIPROCALS: [u64; NUM_SCS] = {
    let mut t = [0; NUM_SCS];
    let mut sc = 2;
    while sc < NUM_SCS {
        t[sc] = u64::MAX / size_of_code(sc as u32) as u64 + 1;
        sc += 1;
    }
    t
};

/// The number of the slot of size class `sc` that holds the byte at
/// `offset` of its region (at or past [`first_slot`]): a multiply, not a
/// division. An offset before the first slot gives a number past the
/// region's last.
#[inline(always)]
pub const fn slot_index(offset: usize, sc: u32) -> u32 {
    debug_assert!(offset < 1 << REGION_BITS);
    let reciprocal = RECIPROCALS[sc as usize & (NUM_SCS - 1)];
    let from_first = offset.wrapping_sub(first_slot(sc)) & ((1 << REGION_BITS) - 1);
    ((from_first as u128 * reciprocal as u128) >> 64) as u32
}

/// The offset of the first slot of size class `sc` in its regions: a few
/// lines and pages past the region's start, different for each class, so
/// that the first slots of the classes a program uses together do not all
/// share one L1 set and one linear-address tag (every region starts 4 GiB
/// aligned); a multiple of the class's alignment (the largest power of two
/// dividing its slot size). Measured: docs/decisions.md ("The first slot of
/// each class").
#[inline(always)]
pub const fn first_slot(sc: u32) -> usize {
    FIRST_SLOTS[sc as usize & (NUM_SCS - 1)] as usize
}

/// [`first_slot`] of every size class code.
const FIRST_SLOTS: [u32; NUM_SCS] = {
    let mut t = [0; NUM_SCS];
    let mut sc = 2;
    while sc < NUM_SCS {
        t[sc] = first_slot_of_code(sc as u32) as u32;
        sc += 1;
    }
    t
};

/// The first slot's offset of code `sc >= 2`: `sc` in the L1 set bits (6
/// to 11) and its low four bits in the next four (12 to 15), below 64 KiB
/// and below a quarter of a region, rounded down to the class's alignment.
const fn first_slot_of_code(sc: u32) -> usize {
    let raw = (sc as usize * 0x1040) & 0xffc0 & ((1 << (REGION_BITS - 2)) - 1);
    let align = 1usize << size_of_code(sc).trailing_zeros();
    raw / align * align
}

/// The offset in its region of the end of slot `n - 1` of size class `sc`:
/// what the first `n` slots span.
#[inline(always)]
pub const fn slots_end(sc: u32, n: u32) -> usize {
    first_slot(sc) + n as usize * slot_size(sc)
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
    slots_end(sc, num_slots(sc))
}

/// Address of the region of (slab, size class), given the slab's address.
#[inline(always)]
pub const fn region_addr(slab_addr: usize, sc: u32) -> usize {
    slab_addr + ((sc as usize) << SC_SHIFT)
}

/// The *link* naming the slot at `addr`: its offset in its region plus 4,
/// so that 0 can mean "no slot" (the end of a list, an empty list). It
/// fits 32 bits: offsets are below 2^32, and a slot's offset plus 4 too
/// (slot numbers stop below [`MAX_SLOT_NUM_BITS`]); it is a multiple of 4.
#[inline(always)]
pub const fn link_of(addr: usize) -> u32 {
    // In 32-bit arithmetic: with the full geometry the offset is the
    // address's low half, and this is one `lea`.
    (addr as u32 & REGION_MASK_32).wrapping_add(4)
}

/// The offset bits of an address, as a 32-bit mask.
const REGION_MASK_32: u32 = ((1u64 << REGION_BITS) - 1) as u32;

/// The address of the slot named by `link` (non-zero) in the region at
/// `region`: one `lea`. With the full geometry any value a link can hold (a
/// corrupted one) names a place inside the region, or, for the values 1 to
/// 3, which no slot has, up to 3 bytes before it.
#[inline(always)]
pub const fn slot_of_link(region: usize, link: u32) -> usize {
    link_base(region) + link as usize
}

/// The address link 0 would name in the region at `region` (4 bytes below
/// it): a link plus this is its slot.
#[inline(always)]
pub const fn link_base(region: usize) -> usize {
    region - 4
}

/// The link of slot `slot` of size class `sc`.
#[inline(always)]
pub const fn link_of_slot(sc: u32, slot: u32) -> u32 {
    link_of(slots_end(sc, slot))
}

/// Address of slot `slot` of (slab, size class).
#[inline(always)]
pub const fn slot_addr(base: usize, slab: usize, sc: u32, slot: u32) -> usize {
    (base | region_offset(slab, sc)) + slots_end(sc, slot)
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
    slot_index(addr & ((1 << REGION_BITS) - 1), sc)
}

/// Start of the slot holding address `addr` of the reservation.
#[inline(always)]
pub const fn slot_start(addr: usize) -> usize {
    let sc = sc_of(addr);
    let offset = addr & ((1 << REGION_BITS) - 1);
    addr - offset + slots_end(sc, slot_index(offset, sc))
}

/// Whether `addr` is the start of a slot of size class `sc` (`addr` in a
/// region of `sc`).
#[inline(always)]
pub const fn is_slot_start(addr: usize, sc: u32) -> bool {
    let offset = addr & ((1 << REGION_BITS) - 1);
    slots_end(sc, slot_index(offset, sc)) == offset
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
            let size = slot_size(sc);
            for slab in 0..NUM_SLABS {
                let region = region_addr(slab_addr(FAKE_BASE, slab), sc);
                assert_eq!(region, FAKE_BASE + region_offset(slab, sc));
                for slot in [0, 1, n / 2, n - 2, n - 1] {
                    let a = slot_addr(FAKE_BASE, slab, sc, slot);
                    assert_eq!(base_of(a), FAKE_BASE);
                    assert_eq!(sc_of(a), sc, "sc {sc} slab {slab} slot {slot}");
                    assert_eq!(slab_of(a), slab);
                    assert_eq!(slot_of(a, sc), slot);
                    assert!(is_slot_start(a, sc));
                    assert_eq!(slot_start(a), a);
                    assert_eq!(a % size.min(16), 0, "slot not 16-aligned");
                    assert_eq!(slab_addr_of(a), slab_addr(FAKE_BASE, slab));
                    // The link names the slot, and is never the end marker.
                    let link = link_of(a);
                    assert_ne!(link, 0);
                    assert_eq!(link, link_of_slot(sc, slot));
                    assert_eq!(slot_of_link(region, link), a, "sc {sc} slot {slot}");
                    // The last byte of the slot maps to the same slot.
                    let last = a + size - 1;
                    assert_eq!(
                        (sc_of(last), slab_of(last), slot_of(last, sc)),
                        (sc, slab, slot)
                    );
                    assert_eq!(slot_start(last), a);
                    if size > 4 {
                        assert!(!is_slot_start(a + 4, sc));
                    }
                }
                // The whole region stays inside its (slab, sc) field.
                let end = slot_addr(FAKE_BASE, slab, sc, n - 1) + size;
                assert!(end <= FAKE_BASE + region_offset(slab, sc) + (1 << REGION_BITS));
            }
        }
        // With the full geometry, any link at all decodes to an address
        // inside its region, or up to 3 bytes before it.
        let region = region_addr(slab_addr(FAKE_BASE, NUM_SLABS - 1), MAX_SC);
        if REGION_BITS == 32 {
            for link in [1, 4, 0x1234_5677, 0x4000_0004, u32::MAX] {
                let a = slot_of_link(region, link);
                assert!(
                    a + 3 >= region && a < region + (1 << REGION_BITS),
                    "{link:#x}"
                );
                assert_eq!(a >= region, link >= 4);
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "exhaustive arithmetic, no unsafe: run natively")]
    fn slot_numbers_by_reciprocal_are_exact() {
        // Every slot boundary of every class (and a byte either side), over
        // the whole region for the classes with few slots and a sample of
        // the rest.
        for sc in MIN_SC..=MAX_SC {
            let size = slot_size(sc);
            let n = num_slots(sc) as usize;
            let step = (n / 4096).max(1);
            let mut slot = 0;
            while slot < n {
                let off = first_slot(sc) + slot * size;
                assert_eq!(slot_index(off, sc) as usize, slot, "class {sc}");
                assert_eq!(slot_index(off + size - 1, sc) as usize, slot, "class {sc}");
                if slot > 0 {
                    assert_eq!(slot_index(off - 1, sc) as usize, slot - 1, "class {sc}");
                }
                slot += step;
            }
            let top = (1usize << REGION_BITS) - 1;
            let want = (top - first_slot(sc)) / size;
            assert_eq!(slot_index(top, sc) as usize, want, "class {sc}");
            // Before the first slot: past the last slot, never a slot.
            if first_slot(sc) > 0 {
                assert!(slot_index(first_slot(sc) - 1, sc) >= num_slots(sc));
                assert!(!is_slot_start(
                    FAKE_BASE + first_slot(sc) - size.min(first_slot(sc)),
                    sc
                ));
            }
        }
    }

    #[test]
    fn the_size_classes() {
        let sizes: Vec<usize> = (MIN_SC..=MAX_SC).map(slot_size).collect();
        // Strictly increasing, multiples of 4, of 16 from 16 bytes on.
        for w in sizes.windows(2) {
            assert!(w[0] < w[1], "{w:?}");
        }
        assert!(sizes.iter().all(|&s| s % 4 == 0 && (s < 16 || s % 16 == 0)));
        // The table of docs/design.md ("Size classes").
        let want_start: &[usize] = &[
            16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640,
        ];
        let at16 = sizes.iter().position(|&s| s == 16).unwrap();
        assert_eq!(&sizes[at16..at16 + want_start.len()], want_start);
        assert_eq!(slot_size(4), 16);
        if !config::SECURE {
            assert_eq!((slot_size(2), slot_size(3)), (4, 8));
        }
        assert_eq!(slot_size(LARGE_SC), 64 << 10);
        assert_eq!(slot_size(LARGE_SC - 1), 56 << 10);
        // The full geometry's (not the small ones of Miri, TSan, valgrind, va39).
        if REGION_BITS == 32 {
            assert_eq!(MAX_SLOT_SIZE, 1 << 31);
            assert_eq!(MAX_SC, 74);
            assert_eq!(slot_size(RELEASE_SC), 128 << 20);
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "exhaustive arithmetic, no unsafe: run natively")]
    fn no_request_gets_more_than_a_quarter_more_than_it_asked() {
        // A request of `size` (rounded up to 16) gets a slot of at most 1.25
        // times that from 16 bytes to the largest slot, and the smallest
        // class that holds it.
        let mut sizes: Vec<usize> = (1..=5000).collect();
        for k in 12..31 {
            let p = 1usize << k;
            for q in 0..8 {
                let s = p + q * (p / 8);
                sizes.extend([s - 1, s, s + 1]);
            }
        }
        for &size in sizes.iter().filter(|&&s| s <= MAX_SLOT_SIZE) {
            let sc = size_class(size, 1);
            let slot = slot_size(sc);
            let rounded = size.next_multiple_of(16).max(1 << MIN_SC);
            assert!(slot >= size, "size {size}");
            if size > 1 << 20 {
                // Powers of two above 1 MiB.
                assert_eq!(slot, size.next_power_of_two(), "size {size}");
            } else if size > 8 || config::SECURE {
                assert!(4 * slot <= 5 * rounded, "size {size}: slot {slot}");
            } else {
                assert_eq!(slot, size.next_power_of_two().max(4));
            }
            assert!(
                sc == MIN_SC || slot_size(sc - 1) < size.max(16).min(slot),
                "size {size}"
            );
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "exhaustive arithmetic, no unsafe: run natively")]
    fn every_class_chosen_is_aligned_to_the_request() {
        // size_class(size, align) is the smallest class that holds `size`
        // bytes and whose every slot is `align`-aligned (its size a multiple
        // of align, or align at most 16 and the slot at least as large).
        let mut sizes: Vec<usize> = (1..=600).collect();
        for k in 2..32 {
            let p = 1usize << k;
            sizes.extend([
                p - 1,
                p,
                p + 1,
                p + p / 4 + 1,
                p + p / 2 + 1,
                p + 3 * p / 4 + 1,
            ]);
        }
        for &size in &sizes {
            for a in 0..28 {
                let align = 1usize << a;
                let sc = size_class(size, align);
                if sc > MAX_SC {
                    continue;
                }
                let slot = slot_size(sc);
                assert!(slot >= size);
                assert_eq!(slot % align.min(slot), 0, "size {size} align {align}");
                assert!(slot >= align || slot >= 16 && align <= 16, "{size} {align}");
                // The smallest such class.
                let smaller_fits = (MIN_SC..sc).any(|c| {
                    let s = slot_size(c);
                    s >= size && s % align.min(s) == 0 && (s >= align || s >= 16 && align <= 16)
                });
                assert!(!smaller_fits || align > 16, "size {size} align {align}");
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "exhaustive arithmetic, no unsafe: run natively")]
    fn a_larger_class_is_taken_only_with_the_alignment_asked_for() {
        for sc in MIN_SC..=MAX_SC {
            for up in sc..=MAX_SC {
                let keeps = keeps_alignment(sc, up);
                // Every alignment a request of `sc` may ask for divides the
                // slots of `up` exactly when `keeps`.
                let most = 1usize << slot_size(sc).trailing_zeros();
                assert_eq!(keeps, slot_size(up) % most == 0, "{sc} -> {up}");
                for a in 0..=most.ilog2() {
                    let align = 1usize << a;
                    if size_class(1, align) <= sc && keeps {
                        assert_eq!(slot_size(up) % align, 0);
                    }
                }
            }
        }
        // 48 B slots are 16-aligned: a 32 B class with 32-byte alignment
        // must not fail over into them; 64 B ones are fine.
        let c32 = size_class(32, 32);
        assert!(!keeps_alignment(c32, size_class(48, 16)));
        assert!(keeps_alignment(c32, size_class(64, 16)));
    }

    #[test]
    fn size_class_of_sizes_and_alignments() {
        let cases: &[(usize, usize, usize)] = &[
            (1, 1, 4),
            (4, 4, 4),
            (5, 1, 8),
            (8, 8, 8),
            (9, 1, 16),
            (16, 16, 16),
            (17, 1, 32),
            (1, 16, 16),
            (40, 32, 64),
            (65, 1, 80),
            (129, 1, 160),
            (130, 64, 192),
            (200, 128, 256),
            (2049, 1, 2560),
            (1, 4096, 4096),
            (4097, 4096, 8192),
            (4097, 1, 5120),
            (100, 1 << 20, 1 << 20),
            ((1 << 20) + 1, 1, 2 << 20),
            ((3 << 20) + 1, 1, 4 << 20),
        ];
        for &(size, align, slot) in cases {
            // (The secure mode's slots start at 16 bytes.)
            assert_eq!(
                slot_size(size_class(size, align)),
                slot.max(1 << MIN_SC),
                "size {size} align {align}"
            );
        }
        // Beyond the largest slot, and size 0, the class still grows and
        // stays below 240 (the private heads).
        assert!(size_class(MAX_SLOT_SIZE + 1, 1) > MAX_SC);
        assert!(size_class(1, MAX_SLOT_SIZE * 2) > MAX_SC);
        assert_eq!(size_class(0, 1), 107);
        assert_eq!(size_class(usize::MAX / 2, 1), 106);
    }

    #[test]
    #[cfg(not(any(miri, smalloc_tsan)))]
    fn slot_counts() {
        // The full geometry's counts (not the small ones of valgrind, va39).
        if REGION_BITS != 32 {
            return;
        }
        // The region from the first slot on, in whole slots; the 4-byte
        // slots stop one short (the last one's link would not fit 32 bits).
        let whole = |sc: u32| ((1usize << 32) - first_slot(sc)) / slot_size(sc);
        let smallest = whole(MIN_SC) - (MIN_SC == 2) as usize;
        assert_eq!(num_slots(MIN_SC) as usize, smallest);
        for sc in 4..=MAX_SC {
            assert_eq!(num_slots(sc) as usize, whole(sc), "class {sc}");
        }
        assert_eq!(num_slots(4) as usize, (1 << 28) - first_slot(4) / 16);
        assert_eq!(num_slots(MAX_SC), 2);
        assert_eq!(TOTAL_SIZE, 1 << 43);
    }

    #[test]
    fn the_first_slots_differ_in_set_and_tag_bits_and_keep_alignment() {
        let mut seen = std::collections::BTreeSet::new();
        for sc in MIN_SC..=MAX_SC {
            let first = first_slot(sc);
            let align = 1usize << slot_size(sc).trailing_zeros();
            assert_eq!(first % align, 0, "class {sc}");
            assert!(first < 64 << 10);
            assert!(first <= (1usize << REGION_BITS) / 4);
            assert!(num_slots(sc) >= 2);
            // The classes up to 4 KiB (those a program mixes most) each
            // have their own L1 set and tag bits.
            if slot_size(sc) <= 4096 && REGION_BITS == 32 {
                assert!(seen.insert(first), "class {sc}: {first:#x}");
            }
        }
    }

    #[test]
    #[cfg(miri)]
    fn slot_counts() {
        // The small geometry Miri runs with (see layout.rs).
        assert_eq!(num_slots(2) as usize, ((1 << 18) - first_slot(2)) / 4);
        assert_eq!(num_slots(MAX_SC), 2);
        assert_eq!(TOTAL_SIZE, 1 << 29);
    }

    #[test]
    fn is_large_agrees_with_the_size_class_of_every_slot() {
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
