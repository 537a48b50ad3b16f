//! Every cell the allocator keeps, typed: a slab's *private tables* (only
//! its owner touches them), its *shared lines* (one per size class, any
//! thread), its event counts, and a free slot's *link cell*.
//!
//! The first two regions of each slab (size classes 0 and 1) hold no slots
//! ([`layout`]); the slab's metadata lives there, at fixed offsets:
//!
//! ```text
//! slab address                       private block = slab + PRIVATE_OFFSET
//! |                                  |
//! +-- region of size class 0 --------+-- region of size class 1 ------------
//! |  ... SHARED_OFFSET: 32 shared    |  ... TABLES_OFFSET: PrivateTables
//! |  lines (64 B each), then the     |  (heads, region table, fresh runs,
//! |  event counts                    |  large lists, owner counts)
//! ```
//!
//! The private block sits at the start of size class 1's region, so a
//! slot's offset from it, shifted by [`layout::SC_SHIFT`], is its size class
//! minus one: the *private index* the hot paths index the tables with. The
//! offsets are not round numbers: the tables are touched on every
//! allocation and free, and at a round offset they would share an L1 set
//! and linear-address tag with the first slots of every region (all 16
//! GiB-aligned), which x86 cores with a linear-address way predictor (AMD's
//! utags) cannot keep in L1 together: measured 4x slower loops over such a
//! slot (docs/decisions.md, "Where the private tables sit"). In the hot
//! paths every offset is a displacement.

use core::sync::atomic::{AtomicU32, AtomicU64};

use crate::layout::{self, NUM_SCS, REGION_BITS, SC_SHIFT};
use crate::sys;

/// Offset, from its slab's address, of the slab's private block: the start
/// of the region of size class 1. An owner's thread-local words hold it.
pub const PRIVATE_OFFSET: usize = 1 << SC_SHIFT;

/// Private list heads per private block: one per value that
/// a request's size class can have (107 for size 0, whose mask is
/// `usize::MAX`), so the hot path of allocation indexes the
/// heads without first testing that the request is small. Only the heads of
/// the small size classes are ever set.
pub const PRIVATE_HEADS: usize = 108;

/// Offset of the [`PrivateTables`] from the private block (see the module
/// documentation for why not a round number).
pub const TABLES_OFFSET: usize = 0x6_b3c0 % (1 << REGION_BITS);

/// Offset, from its slab's address, of the slab's shared lines, in the
/// region of size class 0, away from the private block, so remote frees
/// never touch the owner's lines; not round, as [`TABLES_OFFSET`].
pub const SHARED_OFFSET: usize = 0x9_2d40 % (1 << REGION_BITS);

/// Event counts a slab has room for (the `counters` feature's).
pub const MAX_EVENTS: usize = 64;

/// Offset, from its slab's address, of the slab's event counts, after its
/// shared lines.
pub const EVENTS_OFFSET: usize = SHARED_OFFSET + NUM_SCS * size_of::<SharedLine>();

/// The slab's metadata as offsets from its address, `[start, end)`: what
/// must be memory before any thread touches the slab. Nothing else of its
/// two slot-less regions is ever touched.
pub const METADATA: [(usize, usize); 2] = [
    (SHARED_OFFSET, EVENTS_OFFSET + 8 * MAX_EVENTS),
    (
        PRIVATE_OFFSET + TABLES_OFFSET,
        PRIVATE_OFFSET + TABLES_OFFSET + size_of::<PrivateTables>(),
    ),
];

/// The tables of a slab's private block. Only the slab's owner reads and
/// writes them (plain loads and stores: see `private_list`); the next owner
/// finds them as the last one left them.
#[repr(C, align(64))]
pub struct PrivateTables {
    /// The private list heads (a link; 0: empty), by private index.
    heads: [AtomicU32; PRIVATE_HEADS],
    /// The region table, by private index: the [`layout::link_base`] of
    /// the slab's region of that size class, so that a slot is one `lea`
    /// from its link. Filled when a thread comes to own the slab
    /// ([`fill_regions`](Self::fill_regions)).
    regions: [AtomicU64; NUM_SCS],
    /// The fresh runs, by private index: never-used slots the owner claimed
    /// and has not handed out, `next | end << 32`.
    fresh: [AtomicU64; NUM_SCS],
    /// The heads of the private lists of large slots, by size class (apart
    /// from `heads`: large slots are handed out by the cold path only).
    large_heads: [AtomicU32; NUM_SCS],
    /// The lengths of those lists.
    large_counts: [AtomicU32; NUM_SCS],
    /// The held cells, by size class: a slot of another slab the owner
    /// freed and keeps for its next allocation of the class, or, marked,
    /// the last one it handed out (`held`); 0: none.
    held: [AtomicU64; NUM_SCS],
    /// The owner's allocations and frees by size class (the `counters`
    /// feature), next to the lists they count.
    owner_counts: [[AtomicU64; 2]; NUM_SCS],
}

/// `&array[i]` without a bounds check (a panic must not be reachable from
/// the allocator); `i` is in range at every caller.
#[inline(always)]
fn at<T, const N: usize>(array: &[T; N], i: usize) -> &T {
    debug_assert!(i < N, "index {i} of {N}");
    // SAFETY: `i < N` at every caller (asserted in debug builds).
    unsafe { array.get_unchecked(i) }
}

impl PrivateTables {
    /// The private list head of private index `index`.
    #[inline(always)]
    pub fn head(&self, index: usize) -> &AtomicU32 {
        at(&self.heads, index)
    }

    /// The region table's entry of private index `index`.
    #[inline(always)]
    pub fn region(&self, index: usize) -> &AtomicU64 {
        at(&self.regions, index)
    }

    /// The fresh run of size class `sc`.
    #[inline(always)]
    pub fn fresh(&self, sc: u32) -> &AtomicU64 {
        at(&self.fresh, private_index(sc))
    }

    /// The head of the private list of large size class `sc`.
    #[inline(always)]
    pub fn large_head(&self, sc: u32) -> &AtomicU32 {
        at(&self.large_heads, sc as usize)
    }

    /// The length of the private list of large size class `sc`.
    #[inline(always)]
    pub fn large_count(&self, sc: u32) -> &AtomicU32 {
        at(&self.large_counts, sc as usize)
    }

    /// The held slot of size class `sc` (see [`held`](crate::held)).
    #[inline(always)]
    pub fn held(&self, sc: u32) -> &AtomicU64 {
        at(&self.held, sc as usize)
    }
}

/// One shared line: the cells of a (slab, size class) that any thread
/// touches, on a cache line of their own.
#[repr(C, align(64))]
pub struct SharedLine {
    /// The shared list's head: a link and a push counter (`free_list`).
    pub flh: AtomicU64,
    /// The never-used tail: the number of the first slot never handed out
    /// (or claimed into an owner's fresh run).
    pub tail: AtomicU32,
    /// Spans of the region given back by sweeps and not yet taken again
    /// (`spans`): at least as many as their bits say.
    pub spans: AtomicU32,
    /// Allocations and frees by threads that do not own the slab (the
    /// `counters` feature), on the line their compare-and-swap of the flh
    /// takes anyway.
    pub remote_counts: [AtomicU64; 2],
    /// Bytes of the region, from its start, that are committed (`commit`).
    pub committed: AtomicU64,
    /// The high-water tail: slots below it were handed out or claimed
    /// since the region began or was last reset (`pressure`).
    pub high: AtomicU32,
    _pad: u32,
    _rest: [u64; 2],
}

const _: () = assert!(size_of::<SharedLine>() == 64);
const _: () = assert!(EVENTS_OFFSET + 8 * MAX_EVENTS <= 1 << REGION_BITS);
const _: () = assert!(METADATA[1].1 <= 2 << REGION_BITS && layout::MIN_SC > 1);

/// Address of the private block of the slab at `slab_addr`.
#[inline(always)]
pub const fn private_block(slab_addr: usize) -> usize {
    slab_addr + PRIVATE_OFFSET
}

/// Address of the tables of the private block at `block`.
#[inline(always)]
pub const fn tables_addr(block: usize) -> usize {
    block + TABLES_OFFSET
}

/// The tables of the private block at `block` (a slab's, or the empty one
/// of [`empty_block`]).
#[inline(always)]
pub fn tables(block: usize) -> &'static PrivateTables {
    // SAFETY: a private block's tables lie in its slab's size-class-1
    // region, which holds no slots and is memory from the moment the layout
    // exists (or, for the empty block, in EMPTY_TABLES); aligned; every
    // field is atomic.
    unsafe { &*sys::ptr_at::<PrivateTables>(tables_addr(block)) }
}

/// Address of the shared line of (slab, size class), given the slab's
/// address.
#[inline(always)]
pub const fn shared_addr(slab_addr: usize, sc: u32) -> usize {
    slab_addr + SHARED_OFFSET + (sc as usize) * size_of::<SharedLine>()
}

/// The shared line of (slab, size class), given the slab's address.
#[inline(always)]
pub fn shared(slab_addr: usize, sc: u32) -> &'static SharedLine {
    // SAFETY: in the slab's size-class-0 region, which holds no slots and
    // is memory from the moment the layout exists; aligned; every field
    // read is atomic.
    unsafe { &*sys::ptr_at::<SharedLine>(shared_addr(slab_addr, sc)) }
}

/// The owner's count of allocations (`which` 0) or frees (1) of size class
/// `sc` in the private block at `block` (its tables' `owner_counts`).
/// Computed from the block's address, not through [`tables`]: on the hot
/// paths that keeps it a displacement off the block, as the other cells.
#[allow(dead_code)] // only the counters feature counts
#[inline(always)]
pub fn owner_count(block: usize, sc: usize, which: usize) -> &'static AtomicU64 {
    debug_assert!(sc < NUM_SCS && which < 2);
    let addr = tables_addr(block) + core::mem::offset_of!(PrivateTables, owner_counts);
    // SAFETY: inside the tables of a private block (`sc` and `which` in
    // range), 8-byte aligned, atomic; see `tables`.
    unsafe { &*sys::ptr_at::<AtomicU64>(addr + 16 * sc + 8 * which) }
}

/// The event counts of the slab at `slab_addr`.
#[allow(dead_code)] // only the counters feature counts
#[inline(always)]
pub fn events(slab_addr: usize) -> &'static [AtomicU64; MAX_EVENTS] {
    // SAFETY: after the shared lines, in the same region (asserted above);
    // aligned; atomic.
    unsafe { &*sys::ptr_at::<[AtomicU64; MAX_EVENTS]>(slab_addr + EVENTS_OFFSET) }
}

/// The link cell of the slot at `addr`: its first four bytes, which hold
/// the link of the next slot while it is on a free list.
#[inline(always)]
pub fn link_cell(addr: usize) -> &'static AtomicU32 {
    // SAFETY: `addr` lies inside a region of the layout (links decode only
    // to addresses inside their region), is 4-byte aligned (slots are at
    // least 4 bytes and naturally aligned) and is memory (a slot handed out
    // at least once is committed, and commits never shrink). Every access to
    // a link is atomic.
    unsafe { &*sys::ptr_at::<AtomicU32>(addr) }
}

/// The tables of a private block that is always empty. A thread that owns
/// no slab has its alloc word point at [`empty_block`], so the hot path of
/// allocation finds an empty list without first testing whether the thread
/// owns a slab. Never written.
pub static EMPTY_TABLES: PrivateTables = PrivateTables {
    heads: [const { AtomicU32::new(0) }; PRIVATE_HEADS],
    regions: [const { AtomicU64::new(0) }; NUM_SCS],
    fresh: [const { AtomicU64::new(0) }; NUM_SCS],
    large_heads: [const { AtomicU32::new(0) }; NUM_SCS],
    large_counts: [const { AtomicU32::new(0) }; NUM_SCS],
    held: [const { AtomicU64::new(0) }; NUM_SCS],
    owner_counts: [const { [const { AtomicU64::new(0) }; 2] }; NUM_SCS],
};

/// The private block whose tables are [`EMPTY_TABLES`].
pub fn empty_block() -> usize {
    sys::expose(core::ptr::from_ref(&EMPTY_TABLES).cast_mut().cast::<u8>()) - TABLES_OFFSET
}

/// The index of size class `sc` in the tables of a private block: `sc - 1`,
/// which is what a slot's offset from the block, shifted by
/// [`SC_SHIFT`], gives.
#[inline(always)]
pub const fn private_index(sc: u32) -> usize {
    (sc - 1) as usize
}

/// The private index of the size class of a request whose mask
/// ([`layout::request_mask`]) is `mask`, from a table, when the mask is
/// below [`CLASS_TABLE_BYTES`]; `None` for larger requests (see
/// [`medium_index`]). With `ALIGN_16` (the caller promises
/// an alignment of at least 16, as every C entry point has) the table is
/// read by 16-byte steps, one shift of a mask whose low 4 bits are set;
/// otherwise by 4-byte steps (4- and 8-byte slots). Why a table:
/// docs/decisions.md ("The size class of a request").
#[inline(always)]
pub const fn table_index<const ALIGN_16: bool>(mask: usize) -> Option<usize> {
    if mask >= CLASS_TABLE_BYTES {
        return None;
    }
    Some(if ALIGN_16 {
        debug_assert!(mask & 15 == 15);
        BY_16_BYTES[mask >> 4]
    } else {
        BY_4_BYTES[mask >> 2]
    } as usize)
}

/// The private index of the size class of a request whose mask is at
/// least [`CLASS_TABLE_BYTES`], from a table by 256-byte steps (every class
/// from 1 KiB on is a multiple of 256) while it may be small; `None` from
/// [`MEDIUM_TABLE_BYTES`] on, where every class is large and the hot path
/// has nothing to offer.
#[inline(always)]
pub const fn medium_index(mask: usize) -> Option<usize> {
    if mask >= MEDIUM_TABLE_BYTES {
        return None;
    }
    Some(BY_256_BYTES[mask >> 8] as usize)
}

/// [`layout::size_class`] from the hot path's tables below 64 KiB (a load
/// where the computation takes a dozen instructions), for the cold paths;
/// `ALIGN_16` as for [`table_index`].
#[inline(always)]
pub fn size_class_by_table<const ALIGN_16: bool>(size: usize, align: usize) -> u32 {
    debug_assert!(align.is_power_of_two() && (!ALIGN_16 || align >= 16));
    let mask = layout::request_mask(size, align);
    match table_index::<ALIGN_16>(mask).or(medium_index(mask)) {
        Some(index) => index as u32 + 1,
        None => layout::size_class(size, align),
    }
}

/// Masks from this many bytes on are of large size classes (or beyond).
pub const MEDIUM_TABLE_BYTES: usize = 64 << 10;

/// The private index of the masks `256 * i` to `256 * i + 255` (those
/// below [`CLASS_TABLE_BYTES`] unused).
static BY_256_BYTES: [u8; MEDIUM_TABLE_BYTES / 256] = {
    let mut t = [0; MEDIUM_TABLE_BYTES / 256];
    let mut i = CLASS_TABLE_BYTES / 256;
    while i < t.len() {
        t[i] = private_index(layout::class_of_mask(256 * i + 255)) as u8;
        i += 1;
    }
    t
};

/// Masks below this many bytes find their private index in a table.
pub const CLASS_TABLE_BYTES: usize = 1024;

/// The private index of the masks `4 * i` to `4 * i + 3`.
static BY_4_BYTES: [u8; CLASS_TABLE_BYTES / 4] = {
    let mut t = [0; CLASS_TABLE_BYTES / 4];
    let mut i = 0;
    while i < t.len() {
        // (Masks have at least the smallest slot's bits set.)
        let mask = 4 * i + 3;
        let mask = mask | ((1 << layout::MIN_SC) - 1);
        t[i] = private_index(layout::class_of_mask(mask)) as u8;
        i += 1;
    }
    t
};

/// The private index of the masks `16 * i` to `16 * i + 15`.
static BY_16_BYTES: [u8; CLASS_TABLE_BYTES / 16] = {
    let mut t = [0; CLASS_TABLE_BYTES / 16];
    let mut i = 0;
    while i < t.len() {
        t[i] = BY_4_BYTES[4 * i + 3];
        i += 1;
    }
    t
};

impl PrivateTables {
    /// Fills the region table of the slab at `slab_addr`, whose tables
    /// these are, for a thread that just came to own it: for each small size
    /// class, the link base of the slab's region of that class. Filled
    /// once; a later owner finds it done.
    pub fn fill_regions(&self, slab_addr: usize) {
        use core::sync::atomic::Ordering::Relaxed;
        let last = self.region(private_index(layout::LARGE_SC - 1));
        // Relaxed: only owners read the table, after their claim's Acquire;
        // the last entry is written last.
        if last.load(Relaxed) != 0 {
            return;
        }
        for sc in layout::MIN_SC..layout::LARGE_SC {
            let link_base = layout::link_base(layout::region_addr(slab_addr, sc)) as u64;
            self.region(private_index(sc)).store(link_base, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use core::mem::offset_of;

    use super::*;
    use crate::layout::{MAX_SC, MIN_SC, NUM_SLABS, SLAB_SHIFT, TOTAL_BITS};

    #[test]
    #[cfg_attr(miri, ignore = "exhaustive arithmetic, no unsafe: run natively")]
    fn the_tables_agree_with_the_computed_size_class() {
        // Every request of every alignment up to 64 KiB: the hot path's
        // tables give the private index of `layout::size_class`.
        for size in 1..=(64 << 10) + 1 {
            for a in 0..17 {
                let align = 1usize << a;
                let mask = layout::request_mask(size, align);
                let want = private_index(layout::size_class(size, align));
                let got = match table_index::<false>(mask) {
                    Some(i) => Some(i),
                    None => medium_index(mask),
                };
                if mask < CLASS_TABLE_BYTES && align >= 16 {
                    assert_eq!(table_index::<true>(mask), Some(want), "{size} {align}");
                }
                // The cold paths read the same tables.
                let sc = layout::size_class(size, align);
                assert_eq!(
                    size_class_by_table::<false>(size, align),
                    sc,
                    "{size} {align}"
                );
                if align >= 16 {
                    assert_eq!(
                        size_class_by_table::<true>(size, align),
                        sc,
                        "{size} {align}"
                    );
                }
                if mask < MEDIUM_TABLE_BYTES {
                    assert_eq!(got, Some(want), "size {size} align {align}");
                } else {
                    // Beyond the tables every class is large.
                    assert!(got.is_none() && want + 1 >= layout::LARGE_SC as usize);
                }
            }
        }
        // Size 0 (a mask of all ones) is beyond both.
        assert_eq!(table_index::<true>(usize::MAX), None);
        assert_eq!(medium_index(usize::MAX), None);
    }

    #[test]
    fn metadata_lives_where_no_slot_is() {
        // A base with the required alignment, for pure arithmetic.
        let base = 5 << TOTAL_BITS;
        let lowest_slot = layout::region_offset(0, MIN_SC);
        for slab in 0..NUM_SLABS {
            let addr = layout::slab_addr(base, slab);
            let mut lines = std::collections::HashSet::new();
            let block = private_block(addr);
            let t = tables_addr(block);
            for sc in MIN_SC..=MAX_SC {
                let line = shared_addr(addr, sc);
                let i = private_index(sc);
                let cells = [
                    (line + offset_of!(SharedLine, flh), 8),
                    (line + offset_of!(SharedLine, tail), 4),
                    (line + offset_of!(SharedLine, committed), 8),
                    (t + offset_of!(PrivateTables, heads) + 4 * i, 4),
                    (t + offset_of!(PrivateTables, regions) + 8 * i, 8),
                    (t + offset_of!(PrivateTables, fresh) + 8 * i, 8),
                ];
                for (cell, size) in cells {
                    let off = cell - base;
                    // In the slot-less regions of its slab, aligned.
                    assert_eq!(off >> SLAB_SHIFT, slab);
                    assert!((off & ((1 << SLAB_SHIFT) - 1)) + size <= lowest_slot);
                    assert_eq!(cell % size, 0);
                }
                // One cache line per shared list, and no private cell on a
                // page of the shared lines.
                assert!(lines.insert(line / 64));
                assert_eq!(line % 64, 0);
                assert!(t / 4096 != line / 4096);
                // A slot's offset from the private block, in regions, is
                // its size class minus one: the hot path of free relies on
                // it.
                let slot = layout::slot_addr(base, slab, sc, layout::num_slots(sc) - 1);
                assert_eq!((slot - block) >> SC_SHIFT, private_index(sc));
            }
            for (start, end) in METADATA {
                assert!(start < end && end <= lowest_slot);
            }
        }
    }
}
