//! Handing out and taking back slots: the hot paths, and the cells of a
//! slab's metadata that every path uses.
//!
//! A thread that owns its slab allocates small slots (below 64 KiB) from,
//! and frees the small slots of its slab to, the slab's private lists, with
//! plain loads and stores. Everything else — a private list running dry, a
//! thread that owns no slab, large slots, frees of other slabs' slots —
//! goes to the cold paths ([`cold_path`](crate::cold_path)).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::free_list::{LinkCell, LinkStore};
use crate::layout::{self, LARGE_SC, MAX_SC};
use crate::{cold_path, counters, home_slab, private_list, reservation, sys};

/// The link cells of the free slots of one region: each slot's first four
/// bytes.
pub(crate) struct RegionLinks {
    /// Address of the region's first slot.
    pub region: usize,
}

impl LinkStore for RegionLinks {
    /// For a private list or a chain the caller took: no stale reads, so in
    /// the secure mode a link that fails its check stops the program here.
    #[inline(always)]
    unsafe fn load_link(&self, link: u32) -> u32 {
        follow_link(layout::slot_of_link(self.region, link))
    }
}

/// The link cells of the free slots of one region, as pops of its shared
/// list read them: in the secure mode a link that fails its check is
/// returned as [`BAD_LINK`](crate::free_list::BAD_LINK) for the pop to tell
/// a stale read from a corrupt list.
pub(crate) struct SharedLinks {
    /// Address of the region's first slot.
    pub region: usize,
}

impl LinkStore for SharedLinks {
    const CHECKED: bool = cfg!(feature = "secure");

    #[inline(always)]
    unsafe fn load_link(&self, link: u32) -> u32 {
        read_link(layout::slot_of_link(self.region, link))
    }

    fn corrupt(&self, link: u32) -> ! {
        corrupt_at(layout::slot_of_link(self.region, link))
    }
}

/// The link cell of the slot at `addr`.
#[inline(always)]
pub(crate) fn link_cell(addr: usize) -> &'static AtomicU32 {
    // SAFETY: `addr` lies inside a region of the reservation (links decode
    // only to addresses inside their region), is 4-byte aligned (slots are
    // at least 4 bytes and naturally aligned) and the mapping is never
    // unmapped. Every access to a link is atomic.
    unsafe { &*sys::ptr_at::<AtomicU32>(addr) }
}

/// The link held by the free slot at `addr` (the secure mode: decoded, or
/// [`BAD_LINK`](crate::free_list::BAD_LINK) if its check fails).
#[inline(always)]
pub(crate) fn read_link(addr: usize) -> u32 {
    let word = load_link_word(addr);
    #[cfg(feature = "secure")]
    {
        // Relaxed: as the link.
        let check = crate::secure::check_cell(addr).load(Ordering::Relaxed);
        crate::secure::decode(addr, word, check)
    }
    #[cfg(not(feature = "secure"))]
    word
}

/// The link held by the free slot at `addr`, which the caller holds (a list
/// it took or owns): in the secure mode, one that fails its check stops the
/// program.
#[inline(always)]
pub(crate) fn follow_link(addr: usize) -> u32 {
    let word = load_link_word(addr);
    #[cfg(feature = "secure")]
    {
        // Relaxed: as the link.
        let check = crate::secure::check_cell(addr).load(Ordering::Relaxed);
        match crate::secure::open(crate::secure::tag(addr), word, check) {
            Some(link) => link,
            None => corrupt_at(addr),
        }
    }
    #[cfg(not(feature = "secure"))]
    word
}

/// The link word of the free slot at `addr` as stored (encoded in the
/// secure mode).
#[inline(always)]
fn load_link_word(addr: usize) -> u32 {
    // Relaxed: ordered by the lists' own synchronization (see free_list and
    // private_list); a stale read on the shared list is caught there.
    #[cfg(not(feature = "valgrind"))]
    return link_cell(addr).load(Ordering::Relaxed);
    // Free slots are no-access to memcheck; a stale read may see a live
    // block's undefined bytes (its compare-and-swap then fails).
    #[cfg(feature = "valgrind")]
    crate::valgrind::defined_word(crate::valgrind::quiet(|| {
        // Relaxed: as above.
        link_cell(addr).load(Ordering::Relaxed)
    }))
}

/// Stops the program: the free slot at `addr` holds a link that fails its
/// check (the secure mode).
#[cold]
fn corrupt_at(addr: usize) -> ! {
    #[cfg(feature = "secure")]
    crate::secure::fail("corrupted free list (a write after free?)", addr);
    #[cfg(not(feature = "secure"))]
    unreachable!("unchecked links are never bad: {addr:#x}")
}

/// The link cell of the slot at `addr` as the lists write it: in the secure
/// mode, the encoded link and its check (by the slot's tag).
pub(crate) struct SlotLink {
    addr: usize,
    #[cfg(feature = "secure")]
    tag: u64,
}

impl SlotLink {
    /// The link cell of the free slot at `addr`, which the caller holds.
    #[inline(always)]
    pub(crate) fn of(addr: usize) -> SlotLink {
        SlotLink {
            addr,
            #[cfg(feature = "secure")]
            tag: crate::secure::tag(addr),
        }
    }

    /// The link cell of the slot at `addr`, of size class `sc`, being freed:
    /// in the secure mode, a double free or a pointer that is not the start
    /// of a slot stops the program here.
    #[inline(always)]
    pub(crate) fn freed(addr: usize, sc: u32) -> SlotLink {
        let _ = sc;
        SlotLink {
            addr,
            #[cfg(feature = "secure")]
            tag: crate::secure::check_free(addr, sc),
        }
    }
}

impl LinkCell for SlotLink {
    #[inline(always)]
    unsafe fn store_link(&self, link: u32) {
        #[cfg(feature = "secure")]
        {
            let (word, check) = crate::secure::seal(self.tag, link);
            // Relaxed: published as the link is (below).
            crate::secure::check_cell(self.addr).store(check, Ordering::Relaxed);
            // SAFETY: the caller owns the slot.
            unsafe { link_cell(self.addr).store_link(word) };
        }
        #[cfg(all(not(feature = "secure"), not(feature = "valgrind")))]
        // SAFETY: the caller owns the slot.
        unsafe {
            link_cell(self.addr).store_link(link)
        };
        // A free slot is no-access to memcheck.
        #[cfg(feature = "valgrind")]
        crate::valgrind::quiet(|| {
            // SAFETY: the caller owns the slot.
            unsafe { link_cell(self.addr).store_link(link) }
        });
    }
}

/// The flh of (slab, size class), given the slab's address.
#[inline(always)]
pub(crate) fn flh(slab_addr: usize, sc: u32) -> &'static AtomicU64 {
    // SAFETY: inside the slab's size-class-0 region, which holds no slots,
    // in the never-unmapped reservation; 8-byte aligned; always accessed
    // atomically.
    unsafe { &*sys::ptr_at::<AtomicU64>(layout::flh_addr(slab_addr, sc)) }
}

/// The never-used tail of (slab, size class): the number of its first slot
/// that was never handed out (or claimed into an owner's fresh run).
#[inline(always)]
pub(crate) fn tail(slab_addr: usize, sc: u32) -> &'static AtomicU32 {
    // SAFETY: as for `flh`; 4-byte aligned.
    unsafe { &*sys::ptr_at::<AtomicU32>(layout::tail_addr(slab_addr, sc)) }
}

/// The private list head of `sc` in the private block at `block`.
#[inline(always)]
pub(crate) fn private_head(block: usize, sc: u32) -> &'static AtomicU32 {
    head_at(block, layout::private_index(sc))
}

/// The private list head of private index `index` in the block at `block`.
#[inline(always)]
fn head_at(block: usize, index: usize) -> &'static AtomicU32 {
    // SAFETY: inside a slab's private block (in its size-class-1 region,
    // which holds no slots, in the never-unmapped reservation) or inside
    // EMPTY_TABLES; 4-byte aligned; always accessed atomically.
    unsafe { &*sys::ptr_at::<AtomicU32>(layout::private_head_addr(block, index)) }
}

/// The private list head of large size class `sc` in the private block at
/// `block`.
#[inline(always)]
pub(crate) fn large_head(block: usize, sc: u32) -> &'static AtomicU32 {
    // SAFETY: as for `head_at`.
    unsafe { &*sys::ptr_at::<AtomicU32>(layout::large_head_addr(block, sc)) }
}

/// The length of the private list of large size class `sc` in the private
/// block at `block`.
#[inline(always)]
pub(crate) fn large_count(block: usize, sc: u32) -> &'static AtomicU32 {
    // SAFETY: as for `head_at`.
    unsafe { &*sys::ptr_at::<AtomicU32>(layout::large_count_addr(block, sc)) }
}

/// The private fresh run of `sc` in the private block at `block`:
/// never-used slots the owner claimed from the tail and has not handed out
/// yet, as `next | end << 32` (slot numbers).
#[inline(always)]
pub(crate) fn fresh_run(block: usize, sc: u32) -> &'static AtomicU64 {
    let addr = layout::fresh_addr(block, layout::private_index(sc));
    // SAFETY: as for `head_at`; 8-byte aligned.
    unsafe { &*sys::ptr_at::<AtomicU64>(addr) }
}

/// The tables of a private block that is always empty. A thread that owns
/// no slab has its alloc word point [`layout::HEADS_OFFSET`] bytes below
/// here, so the hot path of allocation finds an empty list without first
/// testing whether the thread owns a slab. Never written.
#[repr(C, align(64))]
pub(crate) struct EmptyTables([AtomicU64; layout::PRIVATE_TABLES_SIZE / 8]);

/// The one [`EmptyTables`].
pub(crate) static EMPTY_TABLES: EmptyTables =
    EmptyTables([const { AtomicU64::new(0) }; layout::PRIVATE_TABLES_SIZE / 8]);

/// Fills the region table of the slab at `slab_addr`, which the calling
/// thread just came to own: for each small size class, the address link 0
/// would name in the slab's region of that class.
pub(crate) fn fill_region_table(slab_addr: usize) {
    let block = layout::private_block(slab_addr);
    let last = layout::region_entry_addr(block, layout::private_index(LARGE_SC - 1));
    // SAFETY: as for `head_at`; 8-byte aligned.
    let last = unsafe { &*sys::ptr_at::<AtomicU64>(last) };
    // Relaxed: see below. Filled entirely by an earlier owner (the last
    // entry is written last): nothing to do.
    if last.load(Ordering::Relaxed) != 0 {
        return;
    }
    for sc in layout::MIN_SC..LARGE_SC {
        // Relaxed: only owners read the table, after their claim's Acquire.
        let link_base = layout::slot_of_link(layout::region_addr(slab_addr, sc), 0) as u64;
        let addr = layout::region_entry_addr(block, layout::private_index(sc));
        // SAFETY: as for `head_at`; 8-byte aligned.
        let entry = unsafe { &*sys::ptr_at::<AtomicU64>(addr) };
        entry.store(link_base, Ordering::Relaxed);
    }
}

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
        let addr = layout::region_entry_addr(self.block, self.index);
        // SAFETY: as for `head_at`; 8-byte aligned.
        let entry = unsafe { &*sys::ptr_at::<AtomicU64>(addr) };
        // Relaxed: the entry was written by an owner of the slab before
        // its release, which our claim acquired (see `fill_region_table`).
        let link_base = entry.load(Ordering::Relaxed) as usize;
        let slot = link_base + 4 * link as usize;
        self.slot.set(slot);
        follow_link(slot)
    }
}

/// The size in bytes of the request a slot is taken for, carried down the
/// allocation paths to the heap profiler's countdown (the `profile`
/// feature). Without the feature it is zero-sized: no path carries anything.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    #[cfg(any(feature = "profile", feature = "valgrind"))]
    pub(crate) size: usize,
}

impl Request {
    /// A request of `size` bytes.
    #[inline(always)]
    pub fn new(size: usize) -> Request {
        #[cfg(not(any(feature = "profile", feature = "valgrind")))]
        let _ = size;
        Request {
            #[cfg(any(feature = "profile", feature = "valgrind"))]
            size,
        }
    }
}

/// Takes a slot of size class `sc` (or larger, when every slab of `sc` is
/// empty) for `req`. Returns null when no slot is left or the reservation
/// failed; the flag says the slot was never handed out before (its memory
/// is zero).
#[inline(always)]
pub fn alloc(sc: u32, req: Request) -> (*mut u8, bool) {
    debug_assert!((layout::MIN_SC..=MAX_SC).contains(&sc));
    if sc >= LARGE_SC {
        cold_path::alloc_large(sc, req)
    } else {
        alloc_small(sc, req)
    }
}

/// [`alloc`] for size classes below [`LARGE_SC`].
#[inline(always)]
pub fn alloc_small(sc: u32, req: Request) -> (*mut u8, bool) {
    debug_assert!((layout::MIN_SC..LARGE_SC).contains(&sc));
    match alloc_hot(layout::private_index(sc), req) {
        Some(p) => (p, false),
        None => cold_path::alloc_small(sc, req),
    }
}

/// The hot path of allocation: a slot of the size class of private index
/// `index` ([`layout::private_index_of`]) from the private list of the slab
/// the thread owns, for `req`. `None` when the thread owns no slab (its
/// alloc word is EMPTY_TABLES), the list is empty, or the size class is not
/// small (its list is always empty): the caller then takes the cold path.
#[inline(always)]
pub fn alloc_hot(index: usize, req: Request) -> Option<*mut u8> {
    debug_assert!(index < layout::PRIVATE_HEADS);
    let block = home_slab::alloc_word();
    let links = TableLinks {
        block,
        index,
        slot: core::cell::Cell::new(0),
    };
    // SAFETY: the thread owns the slab (or the block is EMPTY_TABLES, whose
    // lists are empty); the links are its region's.
    unsafe { private_list::pop(head_at(block, index), &links) }?;
    counters::owner_alloc(block, index);
    #[cfg(feature = "secure")]
    crate::secure::handed_out(links.slot.get());
    let p: *mut u8 = sys::ptr_at(links.slot.get());
    debug_assert_eq!(layout::sc_of(p.addr()) as usize, index + 1);
    debug_assert_eq!(p.addr() & ((2 << index) - 1), 0, "off a slot");
    #[cfg(feature = "profile")]
    if crate::profile::due(req.size) {
        return Some(crate::profile::sample_hot(p, req.size));
    }
    #[cfg(feature = "valgrind")]
    crate::valgrind::allocated(p, req.size);
    #[cfg(not(any(feature = "profile", feature = "valgrind")))]
    let _ = req;
    Some(p)
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

/// The hot path of free: if the slot at `p` is a small slot of the slab the
/// thread owns, puts it on its private list and returns true.
///
/// # Safety
/// `p` is null, not in the reservation, or the start of a slot handed out
/// by [`alloc`] and not freed since.
#[inline(always)]
pub unsafe fn free_owned(p: *mut u8) -> bool {
    // Memcheck's bookkeeping and the quarantine are on the cold path.
    #[cfg(feature = "valgrind")]
    if crate::valgrind::active() {
        return false;
    }
    let block = home_slab::owned();
    // A slot's offset from the owned slab's private block, in regions, is
    // its size class minus one; any other address (another slab, another
    // allocator's, null, or any address when the word is NOT_OWNER) is
    // off by far more than the small classes span.
    let index = sys::opaque(p.addr().wrapping_sub(block) >> layout::SC_SHIFT);
    if index >= LARGE_SC as usize - 1 {
        return false;
    }
    // (Below 2^32, so the cast is exact.)
    let sc = index as u32 + 1;
    #[cfg(feature = "secure")]
    if crate::secure::filling() {
        // The cold path fills it.
        return false;
    }
    let cell = SlotLink::freed(p.addr(), sc);
    debug_assert!(sc >= layout::MIN_SC, "not a slot: {p:?}");
    debug_assert_eq!(p.addr() & ((1 << sc) - 1), 0, "not the start of a slot");
    // SAFETY: the thread owns the slab and, per the contract, the slot,
    // which belongs to this region.
    unsafe { private_list::push(head_at(block, index), &cell, layout::link_of(p.addr())) };
    counters::owner_free(block, index);
    true
}

/// Size in bytes of the slot holding `p`.
#[inline(always)]
pub fn slot_size(p: *const u8) -> usize {
    1 << layout::sc_of(p.addr())
}

/// Whether `p` lies in the reservation (is a slot of this allocator).
#[inline(always)]
pub fn contains(p: *const u8) -> bool {
    let base = reservation::base_raw();
    reservation::is_ready(base) && layout::base_of(p.addr()) == base
}
