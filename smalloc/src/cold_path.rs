//! The cold paths behind the hot ones in [`hot_path`](crate::hot_path): an
//! owner's private list running dry, threads that own no slab, large slots,
//! frees onto shared lists, new memory, and failover.
//!
//! Where a slot comes from, in order:
//!
//! 1. an owner: its private list (the hot path); the slab's shared list,
//!    taken whole; its fresh run of never-used slots. A thread without a
//!    slab of its own (more live threads than slabs) first claims any slab
//!    nobody owns; otherwise it pops from its slab's shared list, one slot
//!    at a time. Large slots (64 KiB and more) always take the shared path.
//! 2. Before touching new memory (a never-used step of
//!    [`NEW_MEMORY_STEP`](layout::NEW_MEMORY_STEP) bytes; every never-used
//!    large slot): freed slots of `sc` on the other slabs threads have used,
//!    slabs nobody owns first (see [`find_freed`]).
//! 3. The never-used tail: an owner claims a whole step into its fresh run,
//!    other threads one slot.
//! 4. Failover, when the slab's region of `sc` is used up or contended:
//!    the other slabs, then the larger size classes.

use core::sync::atomic::Ordering;

use crate::features::links::{RegionLinks, SharedLinks, SlotLink, follow_link};
use crate::features::{self, Core, Event, Request};
use crate::free_list::{self, Pop};
use crate::home_slab::{self, is_owner};
use crate::layout::{self, LARGE_SC, MAX_SC, Slot, THREAD_SLABS};
use crate::metadata::{self, private_index, shared, tables};
use crate::{
    capped, commit, geometry, held, large_freed, occupancy, ownership, pressure, private_list,
    purge, reservation, shrink, spans, sys,
};

/// What the features may ask of the allocator: the heap profiler's slots.
pub static CORE: Core = Core {
    profile_slot,
    free: crate::hot_path::dealloc,
};

/// `got`, handed out for `req`, as the features hear of it.
#[inline(always)]
fn counted(got: Slot, req: Request) -> Slot {
    features::cold_alloc(got, req);
    got
}

/// The slot for `req`, of size class `sc`: the heap profiler's, if it
/// samples this request (counted towards its next sample before the cold
/// path takes a slot for it), else `take`'s.
#[inline(always)]
fn or_sampled(sc: u32, req: Request, take: impl FnOnce() -> Slot) -> Slot {
    match features::cold_sample(sc, req, &CORE) {
        Some(got) => got,
        None => take(),
    }
}

/// A slot of size class `sc` of the profile's slab, for a sampled
/// allocation (the `profile` feature): from its shared list, or never used
/// (nobody owns that slab, so it has no private list).
fn profile_slot(sc: u32) -> Option<Slot> {
    let addr = layout::slab_addr(geometry::base_raw(), layout::PROFILE_SLAB);
    let links = SharedLinks {
        region: layout::region_addr(addr, sc),
    };
    // A collision means another thread's push or pop went through
    // (lock-free): retried, instead of taking never-used memory (which
    // threads sampling at once would otherwise touch at every collision).
    loop {
        match free_list::pop(&shared(addr, sc).flh, &links) {
            Pop::Slot(link) => return Some(slot(addr, sc, link, false)),
            Pop::Collision { .. } => {}
            Pop::Empty => break,
        }
    }
    // Before new memory: the slots left in the records of threads that
    // ended.
    if let Some(ptr) = features::idle_slot(sc) {
        return Some(Slot { ptr, fresh: false });
    }
    claim_tail(addr, sc, false).map(|(n, _)| never_used(addr, sc, n))
}

/// The slot named by `link` in (slab, size class).
#[inline]
fn slot(slab_addr: usize, sc: u32, link: u32, fresh: bool) -> Slot {
    let region = layout::region_addr(slab_addr, sc);
    Slot {
        ptr: sys::ptr_at(layout::slot_of_link(region, link)),
        fresh,
    }
}

/// Never-used slot `n` of (slab, size class).
#[inline]
fn never_used(slab_addr: usize, sc: u32, n: u32) -> Slot {
    slot(slab_addr, sc, layout::link_of_slot(sc, n), true)
}

/// [`hot_path::alloc_small`](crate::hot_path::alloc_small) after the hot path
/// found nothing: the thread owns no slab, or its private list is empty.
#[cold]
#[inline(never)]
pub fn alloc_small(sc: u32, req: Request) -> Slot {
    or_sampled(sc, req, || {
        let owned = home_slab::owned();
        if is_owner(owned) {
            home_slab::answer_nudge(owned);
            return counted(owner_refill(home_slab::owned_slab(owned), sc), req);
        }
        alloc_small_unowned(sc, req)
    })
}

/// [`alloc_small`] for a thread that owns no slab: its first allocation, a
/// claim, its guest cells or its slab's shared list. Out of line, so that
/// an owner's refill saves no registers on its way; a guest's usual way
/// (every slab owned, its set claimed) makes only tail calls.
#[inline(never)]
fn alloc_small_unowned(sc: u32, req: Request) -> Slot {
    let current = home_slab::current();
    if current == 0 {
        return alloc_first(sc, req);
    }
    if !home_slab::may_own(current) {
        return alloc_small_shared(sc, req, current);
    }
    if ownership::unowned() == 0 {
        if let Some(n) = crate::guest::set_for(sc) {
            return match crate::guest::take_from(n, sc) {
                Some(got) => counted(got, req),
                None => alloc_small_shared(sc, req, current),
            };
        }
    }
    alloc_small_joining(sc, req, current)
}

/// [`alloc_small_unowned`] of a thread that may own a slab, off a guest's
/// usual way: it claims a slab nobody owns, or its set of cells.
#[inline(never)]
fn alloc_small_joining(sc: u32, req: Request, current: usize) -> Slot {
    let addr = home_slab::slab_addr(current);
    if let Some(owned) = claim_any(layout::base_of(addr), layout::slab_of(addr)) {
        return counted(owner_refill(owned, sc), req);
    }
    if let Some(got) = crate::guest::take(sc) {
        return counted(got, req);
    }
    alloc_small_shared(sc, req, current)
}

/// A slot of small size class `sc` from the shared lists, for a thread
/// that owns no slab, on the slab at `current`.
#[inline(always)]
fn alloc_small_shared(sc: u32, req: Request, current: usize) -> Slot {
    let addr = home_slab::slab_addr(current);
    counted(
        shared_alloc(layout::base_of(addr), layout::slab_of(addr), sc),
        req,
    )
}

/// A slot of a large size class (64 KiB to 2 GiB): an owner's private list
/// of large slots first (see [`keeps_large`]), then the shared path.
#[inline(never)]
pub fn alloc_large(sc: u32, req: Request) -> Slot {
    debug_assert!((LARGE_SC..=MAX_SC).contains(&sc));
    let got = alloc_large_slot(sc, req);
    // The slot's own class, which a borrow or a failover makes larger: its
    // free counts that one.
    if !got.ptr.is_null() {
        shrink::allocating(layout::sc_of(got.ptr.addr()));
    }
    got
}

/// The body of [`alloc_large`].
#[inline(always)]
fn alloc_large_slot(sc: u32, req: Request) -> Slot {
    or_sampled(sc, req, || {
        let owned = home_slab::owned();
        if is_owner(owned) {
            home_slab::answer_nudge(owned);
            purge::owner_tick(home_slab::owned_slab(owned));
            if let Some(got) = owner_take_large(home_slab::owned_slab(owned), sc) {
                return counted(got, req);
            }
        }
        let current = home_slab::current();
        if current == 0 {
            return alloc_first(sc, req);
        }
        let addr = home_slab::slab_addr(current);
        let got = shared_alloc(layout::base_of(addr), layout::slab_of(addr), sc);
        counted(got, req)
    })
}

/// The first allocation of this thread (and maybe of the process): reserve
/// if needed, take a place, then allocate (and count the allocation).
#[cold]
#[inline(never)]
fn alloc_first(sc: u32, req: Request) -> Slot {
    let base = geometry::base_raw();
    let base = if geometry::is_ready(base) {
        base
    } else {
        match reservation::init() {
            Some(base) => base,
            None => return Slot::NONE,
        }
    };
    home_slab::assign(base);
    features::count(Event::FirstAlloc, home_slab::current());
    crate::hot_path::alloc(sc, req)
}

/// A thread that owns no slab (but may) claims one that nobody owns, its
/// current slab first. Returns the new owned slab's address. While the
/// thread lives alone on its current slab, a claim of it is a sweep's or a
/// trim's, held for a moment: the thread stays on that slab's shared lists
/// and claims it on a later cold path, rather than taking up another slab.
fn claim_any(base: usize, current: usize) -> Option<usize> {
    let unowned = ownership::unowned();
    if unowned == 0 || unowned & (1 << current) == 0 && stays_home(current) {
        return None;
    }
    let first = if unowned & (1 << current) != 0 {
        current
    } else {
        unowned.trailing_zeros() as usize
    };
    let candidates = core::iter::once(first).chain(slabs_in(unowned & !(1 << first)));
    for s in candidates {
        if ownership::claim(s) {
            home_slab::become_owner(base, s);
            return Some(layout::slab_addr(base, s));
        }
    }
    None
}

/// The owner of the slab at `slab_addr` found its private list of `sc`
/// empty: the purge's ticks, then a held slot or the longer way. No call
/// returns here unless a tick is due, so a held slot costs no saved
/// registers (a thread that frees and allocates other threads' blocks).
#[cold]
#[inline(never)]
fn owner_refill(slab_addr: usize, sc: u32) -> Slot {
    if purge::refill_ticks_due() {
        return owner_refill_ticked(slab_addr, sc);
    }
    held_or_refill(slab_addr, sc)
}

/// [`owner_refill`] with its ticks due (in one frame, as a program with one
/// thread refills every time).
#[inline(never)]
fn owner_refill_ticked(slab_addr: usize, sc: u32) -> Slot {
    purge::cold_tick_refill();
    purge::owner_tick(slab_addr);
    match held::take(slab_addr, sc) {
        Some(got) => got,
        None => owner_refill_rest(slab_addr, sc),
    }
}

/// The held slot of `sc`, else [`owner_refill_slow`].
#[inline(always)]
fn held_or_refill(slab_addr: usize, sc: u32) -> Slot {
    match held::take(slab_addr, sc) {
        Some(got) => got,
        None => owner_refill_slow(slab_addr, sc),
    }
}

/// [`owner_refill_rest`] out of line.
#[inline(never)]
fn owner_refill_slow(slab_addr: usize, sc: u32) -> Slot {
    owner_refill_rest(slab_addr, sc)
}

/// [`owner_refill`] without a held slot: the owner's own supply, then
/// other slabs' freed slots, then new memory.
#[inline(always)]
fn owner_refill_rest(slab_addr: usize, sc: u32) -> Slot {
    if let Some(got) = owner_take(slab_addr, sc) {
        return got;
    }
    let (base, slab) = (layout::base_of(slab_addr), layout::slab_of(slab_addr));
    // Where the last search found freed slots, before searching: a thread
    // whose own supply runs short (its slots freed by others come back
    // more slowly than it allocates, as when it runs alone on a core) keeps
    // borrowing from the same slab for a while.
    let hint = home_slab::search_hint();
    if hint != slab {
        if let Some(got) = try_shared(layout::slab_addr(base, hint), sc) {
            features::count(Event::Borrow, slab_addr);
            return got;
        }
    }
    if let Some(got) = find_freed(base, slab, sc) {
        return got;
    }
    owner_claim_step(slab_addr, sc).unwrap_or_else(|| failover(base, slab, sc))
}

/// What the owner of the slab at `slab_addr` has for `sc` without touching
/// new memory: its private list, the shared list (taken whole), its fresh
/// run.
fn owner_take(slab_addr: usize, sc: u32) -> Option<Slot> {
    debug_assert!(sc < LARGE_SC);
    let block = metadata::private_block(slab_addr);
    let head = tables(block).head(private_index(sc));
    let links = RegionLinks {
        region: layout::region_addr(slab_addr, sc),
    };
    // SAFETY: the caller owns the slab; the links are its region's.
    if let Some(link) = unsafe { private_list::pop(head, &links) } {
        return Some(slot(slab_addr, sc, link, false));
    }
    let flh = &shared(slab_addr, sc).flh;
    // Relaxed: a hint; `take_all` and `pop` synchronize.
    if flh.load(Ordering::Relaxed) as u32 != 0 {
        if occupancy::shared(layout::slab_of(slab_addr)) {
            // Threads without a slab of their own live here and allocate
            // from this list too: take one slot, not their supply.
            let shared = SharedLinks {
                region: links.region,
            };
            if let Pop::Slot(link) = free_list::pop(flh, &shared) {
                return Some(slot(slab_addr, sc, link, false));
            }
        }
        let first = free_list::take_all(flh);
        if first != 0 {
            features::count(Event::TakeShared, slab_addr);
            // The chain is ours and private before its first link is read,
            // so a corrupted link stops the secure mode with the chain still
            // on a list; its links were released by its pushes and acquired
            // by `take_all`.
            private_list::HeadCell::set(head, first);
            let next = follow_link(layout::slot_of_link(links.region, first));
            private_list::HeadCell::set(head, next);
            // The next pop reads this slot's link: start its miss now.
            sys::prefetch(layout::link_base(links.region), next as usize);
            return Some(slot(slab_addr, sc, first, false));
        }
    }
    let run = tables(block).fresh(sc);
    // Relaxed: only the owner touches the run (see private_list).
    let r = run.load(Ordering::Relaxed);
    let (next, end) = (r as u32, (r >> 32) as u32);
    if next < end {
        run.store(r + 1, Ordering::Relaxed);
        return Some(never_used(slab_addr, sc, next));
    }
    None
}

/// Whether the owner of a slab keeps a freed large slot of size class `sc`
/// on its private list when it holds `count` there already. Slots of
/// [`purge::RELEASE_SC`] and more never are: their pages go back to the
/// kernel on free.
#[inline]
fn keeps_large(sc: u32, count: u32) -> bool {
    sc < purge::RELEASE_SC && capped::under_cap(sc, count)
}

/// A slot of large size class `sc` from the private list of the slab at
/// `slab_addr`, which the caller owns (or has claimed).
fn owner_take_large(slab_addr: usize, sc: u32) -> Option<Slot> {
    let block = metadata::private_block(slab_addr);
    let links = RegionLinks {
        region: layout::region_addr(slab_addr, sc),
    };
    // SAFETY: the caller owns the slab; the links are its region's.
    let link = unsafe { private_list::pop(tables(block).large_head(sc), &links) }?;
    let count = tables(block).large_count(sc);
    // Relaxed: only the owner touches the count (see private_list).
    count.store(count.load(Ordering::Relaxed) - 1, Ordering::Relaxed);
    purge::large_taken(layout::slab_of(slab_addr), sc);
    Some(slot(slab_addr, sc, link, false))
}

/// The owner of the slab at `slab_addr` claims the next step of its
/// never-used tail of `sc` into its fresh run and takes its first slot.
fn owner_claim_step(slab_addr: usize, sc: u32) -> Option<Slot> {
    // A span a sweep gave back is as zero as the tail, and lower.
    let (first, end) = match spans::claim(slab_addr, sc) {
        Some((first, end)) => {
            // Given-back pages, as new as the tail's.
            pressure::claimed((end - first) as usize * layout::slot_size(sc));
            (first, end)
        }
        None => claim_tail(slab_addr, sc, true)?,
    };
    features::count(Event::NeverUsed, slab_addr);
    // Relaxed: only the owner touches the run.
    let run = tables(metadata::private_block(slab_addr)).fresh(sc);
    run.store(
        u64::from(first + 1) | u64::from(end) << 32,
        Ordering::Relaxed,
    );
    Some(never_used(slab_addr, sc, first))
}

/// Never-used slots of size class `sc` in one new-memory step.
#[inline]
fn step_slots(sc: u32) -> u32 {
    ((layout::NEW_MEMORY_STEP / layout::slot_size_nonzero(sc)) as u32).max(1)
}

/// Claims never-used slots of (slab, size class) from its tail: a new-memory
/// step's worth (`step`), or one, and commits them
/// ([`commit`](crate::commit)). Returns the first slot number claimed and
/// the end of the claim; `None` when the region is used up or the kernel
/// refuses the memory.
fn claim_tail(slab_addr: usize, sc: u32, step: bool) -> Option<(u32, u32)> {
    let n = layout::num_slots(sc);
    let tail = &shared(slab_addr, sc).tail;
    // Relaxed, but for the claim's Acquire: the tail hands out numbers of
    // slots nobody ever wrote, or that a region reset read last (its
    // Release store of the tail).
    let mut t = tail.load(Ordering::Relaxed);
    loop {
        if t >= n {
            return None;
        }
        // A step is a step's worth of slots from wherever the tail is, not
        // up to the next boundary: a thread sharing the slab, which claims
        // single slots and looks elsewhere first when one starts a step,
        // then does so once per step of its own claims.
        let end = t
            .saturating_add(if step { step_slots(sc) } else { 1 })
            .min(n);
        match tail.compare_exchange_weak(t, end, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) if commit::commit(slab_addr, sc, layout::slots_end(sc, end)) => {
                pressure::claimed_tail(shared(slab_addr, sc), sc, t, end);
                return Some((t, end));
            }
            Ok(_) => {
                // Refused: the claim goes back unless a later one followed
                // (whose own commit covers these slots, or fails too).
                let _ = tail.compare_exchange(end, t, Ordering::Relaxed, Ordering::Relaxed);
                return None;
            }
            Err(now) => t = now,
        }
    }
}

/// Retries at home after collisions with pushes, before failing over.
///
/// Measured with `bench/preload` xmalloc-test at 2 threads (before slabs had
/// owners; see docs/decisions.md): two retries kept a producer off the
/// other slabs without tying it to the consumer's cache line.
const PUSH_COLLISION_RETRIES: u32 = 2;

/// A slot of `sc` from the shared list of (slab, size class), for threads
/// that do not own the slab and for large slots.
fn shared_alloc(base: usize, slab: usize, sc: u32) -> Slot {
    let addr = layout::slab_addr(base, slab);
    let links = SharedLinks {
        region: layout::region_addr(addr, sc),
    };
    let mut retries = 0;
    loop {
        match free_list::pop(&shared(addr, sc).flh, &links) {
            Pop::Slot(link) => return slot(addr, sc, link, false),
            Pop::Empty => return shared_never_used(base, slab, sc),
            // Another thread's push succeeded: progress (lock-free); retry.
            p if p.is_push_collision() && retries < PUSH_COLLISION_RETRIES => {
                features::count(Event::PushRetry, addr);
                retries += 1;
            }
            Pop::Collision { .. } => {
                features::count(Event::Contended, addr);
                return failover(base, slab, sc);
            }
        }
    }
}

/// [`shared_alloc`] found the shared list empty: one never-used slot, after
/// looking for freed slots elsewhere when it starts a new step.
fn shared_never_used(base: usize, slab: usize, sc: u32) -> Slot {
    let addr = layout::slab_addr(base, slab);
    // Relaxed: a hint; `claim_tail` decides.
    let t = shared(addr, sc).tail.load(Ordering::Relaxed);
    if t < layout::num_slots(sc) && t % step_slots(sc) == 0 {
        if let Some(got) = find_freed(base, slab, sc) {
            return got;
        }
    }
    match claim_tail(addr, sc, false) {
        Some((n, _)) => {
            features::count(Event::NeverUsed, addr);
            never_used(addr, sc, n)
        }
        None => failover(base, slab, sc),
    }
}

/// The thread is about to touch new memory of (slab, size class). Before
/// that, look for freed slots, whose memory is likely resident: in the same
/// size class on the other slabs that threads have used, then, for large
/// slots, of classes up to [`BORROW_UP`] times its size.
///
/// Slabs nobody owns come first: their freed slots (on their shared lists
/// and their private lists) are nobody's working set. For small slots the
/// thread moves there, owning the slab (an owner gives up its old one, and
/// then skips them for [`home_slab::SETTLE_MS`]); a thread that must not
/// own moves there without. Large slots are borrowed
/// (one slot; from a private list under a short claim). From a slab that a
/// live thread owns only single slots of its shared list are borrowed; a
/// thread without a slab moves there for small slots. Why, measured:
/// docs/decisions.md ("Reusing freed slots before new memory").
#[cold]
#[inline(never)]
fn find_freed(base: usize, slab: usize, sc: u32) -> Option<Slot> {
    let t = features::ticks();
    let got = find_freed_inner(base, slab, sc);
    let at = layout::slab_addr(base, slab);
    features::count_n(Event::SearchTicks, at, features::ticks().wrapping_sub(t));
    if let Some(got) = got {
        home_slab::set_search_hint(layout::slab_of(got.ptr.addr()));
    }
    got
}

/// The body of [`find_freed`].
#[inline(always)]
fn find_freed_inner(base: usize, slab: usize, sc: u32) -> Option<Slot> {
    let own = layout::slab_addr(base, slab);
    features::count(Event::NewMemory, own);
    let others = occupancy::ever_used() & !(1 << slab);
    let unowned = others & ownership::unowned();
    let small = sc < LARGE_SC;
    let owned = home_slab::owned();
    let owns_slab = is_owner(owned) && home_slab::owned_slab(owned) == own;
    // From where the last search succeeded: where freed slots were is where
    // they likely are again, and each slab looked at costs a cache miss.
    let hint = home_slab::search_hint();
    // An owner that just moved here leaves the other slabs nobody owns
    // alone: their freed slots would move it on again, away from its own.
    let settled = small && owns_slab && home_slab::settling(slab);
    // For large slots, only the slabs whose lists may hold one.
    let may_hold = if small {
        !0
    } else {
        large_freed::candidates(sc)
    };
    for s in slabs_from(if settled { 0 } else { unowned & may_hold }, hint) {
        let addr = layout::slab_addr(base, s);
        if !small {
            // Its shared list (one compare-and-swap on the slab's own line)
            // before its private list (a claim and a release of the owned
            // set, which every thread uses).
            if let Some(got) = try_shared(addr, sc).or_else(|| borrow_private(base, s, sc)) {
                features::count(Event::FreedUnowned, own);
                return Some(got);
            }
            large_freed::found_none(base, s, sc);
            continue;
        } else if home_slab::may_own(home_slab::current())
            && has_freed(addr, sc)
            && ownership::claim(s)
        {
            features::count(Event::FreedUnowned, own);
            home_slab::become_owner(base, s);
            home_slab::settle(s);
            let got = owner_take(addr, sc).or_else(|| owner_claim_step(addr, sc));
            return Some(got.unwrap_or_else(|| failover(base, s, sc)));
        }
        if let Some(got) = try_shared(addr, sc) {
            features::count(Event::FreedUnowned, own);
            if small && follows_freed_slots() {
                home_slab::move_to(base, s);
            }
            return Some(got);
        }
    }
    for s in slabs_from(others & !unowned & may_hold, hint) {
        if let Some(got) = try_shared(layout::slab_addr(base, s), sc) {
            features::count(Event::FreedOwned, own);
            if small && follows_freed_slots() {
                home_slab::move_to(base, s);
            }
            return Some(got);
        }
        if !small {
            large_freed::found_none(base, s, sc);
        }
    }
    if !small {
        let size = layout::slot_size(sc);
        let larger = (sc + 1..=MAX_SC).take_while(|&up| layout::slot_size(up) <= BORROW_UP * size);
        for up in larger.filter(|&up| layout::keeps_alignment(sc, up)) {
            if owns_slab {
                if let Some(got) = owner_take_large(own, up) {
                    features::count(Event::FreedLarger, own);
                    return Some(got);
                }
            }
            let may_hold = large_freed::candidates(up);
            for s in core::iter::once(slab).chain(slabs_in(others & may_hold)) {
                if let Some(got) = try_shared(layout::slab_addr(base, s), up) {
                    features::count(Event::FreedLarger, own);
                    return Some(got);
                }
                if s != slab {
                    large_freed::found_none(base, s, up);
                }
            }
        }
    }
    None
}

/// Whether the calling thread, on finding freed small slots on another slab,
/// moves there: a thread that owns no slab but may own one (a thread beyond
/// the slabs' count), not a pinned or exiting one.
fn follows_freed_slots() -> bool {
    !is_owner(home_slab::owned()) && home_slab::may_own(home_slab::current())
}

/// A large request whose own list holds no freed slot takes a freed slot of
/// a class up to this many times its size, if one is there, before it
/// touches a never-used slot.
const BORROW_UP: usize = 4;

/// Whether (slab, size class) seems to hold freed slots, on its shared list
/// or its private list.
fn has_freed(slab_addr: usize, sc: u32) -> bool {
    // Relaxed: hints; whoever then takes a slot synchronizes.
    shared(slab_addr, sc).flh.load(Ordering::Relaxed) as u32 != 0
        || tables(metadata::private_block(slab_addr))
            .head(private_index(sc))
            .load(Ordering::Relaxed)
            != 0
}

/// The slabs in the bit set `set`, lowest first.
fn slabs_in(mut set: usize) -> impl Iterator<Item = usize> {
    core::iter::from_fn(move || {
        let s = (set != 0).then(|| set.trailing_zeros() as usize)?;
        set &= set - 1;
        Some(s)
    })
}

/// The slabs in the bit set `set`, from slab `first` on, round the slabs.
fn slabs_from(set: usize, first: usize) -> impl Iterator<Item = usize> {
    let high = set & !((1 << first) - 1);
    slabs_in(high).chain(slabs_in(set & !high))
}

/// One pop from the shared list of (slab, size class) if it seems to hold
/// a slot.
fn try_shared(slab_addr: usize, sc: u32) -> Option<Slot> {
    let flh = &shared(slab_addr, sc).flh;
    // Relaxed: a hint; the pop that may follow does its own synchronization.
    if flh.load(Ordering::Relaxed) as u32 == 0 {
        return None;
    }
    let links = SharedLinks {
        region: layout::region_addr(slab_addr, sc),
    };
    match free_list::pop(flh, &links) {
        Pop::Slot(link) => Some(slot(slab_addr, sc, link, false)),
        _ => None,
    }
}

/// One slot of (slab, size class) from any of its lists or its tail, for a
/// thread that does not own the slab: the shared list, then, if nobody owns
/// the slab, its private list (under a short claim), then one never-used
/// slot. `None` with `collided` set when a pop collided.
fn take_any(base: usize, s: usize, sc: u32, collided: &mut bool) -> Option<Slot> {
    let addr = layout::slab_addr(base, s);
    let links = SharedLinks {
        region: layout::region_addr(addr, sc),
    };
    match free_list::pop(&shared(addr, sc).flh, &links) {
        Pop::Slot(link) => return Some(slot(addr, sc, link, false)),
        Pop::Collision { .. } => *collided = true,
        Pop::Empty => {}
    }
    if let Some(got) = borrow_private(base, s, sc) {
        return Some(got);
    }
    let (n, _) = claim_tail(addr, sc, false)?;
    // New memory of a slab the thread may not live on (an owner failing
    // over stays on its own): the sweeps and statistics read used slabs only.
    occupancy::note_used(s);
    Some(never_used(addr, sc, n))
}

/// One slot of `sc` from the private list of slab `s` if nobody owns it,
/// taken under a short claim of the slab.
fn borrow_private(base: usize, s: usize, sc: u32) -> Option<Slot> {
    let addr = layout::slab_addr(base, s);
    let block = metadata::private_block(addr);
    let head = if sc < LARGE_SC {
        tables(block).head(private_index(sc))
    } else {
        tables(block).large_head(sc)
    };
    // Relaxed: a hint; the claim synchronizes.
    if ownership::unowned() & (1 << s) == 0 || head.load(Ordering::Relaxed) == 0 {
        return None;
    }
    if !ownership::claim(s) {
        return None;
    }
    let got = if sc < LARGE_SC {
        let links = RegionLinks {
            region: layout::region_addr(addr, sc),
        };
        // SAFETY: we own the slab until the release below.
        unsafe { private_list::pop(head, &links) }.map(|link| slot(addr, sc, link, false))
    } else {
        owner_take_large(addr, sc)
    };
    // Relaxed: ours until the release.
    let rest = head.load(Ordering::Relaxed);
    ownership::release(s);
    if sc >= LARGE_SC {
        large_freed::released_with(addr, sc, rest);
    }
    got
}

/// The thread's slab was used up or contended for `sc`: try the other
/// slabs, then the larger size classes. A thread that owns no slab moves to
/// where it succeeded; an owner keeps its slab.
#[cold]
#[inline(never)]
fn failover(base: usize, slab: usize, sc: u32) -> Slot {
    features::count(Event::Failover, layout::slab_addr(base, slab));
    let owned = home_slab::owned();
    let owned_slab = is_owner(owned).then(|| home_slab::owned_slab(owned));
    // On the first pass over `sc`, try the thread's own slab last: it just
    // failed.
    let mut first = slab + 1;
    // Not into slots larger than new blocks get (on demand, the commit
    // would count all of it).
    let classes = sc..=geometry::largest_sc().max(sc);
    for want in classes.filter(|&up| layout::keeps_alignment(sc, up)) {
        loop {
            let mut collided = false;
            for i in 0..THREAD_SLABS {
                let s = (first + i) % THREAD_SLABS;
                let addr = layout::slab_addr(base, s);
                let got = if Some(addr) == owned_slab && want < LARGE_SC {
                    owner_take(addr, want).or_else(|| owner_claim_step(addr, want))
                } else if Some(addr) == owned_slab {
                    owner_take_large(addr, want).or_else(|| take_any(base, s, want, &mut collided))
                } else {
                    take_any(base, s, want, &mut collided)
                };
                if let Some(got) = got {
                    if want != sc {
                        features::count(Event::FailoverLarger, addr);
                    }
                    if owned_slab.is_none() && s != slab && !stays_home(slab) {
                        home_slab::move_to(base, s);
                    }
                    return got;
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
    Slot::NONE
}

/// Whether a thread without a slab of its own stays on `slab`, claimed or
/// failed over from: one that may own it and lives there alone (the claim,
/// the collision or the full region was a sweep's, not another thread
/// living there; it claims the slab once free, as an owner keeps its slab).
fn stays_home(slab: usize) -> bool {
    home_slab::may_own(home_slab::current()) && occupancy::alone(slab)
}

/// [`hot_path::dealloc`](crate::hot_path::dealloc) of a slot that is not a small
/// slot of the thread's owned slab: a large slot of that slab onto its
/// private list while [`keeps_large`] allows, anything else onto its slab's
/// shared list. From [`purge::RELEASE_SC`] on, its pages go back to the
/// kernel first.
///
/// # Safety
/// `p` is the start of a slot handed out by the allocator and not freed
/// since.
#[inline(never)]
pub unsafe fn dealloc(p: *mut u8) {
    // A feature may hold `p` (memcheck's quarantine) and free another.
    let Some(p) = features::freeing(p) else {
        return;
    };
    let addr = p.addr();
    let sc = layout::sc_of(addr);
    let cell = SlotLink::freed(addr, sc);
    debug_assert!(
        (layout::MIN_SC..=MAX_SC).contains(&sc),
        "not a slot: {addr:#x}"
    );
    debug_assert!(layout::is_slot_start(addr, sc), "not the start of a slot");
    if features::freed(addr, sc) {
        return;
    }
    // SAFETY: the caller owns the slot.
    if unsafe { owner_keeps(addr, sc, &cell) } {
        return;
    }
    if !held::hold(addr, sc) {
        // SAFETY: the caller owns the slot; it is on no list.
        unsafe { dealloc_shared(addr, sc, cell) }
    }
}

/// Sends the free slot at `addr`, of size class `sc`, held by the caller
/// ([`held`]), to its shared list.
///
/// # Safety
/// The slot is free, on no list, and the caller holds it.
pub unsafe fn push_home(addr: usize, sc: u32) {
    // SAFETY: per the contract.
    unsafe { dealloc_shared(addr, sc, SlotLink::of(addr)) }
}

/// [`push_home`] without the purge's tick: for emptying held slots from
/// inside a sweep or a `fork` child's handler, which must not start one.
///
/// # Safety
/// As [`push_home`]; `sc` is a small size class.
pub unsafe fn push_home_quiet(addr: usize, sc: u32) {
    debug_assert!(sc < LARGE_SC);
    // SAFETY: the caller holds the free slot, which belongs to this flh's
    // region; its link cell is its first four bytes.
    unsafe {
        free_list::push(
            &shared(layout::slab_addr_of(addr), sc).flh,
            &SlotLink::of(addr),
            layout::link_of(addr),
        );
    }
}

/// [`dealloc`] of a capped or large slot (below the release size) of the
/// slab the thread owns: onto its private list while under the cap.
/// Returns whether it did. Apart from the shared push, which saves
/// registers this path does not need.
///
/// # Safety
/// The caller owns the slot at `addr`, of size class `sc`, whose link
/// `cell` is.
#[inline(always)]
unsafe fn owner_keeps(addr: usize, sc: u32, cell: &SlotLink) -> bool {
    if sc < layout::CAPPED_SC {
        return false;
    }
    let owned = home_slab::owned();
    let slab_addr = layout::slab_addr_of(addr);
    if !is_owner(owned) || slab_addr != home_slab::owned_slab(owned) {
        return false;
    }
    let kept = if capped::applies(sc) {
        // SAFETY: the thread owns the slab; the caller owns the slot.
        unsafe { capped::owner_free(slab_addr, sc, addr, cell) }
    } else {
        let block = metadata::private_block(slab_addr);
        let count = tables(block).large_count(sc);
        // Relaxed: only the owner touches the count (see private_list).
        let n = count.load(Ordering::Relaxed);
        if !keeps_large(sc, n) {
            // SAFETY: the caller owns the slot and the thread the slab.
            unsafe { keep_lower_or_share(addr, sc) };
            return true;
        }
        // SAFETY: the caller owns the slot and the thread the slab; the
        // slot belongs to this list's region.
        unsafe { private_list::push(tables(block).large_head(sc), cell, layout::link_of(addr)) };
        count.store(n + 1, Ordering::Relaxed);
        true
    };
    if kept {
        purge::owner_tick(slab_addr);
        purge::cold_tick_freed();
    }
    kept
}

/// [`owner_keeps`] of a large slot at `addr` when the owner's private list
/// of its class is full: the slot goes to the shared list, unless the
/// private list's first slot lies above it; then the freed slot takes its
/// place and the first goes instead. So the lowest freed slot is taken
/// first, and buffers that live together take the same slots each time,
/// not each other's, whose pages other uses touched further
/// (docs/decisions.md, "The lower freed large slot first").
///
/// # Safety
/// The thread owns the slot's slab; the caller owns the slot, which is on
/// no list.
#[inline(never)]
unsafe fn keep_lower_or_share(addr: usize, sc: u32) {
    let slab_addr = layout::slab_addr_of(addr);
    let head = tables(metadata::private_block(slab_addr)).large_head(sc);
    let link = layout::link_of(addr);
    // Link cells made here: a reference passed in would give every cold
    // free a stack frame.
    let first = private_list::HeadCell::get(head);
    let up = if first > link {
        let links = RegionLinks {
            region: layout::region_addr(slab_addr, sc),
        };
        // SAFETY: the thread owns the slab; the links are its region's. The
        // caller owns the freed slot, of this region.
        unsafe {
            private_list::pop(head, &links);
            private_list::push(head, &SlotLink::of(addr), link);
        }
        purge::owner_tick(slab_addr);
        slot(slab_addr, sc, first, false).ptr.addr()
    } else {
        addr
    };
    // SAFETY: the caller owned the slot at `addr`; the one at `up` is it or
    // left the private list: the thread owns it, free and on no list.
    unsafe { dealloc_large_shared(up, sc, SlotLink::of(up)) };
}

/// [`dealloc`] onto the shared list of the slot's (slab, size class); from
/// the release size on, after giving its pages but the first back.
///
/// # Safety
/// The caller owns the slot at `addr`, of size class `sc`, whose link
/// `cell` is; it is on no list.
#[inline(never)]
unsafe fn dealloc_shared(addr: usize, sc: u32, cell: SlotLink) {
    if layout::is_large(addr) {
        // SAFETY: per the contract.
        return unsafe { dealloc_large_shared(addr, sc, cell) };
    }
    // SAFETY: per the contract.
    unsafe { push_shared(addr, sc, &cell) };
    purge::cold_tick_freed();
}

/// [`dealloc_shared`] of a large slot: out of line, so that the frees of
/// small slots save no registers.
///
/// # Safety
/// As [`dealloc_shared`]; the slot is large.
#[cold]
#[inline(never)]
unsafe fn dealloc_large_shared(addr: usize, sc: u32, cell: SlotLink) {
    // SAFETY: the caller owns the slot; it is not pushed yet.
    let p = unsafe {
        purge::before_push(addr, sc);
        shrink::freeing(addr, sc);
        push_shared(addr, sc, &cell)
    };
    large_freed::pushed(layout::slab_of(addr), sc, p.onto_empty);
    purge::cold_tick_freed();
}

/// Pushes the slot at `addr` onto its shared list.
///
/// # Safety
/// As [`dealloc_shared`].
#[inline(always)]
unsafe fn push_shared(addr: usize, sc: u32, cell: &SlotLink) -> free_list::Pushed {
    // SAFETY: the caller owns the slot, which belongs to this flh's region;
    // its first four bytes (slots are at least 4 bytes, naturally aligned)
    // are its link cell while it is free, always accessed atomically.
    unsafe {
        free_list::push(
            &shared(layout::slab_addr_of(addr), sc).flh,
            cell,
            layout::link_of(addr),
        )
    }
}

#[cfg(test)]
mod tests {
    use core::alloc::{GlobalAlloc, Layout};
    use std::vec::Vec;

    use crate::Smalloc;
    use crate::layout::{MIN_SC, sc_of, size_class, slab_of, slot_addr, slot_size};

    #[test]
    fn fresh_slab_yields_slots_in_order() {
        let a = Smalloc::new();
        let l = Layout::from_size_align(48, 8).unwrap();
        let sc = size_class(48, 8);
        assert_eq!(slot_size(sc), 48);
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        let ps: Vec<usize> = (0..100).map(|_| unsafe { a.alloc(l) }.addr()).collect();
        let base = crate::geometry::base_raw();
        assert!(crate::geometry::is_ready(base));
        let slab = slab_of(ps[0]);
        for (i, &p) in ps.iter().enumerate() {
            assert_eq!(p, slot_addr(base, slab, sc, i as u32), "allocation {i}");
        }
        // Freed slots come back last-in first-out.
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        unsafe {
            a.dealloc(ps[10] as *mut u8, l);
            a.dealloc(ps[20] as *mut u8, l);
        }
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        assert_eq!(unsafe { a.alloc(l) }.addr(), ps[20]);
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        assert_eq!(unsafe { a.alloc(l) }.addr(), ps[10]);
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        assert_eq!(unsafe { a.alloc(l) }.addr(), slot_addr(base, slab, sc, 100));
    }

    #[test]
    fn the_smallest_slots_pack_tightly() {
        // 4- and 8-byte slots, or 16 bytes for both in the secure mode (a link
        // and its check).
        let a = Smalloc::new();
        for (size, sc) in [(1, MIN_SC), (8, MIN_SC.max(3))] {
            let l = Layout::from_size_align(size, size).unwrap();
            // SAFETY: a non-zero layout; the blocks stay live.
            let (p, q) = unsafe { (a.alloc(l).addr(), a.alloc(l).addr()) };
            assert_eq!(sc_of(p), sc);
            assert_eq!(q.abs_diff(p), slot_size(sc));
        }
    }
}
