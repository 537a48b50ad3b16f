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
//! * The region of size class 0 in each slab holds no slots (no size class
//!   below [`MIN_SC`] exists); it holds the slab's metadata instead: first
//!   the *private block* (a private list head and a fresh run per size class,
//!   touched only by the thread that owns the slab), then, a page further,
//!   one *shared line* per size class (its flh and its never-used tail, on
//!   its own 64-byte cache line).
//! * Free lists link slots by *link*: a slot's offset in its region in
//!   4-byte units, plus one ([`link_of`]); 0 ends a list.
//!
//! Under Miri and in the `valgrind` build the geometry shrinks (a terabyte
//! reservation is not possible there), and under ThreadSanitizer the regions
//! do (see [`REGION_BITS`]), but every formula stays the same.

/// Number of address bits of one (slab, size class) region.
#[cfg(not(any(miri, smalloc_tsan, feature = "valgrind")))]
pub const REGION_BITS: u32 = 34;
/// Number of address bits of one (slab, size class) region in the
/// `valgrind` build: memcheck keeps state for every 64 KiB of a mapping, so
/// an 8 TiB reservation costs it gigabytes; 32 GiB costs it little.
#[cfg(all(feature = "valgrind", not(miri)))]
pub const REGION_BITS: u32 = 26;
/// Number of address bits of one (slab, size class) region.
#[cfg(miri)]
pub const REGION_BITS: u32 = 18;
/// Number of address bits of one (slab, size class) region under
/// ThreadSanitizer (`--cfg smalloc_tsan`, set by `devutils/verify.sh`):
/// TSan serves application mappings only from a few fixed ranges of a few
/// TiB, which an 8 TiB reservation aligned to 8 TiB does not fit; 2 TiB
/// does. Only the slot counts change (the size classes stay).
#[cfg(all(smalloc_tsan, not(miri), not(feature = "valgrind")))]
pub const REGION_BITS: u32 = 32;

/// Largest size class: slots of `2^MAX_SC` bytes (2 GiB).
#[cfg(not(any(miri, feature = "valgrind")))]
pub const MAX_SC: u32 = 31;
/// Largest size class in the `valgrind` build (8 MiB slots, eight to a
/// region, as the default build's 2 GiB slots are).
#[cfg(all(feature = "valgrind", not(miri)))]
pub const MAX_SC: u32 = 23;
/// Largest size class under Miri.
#[cfg(miri)]
pub const MAX_SC: u32 = 15;

/// Smallest size class: 4-byte slots, just large enough for a free-list link
/// (16 bytes in the secure mode: a link and its check).
pub const MIN_SC: u32 = if cfg!(feature = "secure") { 4 } else { 2 };

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
pub const THREAD_SLABS: usize = NUM_SLABS - cfg!(feature = "profile") as usize;
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

/// Slot numbers of any size class fit in this many bits, so that a slot
/// number, the "used" flag and the end-of-list value all fit in a `u32` link.
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

/// Bytes of never-used slots between two looks for freed slots elsewhere
/// (64 KiB; every never-used slot, for slots that large): before touching
/// a new step of its region, a thread looks for freed slots on other
/// slabs, and an owner claims a whole step into its fresh run. Measured:
/// docs/decisions.md ("New-memory step").
pub const NEW_MEMORY_STEP: usize = 1 << 16;

/// Offset, from its slab's address, of the slab's private block: what
/// only the slab's owner touches (see [`private_list`](crate::private_list)).
/// It is the start of the region of size class 1, which holds no slots, so
/// that a slot's offset from the private block, shifted by [`SC_SHIFT`], is
/// its size class minus one: the hot paths index the block's tables with
/// that. An owner's thread-local words hold the block's address.
pub const PRIVATE_OFFSET: usize = 1 << SC_SHIFT;
/// Private list heads per private block: one per value that
/// [`private_index_of`] can give, so the hot path of allocation indexes the
/// heads without first testing that the request is small. Only the heads of
/// the small size classes are ever set.
pub const PRIVATE_HEADS: usize = usize::BITS as usize;
/// Offset of the private list heads from the private block's address. Not
/// a round number: the heads are touched on every allocation and free, and
/// at offset 0 they would share an L1 cache set and linear-address tag with
/// the first slots of every region (all 16 GiB-aligned), which x86 cores
/// with a linear-address way predictor (AMD's utags) cannot keep in L1
/// together: measured 4x slower loops over such a slot (docs/decisions.md,
/// "Where the private tables sit"). In the hot paths it is a displacement.
pub const HEADS_OFFSET: usize = 0x6_b3c0 % (1 << REGION_BITS);
/// Offset of the region table (one `u64` per size class: the address that
/// link 0 would name in the slab's region of that class, 4 bytes below the
/// region, so that a slot is one `lea` from its link) from the private
/// block.
pub const REGIONS_OFFSET: usize = HEADS_OFFSET + 4 * PRIVATE_HEADS;
/// Offset of the fresh runs (one `u64` per size class) from the private
/// block.
pub const FRESH_OFFSET: usize = REGIONS_OFFSET + 8 * NUM_SCS;
/// Offset of the private list heads of the large size classes (one `u32`
/// per size class, apart from the heads the hot path indexes: large slots
/// are handed out only by the cold path) from the private block.
pub const LARGE_HEADS_OFFSET: usize = FRESH_OFFSET + 8 * NUM_SCS;
/// Offset of the lengths of those lists (one `u32` per size class).
pub const LARGE_COUNTS_OFFSET: usize = LARGE_HEADS_OFFSET + 4 * NUM_SCS;
/// Bytes of a private block from its first table on.
pub const PRIVATE_TABLES_SIZE: usize = LARGE_COUNTS_OFFSET + 4 * NUM_SCS - HEADS_OFFSET;
/// Offset of the owner's event counts (the `counters` feature; two `u64`
/// per size class: allocations, frees) from the private block, on the
/// tables' page.
pub const OWNER_COUNTS_OFFSET: usize = HEADS_OFFSET + PRIVATE_TABLES_SIZE;
/// Offset, from its slab's address, of the slab's shared lines: one cache
/// line per size class holding its flh and its never-used tail, in the
/// region of size class 0 (which holds no slots either), away from the
/// private block, so remote frees never touch the owner's lines. Not a
/// round number, for the reason given at [`HEADS_OFFSET`].
pub const SHARED_OFFSET: usize = 0x9_2d40 % (1 << REGION_BITS);
/// Distance between two shared lines of one slab: one cache line each.
pub const SHARED_STRIDE_SHIFT: u32 = 6;
/// Offset of the never-used tail word within a shared line.
pub const TAIL_OFFSET: usize = 8;
/// Offset within a shared line of the counts (the `counters` feature; two
/// `u64`: allocations, frees) of the threads that do not own the slab, on
/// the line their compare-and-swap of the flh takes anyway.
pub const REMOTE_COUNTS_OFFSET: usize = 16;
/// Offset within a shared line of the region's committed bytes (a `u64`):
/// how much of the region, from its start, is usable memory (see
/// [`commit`](crate::commit)). Read with the tail, on the same line.
pub const COMMITTED_OFFSET: usize = 32;
/// Offset, from its slab's address, of the slab's cold-path event counts
/// (the `counters` feature; one `u64` per event), after its shared lines.
pub const EVENTS_OFFSET: usize = SHARED_OFFSET + (NUM_SCS << SHARED_STRIDE_SHIFT);

const _: () = assert!(
    MAX_SC < REGION_BITS,
    "a region must hold at least two slots"
);
const _: () = assert!(MAX_SC < NUM_SCS as u32);
const _: () = assert!(EVENTS_OFFSET + 8 * 64 <= 1 << REGION_BITS);
const _: () = assert!(OWNER_COUNTS_OFFSET + 16 * NUM_SCS <= 1 << REGION_BITS && MIN_SC > 1);
const _: () = assert!(REMOTE_COUNTS_OFFSET + 16 <= COMMITTED_OFFSET);
const _: () = assert!(COMMITTED_OFFSET + 8 <= 1 << SHARED_STRIDE_SHIFT);
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

/// Address of the flh of (slab, size class), given the slab's address.
#[inline(always)]
pub const fn flh_addr(slab_addr: usize, sc: u32) -> usize {
    slab_addr + SHARED_OFFSET + ((sc as usize) << SHARED_STRIDE_SHIFT)
}

/// Address of the never-used tail word of (slab, size class), given the
/// slab's address.
#[inline(always)]
pub const fn tail_addr(slab_addr: usize, sc: u32) -> usize {
    flh_addr(slab_addr, sc) + TAIL_OFFSET
}

/// Address of the committed-bytes word of (slab, size class), given the
/// slab's address.
#[inline(always)]
pub const fn committed_addr(slab_addr: usize, sc: u32) -> usize {
    flh_addr(slab_addr, sc) + COMMITTED_OFFSET
}

/// Bytes of the region of size class `sc` that its slots span (the whole
/// region but for size classes 2 and 3, whose slot numbers run out first).
#[inline(always)]
pub const fn slots_span(sc: u32) -> usize {
    (num_slots(sc) as usize) << sc
}

/// The slab's metadata, as offsets from the slab's address, that must be
/// memory before any thread touches the slab: its shared lines and event
/// counts (size class 0's region), and its private block's tables and
/// owner counts (size class 1's region). Nothing else of those two regions
/// is ever touched.
pub const METADATA: [(usize, usize); 2] = [
    (SHARED_OFFSET, EVENTS_OFFSET + 8 * 64),
    (
        PRIVATE_OFFSET + HEADS_OFFSET,
        PRIVATE_OFFSET + OWNER_COUNTS_OFFSET + 16 * NUM_SCS,
    ),
];

/// Address of the private block of the slab at `slab_addr`.
#[inline(always)]
pub const fn private_block(slab_addr: usize) -> usize {
    slab_addr + PRIVATE_OFFSET
}

/// The index of size class `sc` in the tables of a private block: `sc - 1`,
/// which is what a slot's offset from the block, shifted by [`SC_SHIFT`],
/// gives.
#[inline(always)]
pub const fn private_index(sc: u32) -> usize {
    (sc - 1) as usize
}

/// The private index of the size class of a request of `size` bytes aligned
/// to `align` (a power of two): [`private_index`] of its [`size_class`]
/// when `size` is not 0, and below [`PRIVATE_HEADS`] always (63 for size 0).
#[inline(always)]
pub const fn private_index_of(size: usize, align: usize) -> usize {
    debug_assert!(align.is_power_of_two());
    // The bit length of the OR is the size class; its floor log2 is one less.
    (size.wrapping_sub(1) | (align - 1) | ((1 << MIN_SC) - 1)).ilog2() as usize
}

/// Address of the private list head of the size class of private index
/// `index` in the private block at `block`.
#[inline(always)]
pub const fn private_head_addr(block: usize, index: usize) -> usize {
    block + HEADS_OFFSET + 4 * index
}

/// Address of the region table entry of private index `index` in the
/// private block at `block`.
#[inline(always)]
pub const fn region_entry_addr(block: usize, index: usize) -> usize {
    block + REGIONS_OFFSET + 8 * index
}

/// Address of the private list head of large size class `sc` in the
/// private block at `block`.
#[inline(always)]
pub const fn large_head_addr(block: usize, sc: u32) -> usize {
    block + LARGE_HEADS_OFFSET + 4 * sc as usize
}

/// Address of the length of the private list of large size class `sc` in
/// the private block at `block`.
#[inline(always)]
pub const fn large_count_addr(block: usize, sc: u32) -> usize {
    block + LARGE_COUNTS_OFFSET + 4 * sc as usize
}

/// Address of the fresh run of private index `index` in the private block
/// at `block`.
#[inline(always)]
pub const fn fresh_addr(block: usize, index: usize) -> usize {
    block + FRESH_OFFSET + 8 * index
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
