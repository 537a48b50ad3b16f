//! Handing out and taking back slots: the allocator's hot paths, with
//! failover across slabs and size classes, the longer path of the large
//! slots (64 KiB and more), and the search for freed slots on other slabs
//! before new memory is touched.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::diag::{self, Event};
use crate::free_list::{self, LinkStore, Pop};
use crate::layout::{self, LARGE_SC, MAX_SC, NUM_SLABS};
use crate::{region, release, slab_occupancy, sys, thread_slab};

/// The links of the free slots of one region live in the slots' first four
/// bytes.
struct SlotLinks {
    /// Address of the region's first slot.
    region: usize,
    /// Its size class.
    sc: u32,
}

impl SlotLinks {
    #[inline(always)]
    fn slot_ptr(&self, slot: u32) -> *mut u8 {
        sys::ptr_at(self.region | ((slot as usize) << self.sc))
    }

    #[inline(always)]
    fn link(&self, slot: u32) -> &AtomicU32 {
        let addr = self.region | ((slot as usize) << self.sc);
        // SAFETY: the address lies inside the reservation (slot numbers are
        // below `num_slots`, which keeps them inside the region), is 4-byte
        // aligned (slots are at least 4 bytes and naturally aligned) and the
        // mapping is never unmapped. Every access to a link is atomic.
        unsafe { &*sys::ptr_at::<AtomicU32>(addr) }
    }
}

impl LinkStore for SlotLinks {
    #[inline(always)]
    unsafe fn load_link(&self, slot: u32) -> u32 {
        // Relaxed: ordered by the flh's Acquire/Release (see free_list).
        self.link(slot).load(Ordering::Relaxed)
    }
}

/// The flh at `addr`.
#[inline(always)]
fn flh(addr: usize) -> &'static AtomicU64 {
    // SAFETY: flh addresses lie in the never-unmapped reservation, in the
    // size-class-0 region that holds no slots, 8-byte aligned; every access
    // is atomic.
    unsafe { &*sys::ptr_at::<AtomicU64>(addr) }
}

// `pop_or_new_memory` reports the end of a region as new memory: every
// region's slots must span a whole number of steps.
const _: () = {
    let mut sc = layout::MIN_SC;
    while sc <= MAX_SC {
        assert!((layout::num_slots(sc) as u64) << sc & (free_list::NEW_MEMORY_STEP - 1) == 0);
        sc += 1;
    }
};

/// One pop attempt on (slab, size class).
#[inline(always)]
fn try_pop(base: usize, slab: usize, sc: u32) -> Pop {
    let links = SlotLinks {
        region: base | layout::region_offset(slab, sc),
        sc,
    };
    free_list::pop(
        flh(layout::flh_addr(base, slab, sc)),
        &links,
        layout::num_slots(sc),
    )
}

/// Takes a slot of size class `sc` (or larger, when every slab of `sc` is
/// empty). Returns null when no slot is left or the reservation failed; the
/// flag says the slot was never handed out before (its memory is zero).
#[inline(always)]
pub fn alloc(sc: u32) -> (*mut u8, bool) {
    debug_assert!((layout::MIN_SC..=MAX_SC).contains(&sc));
    if sc >= LARGE_SC {
        alloc_large(sc)
    } else {
        alloc_small(sc)
    }
}

/// [`alloc`] for size classes below [`LARGE_SC`]: the hot path.
#[inline(always)]
pub fn alloc_small(sc: u32) -> (*mut u8, bool) {
    debug_assert!((layout::MIN_SC..LARGE_SC).contains(&sc));
    alloc_at_home(sc)
}

/// [`alloc`] for large slots (of at least [`LARGE_SC`]), out of line so the
/// hot path's callers stay small. For them every never-used slot is new
/// memory worth looking elsewhere first (see [`alloc_new_memory`]).
#[inline(never)]
pub fn alloc_large(sc: u32) -> (*mut u8, bool) {
    debug_assert!((LARGE_SC..=MAX_SC).contains(&sc));
    alloc_at_home(sc)
}

/// One pop on the thread's own slab; the cold paths take over from there.
#[inline(always)]
fn alloc_at_home(sc: u32) -> (*mut u8, bool) {
    // A thread with a slab implies a reservation: no need to load the base.
    let Some(slab_addr) = thread_slab::current_if_assigned() else {
        return alloc_first(sc);
    };
    let region = slab_addr | layout::region_offset(0, sc);
    let links = SlotLinks { region, sc };
    let flh = flh(slab_addr | layout::flh_addr(0, 0, sc));
    match free_list::pop_or_new_memory(flh, &links, layout::num_slots(sc), sc) {
        Pop::Slot { slot, fresh } => {
            let p = links.slot_ptr(slot);
            debug_assert_eq!(layout::sc_of(p.addr()), sc);
            debug_assert_eq!(p.addr() & ((1 << sc) - 1), 0);
            (p, fresh)
        }
        Pop::NewMemory => {
            alloc_new_memory(layout::base_of(slab_addr), layout::slab_of(slab_addr), sc)
        }
        _ => alloc_contended(layout::base_of(slab_addr), layout::slab_of(slab_addr), sc),
    }
}

/// The thread's list of `sc` offers only never-used slots, and the next one
/// would touch new memory. Before that, look for freed slots, whose memory
/// is likely resident: in the same size class on the other slabs that
/// threads have used, then, for large slots, up to [`BORROW_UP`] size
/// classes larger. This keeps cross-thread frees from growing the touched
/// memory of every slab to the whole working set, and lets a new thread
/// reuse what finished threads freed.
///
/// Slabs no live thread calls home come first: their freed slots are
/// nobody's working set, and moving there contends with nobody. A small
/// slot found moves the thread to that slab (its next allocations of every
/// size class go there; the next search brings it back if needed); a large
/// one is only borrowed. Measured (`bench/ab.sh`, `bench/preload`): moving
/// in with a live owner first made `bench --compare` `medium@2` 2.2x
/// slower (both threads then contend on every allocation), and borrowing
/// single slots from live owners instead of moving made larson 10-20%
/// slower with more memory.
#[cold]
#[inline(never)]
fn alloc_new_memory(base: usize, slab: usize, sc: u32) -> (*mut u8, bool) {
    let t = diag::ticks();
    let got = find_freed(base, slab, sc);
    diag::add(Event::SearchTicks, diag::ticks().wrapping_sub(t));
    got
}

/// The body of [`alloc_new_memory`].
#[inline(always)]
fn find_freed(base: usize, slab: usize, sc: u32) -> (*mut u8, bool) {
    diag::count(Event::NewMemory);
    let others = slab_occupancy::ever_used() & !(1 << slab);
    let unowned = others & slab_occupancy::unowned();
    for candidates in [unowned, others & !unowned] {
        for s in slabs_in(candidates) {
            if let Some(got) = try_freed(base, s, sc) {
                diag::count(if candidates == unowned {
                    Event::FreedUnowned
                } else {
                    Event::FreedOwned
                });
                if sc < LARGE_SC {
                    thread_slab::set(base, s);
                }
                return got;
            }
        }
    }
    if sc >= LARGE_SC {
        for up in sc + 1..=MAX_SC.min(sc + BORROW_UP) {
            if let Some(got) = try_freed(base, slab, up) {
                diag::count(Event::FreedLarger);
                return got;
            }
            for s in slabs_in(others) {
                if let Some(got) = try_freed(base, s, up) {
                    diag::count(Event::FreedLarger);
                    return got;
                }
            }
        }
    }
    diag::count(Event::NeverUsed);
    match try_pop(base, slab, sc) {
        Pop::Slot { slot, fresh } => taken(base, slab, sc, slot, fresh),
        _ => alloc_contended(base, slab, sc),
    }
}

/// The slabs in the bit set `set`, lowest first.
fn slabs_in(mut set: usize) -> impl Iterator<Item = usize> {
    core::iter::from_fn(move || {
        let s = (set != 0).then(|| set.trailing_zeros() as usize)?;
        set &= set - 1;
        Some(s)
    })
}

/// One pop on (slab, size class) if its list starts with a freed slot,
/// handing the slot out.
#[inline]
fn try_freed(base: usize, slab: usize, sc: u32) -> Option<(*mut u8, bool)> {
    let flh = flh(layout::flh_addr(base, slab, sc));
    // Relaxed: a hint; the pop that may follow does its own synchronization.
    if flh.load(Ordering::Relaxed) as u32 & free_list::USED == 0 {
        return None;
    }
    match try_pop(base, slab, sc) {
        Pop::Slot { slot, fresh } => Some(taken(base, slab, sc, slot, fresh)),
        _ => None,
    }
}

/// A successful pop of `slot` of (slab, size class), as [`alloc`] returns
/// it.
#[inline]
fn taken(base: usize, slab: usize, sc: u32, slot: u32, fresh: bool) -> (*mut u8, bool) {
    (sys::ptr_at(layout::slot_addr(base, slab, sc, slot)), fresh)
}

/// A large request whose own list holds no freed slot takes a freed slot of
/// up to this many size classes larger, if one is there, before it touches
/// a never-used slot.
const BORROW_UP: u32 = 2;

/// Retries at home after collisions with pushes, before failing over.
///
/// Measured with `bench/preload` xmalloc-test at 2 threads (a producer
/// allocating, a consumer freeing everything): failing over on every
/// collision made the producer wander over the slabs (peak RSS 1.9x
/// glibc's); retrying at home without bound kept it on one flh cache line
/// with the consumer (1.5x slower); two retries got both the speed and the
/// memory (0.86x glibc's RSS).
const PUSH_COLLISION_RETRIES: u32 = 2;

/// The first pop on the thread's own slab failed. Retry at home (a few
/// times, see [`PUSH_COLLISION_RETRIES`]) while the failures are
/// collisions with pushes (other threads freeing slots of this slab): that
/// is no contention among allocating threads, and failing over for it would
/// let cross-thread frees chase the thread from slab to slab. An empty
/// slab, another thread popping, or repeated push collisions fail over.
#[cold]
#[inline(never)]
fn alloc_contended(base: usize, slab: usize, sc: u32) -> (*mut u8, bool) {
    diag::count(Event::Contended);
    let mut retries = 0;
    loop {
        match try_pop(base, slab, sc) {
            Pop::Slot { slot, fresh } => return taken(base, slab, sc, slot, fresh),
            // Another thread's push succeeded: progress (lock-free); retry.
            p if p.is_push_collision() && retries < PUSH_COLLISION_RETRIES => {
                diag::count(Event::PushRetry);
                retries += 1
            }
            _ => return alloc_failover(base, slab, sc),
        }
    }
}

/// The first allocation of this thread (and maybe of the process): reserve
/// if needed, take a home slab, then allocate.
#[cold]
#[inline(never)]
fn alloc_first(sc: u32) -> (*mut u8, bool) {
    diag::count(Event::FirstAlloc);
    let base = region::base_raw();
    let base = if region::is_ready(base) {
        base
    } else {
        match region::init() {
            Some(base) => base,
            None => return (core::ptr::null_mut(), false),
        }
    };
    let slab = thread_slab::current(base);
    match try_pop(base, slab, sc) {
        Pop::Slot { slot, fresh } => taken(base, slab, sc, slot, fresh),
        _ => alloc_failover(base, slab, sc),
    }
}

/// The thread's slab was empty or contended: try the other slabs, then the
/// larger size classes, and remember where we succeeded.
#[cold]
#[inline(never)]
fn alloc_failover(base: usize, slab: usize, sc: u32) -> (*mut u8, bool) {
    diag::count(Event::Failover);
    let want = sc;
    // On the first pass over `sc`, try the thread's own slab last: it just
    // failed.
    let mut first = slab + 1;
    for sc in sc..=MAX_SC {
        loop {
            let mut collided = false;
            for i in 0..NUM_SLABS {
                let s = (first + i) % NUM_SLABS;
                match try_pop(base, s, sc) {
                    Pop::Slot { slot, fresh } => {
                        if sc != want {
                            diag::count(Event::FailoverLarger);
                        }
                        if s != slab {
                            thread_slab::set(base, s);
                        }
                        return taken(base, s, sc, slot, fresh);
                    }
                    Pop::Empty | Pop::NewMemory => {}
                    Pop::Collision { .. } => collided = true,
                }
            }
            // A slab that collided may still hold slots: another round. Each
            // collision means another thread's operation succeeded, so this
            // terminates (lock-free).
            if !collided {
                break;
            }
            first = slab;
        }
        first = slab;
    }
    (core::ptr::null_mut(), false)
}

/// Returns the slot at `p` to its free list.
///
/// # Safety
/// `p` is the start of a slot handed out by [`alloc`] and not freed since.
#[inline(always)]
pub unsafe fn dealloc(p: *mut u8) {
    let addr = p.addr();
    let sc = layout::sc_of(addr);
    debug_assert!(
        (layout::MIN_SC..=MAX_SC).contains(&sc),
        "not a slot: {addr:#x}"
    );
    debug_assert_eq!(addr & ((1 << sc) - 1), 0, "not the start of a slot");
    if layout::is_large(addr) {
        // SAFETY: the caller owns the slot.
        return unsafe { dealloc_large(addr, sc) };
    }
    // SAFETY: the caller owns the slot.
    unsafe { push(addr, sc) }
}

/// [`dealloc`] of a large slot: from [`release::RELEASE_SC`] on, releases
/// its pages, then pushes it.
///
/// # Safety
/// As for [`dealloc`]; `addr` is the slot's address, `sc` its size class.
#[inline(never)]
unsafe fn dealloc_large(addr: usize, sc: u32) {
    // SAFETY: the caller owns the slot; it is not pushed yet.
    unsafe {
        release::before_push(addr, sc);
        push(addr, sc);
    }
}

/// Pushes the slot at `addr`, of size class `sc`, onto its list.
///
/// # Safety
/// The caller owns the slot.
#[inline(always)]
unsafe fn push(addr: usize, sc: u32) {
    // SAFETY: the caller owns the slot, which belongs to this flh's region;
    // its first four bytes (slots are at least 4 bytes, naturally aligned)
    // hold its link while it is free, always accessed atomically.
    unsafe {
        free_list::push(
            flh(layout::flh_addr_of(addr)),
            &*sys::ptr_at::<AtomicU32>(addr),
            layout::slot_of(addr, sc),
        )
    };
}

/// Size in bytes of the slot holding `p`.
#[inline(always)]
pub fn slot_size(p: *const u8) -> usize {
    1 << layout::sc_of(p.addr())
}

/// Whether `p` lies in the reservation (is a slot of this allocator).
#[inline(always)]
pub fn contains(p: *const u8) -> bool {
    let base = region::base_raw();
    region::is_ready(base) && layout::base_of(p.addr()) == base
}
