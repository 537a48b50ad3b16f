//! Giving the memory of freed slots back to the kernel without being asked
//! (the *purge*), and on request (`malloc_trim`, [`trim`](crate::trim)).
//!
//! A *sweep* goes over the shared list of every (slab, size class). A list
//! that has not changed for a whole purge delay (its flh word the same at
//! two sweeps) is taken whole and:
//!
//! * if it holds every slot the region ever handed out (its length equals
//!   the never-used tail), the region is *reset*: all its pages go back to
//!   the kernel and its tail to 0, so its slots are never-used again (zero,
//!   handed out as fresh, not cleared by `calloc`);
//! * otherwise, in a small size class, the spans all of whose slots are on
//!   it go back ([`spans`](crate::spans)), their slots off the list; then
//!   each slot of at least two pages left gives back its pages past the
//!   first (which keeps its link), and the list is put back.
//!
//! A list is swept once until it changes again. Private lists are only ever
//! touched by their slab's owner: an owner hands its private lists and its
//! fresh runs to the shared lists on its first cold path after each sweep
//! ([`owner_tick`]); a sweep does it for the slabs nobody owns (threads
//! that ended) under a claim. A thread hands what it can over at its end
//! ([`hand_over_at_end`]), and its end brings a sweep of its slab forward
//! ([`ended_sweep`]). Whoever runs sweeps: the background thread
//! ([`purger`](crate::purger)) every delay while there is something to
//! sweep (in a process where one thread ever allocated: that thread's cold
//! frees and refills, once a delay has passed), and [`trim`](crate::trim).
//!
//! Slots of at least [`RELEASE_SC`] (128 MiB) give their pages past the
//! first back when freed ([`before_push`]), with no delay.
//!
//! Why this way, measured: docs/decisions.md ("Giving freed memory back").

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::features::links::{SlotLink, follow_link};
use crate::free_list;
use crate::home_slab::{self, is_owner};
use crate::layout::{self, LARGE_SC, MAX_SC, MIN_SC, NUM_SCS, NUM_SLABS};
use crate::metadata::{self, private_index, shared, tables};
use crate::{geometry, idle, occupancy, ownership, pressure, purger, spans, sys, zeroed};

pub use crate::layout::RELEASE_SC;

/// The purge delay (milliseconds) unless `SMALLOC_PURGE_DELAY_MS` or
/// [`set_delay_ms`] says otherwise. Measured: docs/decisions.md.
pub const DEFAULT_DELAY_MS: u32 = 300;

/// [`DELAY_MS`] before the environment was read.
const UNSET: u32 = u32::MAX;

/// The purge delay in milliseconds; 0: never purge.
static DELAY_MS: AtomicU32 = AtomicU32::new(UNSET);

/// The purge delay in milliseconds (0: never), from `SMALLOC_PURGE_DELAY_MS`
/// (read with `secure_getenv`) on first use.
pub fn delay_ms() -> u32 {
    // Relaxed: a setting; nothing else is published with it.
    let d = DELAY_MS.load(Ordering::Relaxed);
    if d != UNSET {
        return d;
    }
    let env = if cfg!(miri) {
        Some(0)
    } else {
        sys::env(c"SMALLOC_PURGE_DELAY_MS").and_then(parse_ms)
    };
    // A `set_delay_ms` meanwhile wins. Relaxed: as above.
    let _ = DELAY_MS.compare_exchange(
        UNSET,
        env.unwrap_or(DEFAULT_DELAY_MS),
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    DELAY_MS.load(Ordering::Relaxed)
}

/// Sets the purge delay (0: never purge).
pub fn set_delay_ms(ms: u32) {
    // Relaxed: as in `delay_ms`.
    DELAY_MS.store(ms.min(UNSET - 1), Ordering::Relaxed);
    purger::wake();
}

/// A decimal number of milliseconds; `None` for anything else.
fn parse_ms(v: &[u8]) -> Option<u32> {
    if v.is_empty() || v.len() > 9 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0, |n, d| n * 10 + u32::from(d - b'0')))
}

/// Sweeps by the background thread (or on cold paths) so far; an owner
/// hands its private lists over once per sweep.
static EPOCH: AtomicU32 = AtomicU32::new(0);

/// Called on the cold path of free: where one thread allocates, a sweep
/// here once a delay has passed since the last; the background thread,
/// where it runs, is woken, or started if it never ran (and may run).
#[inline]
pub fn cold_tick_freed() {
    if !occupancy::many_threads_seen() {
        sweep_if_due();
        // The thread may run beside this one (other threads exist, or the
        // program asked for it): a free wakes it as anywhere else.
        if purger::started() && !purger::runs() {
            purger::wake();
        }
    } else if !purger::runs() {
        cold_tick_slow();
    }
}

/// Called when an owner's private list ran dry: where one thread
/// allocates, a sweep here once a delay has passed (a program with one
/// thread frees its own slots on its hot path, and may never free on a
/// cold one).
#[inline]
pub fn cold_tick_refill() {
    if !occupancy::many_threads_seen() {
        sweep_if_due();
    }
}

/// Whether [`cold_tick_refill`] or [`owner_tick`] has work to do on this
/// thread: no background thread, or a new purge epoch.
#[inline(always)]
pub fn refill_ticks_due() -> bool {
    !occupancy::many_threads_seen() || home_slab::purge_epoch() != epoch()
}

/// [`cold_tick_freed`] when the background thread waits or does not run.
#[cold]
#[inline(never)]
fn cold_tick_slow() {
    if !purger::wake() {
        sweep_if_due();
    }
}

/// Cold frees and refills in a process without the background thread,
/// counted to read the clock only every [`TICKS_PER_CLOCK`]-th.
static TICKS: AtomicU32 = AtomicU32::new(0);

/// See [`TICKS`].
const TICKS_PER_CLOCK: u32 = 8;

/// When the last sweep on a cold path began (milliseconds, coarse
/// monotonic clock).
static LAST_SWEEP_MS: AtomicU64 = AtomicU64::new(0);

/// [`pressure::claimed_ever`] at the last sweep on a cold path.
static CLAIMED_AT_SWEEP: AtomicUsize = AtomicUsize::new(0);

/// New memory claimed since the last sweep after which the next comes
/// sooner: a heap that grows is where freed slots other classes cannot
/// use raise the peak.
const GROWTH: usize = 1 << 20;

/// How much sooner (the delay divided by it).
const GROWING_DIVISOR: u32 = 8;

/// A sweep on this cold path if purging is on, the process has one thread
/// that allocates (with more, the background thread sweeps, or, if the C
/// library refused it, only trims do), and a delay has passed since the
/// last sweep.
#[inline]
fn sweep_if_due() {
    if occupancy::many_threads_seen() || cfg!(miri) {
        return;
    }
    // Relaxed, and not a read-modify-write: one thread counts.
    let n = TICKS.load(Ordering::Relaxed).wrapping_add(1);
    TICKS.store(n, Ordering::Relaxed);
    let delay = delay_ms();
    if n % TICKS_PER_CLOCK != 1 || delay == 0 {
        return;
    }
    let now = sys::coarse_ms();
    let ever = pressure::claimed_ever();
    // Relaxed: only decides when (as the next two).
    let grown = ever.wrapping_sub(CLAIMED_AT_SWEEP.load(Ordering::Relaxed)) >= GROWTH;
    let wait = if grown {
        (delay / GROWING_DIVISOR).max(1)
    } else {
        delay
    };
    if now.wrapping_sub(LAST_SWEEP_MS.load(Ordering::Relaxed)) >= u64::from(wait) {
        LAST_SWEEP_MS.store(now, Ordering::Relaxed);
        CLAIMED_AT_SWEEP.store(ever, Ordering::Relaxed);
        // A process whose other threads never allocated (a server's I/O
        // threads), or that asked for it, has the purge's thread too: when
        // this thread's hot paths alone go on, or it sleeps, it sweeps and
        // nudges (`nudge`) in its stead.
        if !purger::started() && (purger::wanted() || sys::other_threads()) {
            purger::start();
        }
        background_sweep(0);
    }
}

/// Called on the owner's cold paths (a private list run dry, a large slot):
/// the owner of the slab at `slab_addr` hands its private lists to the
/// shared lists once after each sweep (two loads and a compare otherwise:
/// the epoch, and the thread's word that remembers it).
#[inline]
pub fn owner_tick(slab_addr: usize) {
    // Relaxed: the epoch only says when; the lists synchronize.
    let now = EPOCH.load(Ordering::Relaxed);
    if home_slab::purge_epoch() != now & EPOCH_MASK {
        home_slab::set_purge_epoch(now & EPOCH_MASK);
        flush(slab_addr, false);
    }
}

/// The epoch bits a thread word keeps.
pub const EPOCH_MASK: u32 = 0xff_ffff;

/// The current purge epoch, as a thread word keeps it.
#[inline]
pub fn epoch() -> u32 {
    // Relaxed: see `owner_tick`.
    EPOCH.load(Ordering::Relaxed) & EPOCH_MASK
}

/// Hands the private lists of the slab at `slab_addr`, which the caller
/// owns (or has claimed), to its shared lists, so that a sweep sees every
/// freed slot; with `fresh`, its fresh runs too, back to the never-used
/// tails where nobody claimed past them (a sweep needs them there to reset
/// a region). An owner at work keeps its fresh runs: they cost no memory,
/// and a thread without one looks for freed slots on other slabs, and may
/// move there, before it claims new memory.
pub fn flush(slab_addr: usize, fresh: bool) {
    crate::held::send_home(slab_addr);
    let t = tables(metadata::private_block(slab_addr));
    for sc in MIN_SC..LARGE_SC {
        give(slab_addr, sc, t.head(private_index(sc)));
        if !fresh {
            continue;
        }
        let run = t.fresh(sc);
        // Relaxed: only the owner touches its runs; the tail hands out
        // numbers of never-written slots (see `cold_path::claim_tail`).
        let r = run.load(Ordering::Relaxed);
        let (next, end) = (r as u32, (r >> 32) as u32);
        if next < end
            && shared(slab_addr, sc)
                .tail
                .compare_exchange(end, next, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            run.store(0, Ordering::Relaxed);
        }
    }
    for sc in LARGE_SC..=MAX_SC {
        if give(slab_addr, sc, t.large_head(sc)) {
            // Relaxed: the owner's cell.
            t.large_count(sc).store(0, Ordering::Relaxed);
        }
    }
}

/// Slabs whose owner ended since the last sweep of them
/// ([`ended_sweep`]), one bit each.
static ENDED_SLABS: AtomicUsize = AtomicUsize::new(0);

/// At the end of the thread that owns the slab at `slab_addr`: each of its
/// private lists goes to its shared list where that takes one
/// compare-and-swap (the shared list empty), so that a thread that takes
/// the slab over before the next sweep does not keep them from it. The
/// others wait for the sweep, which walks them (not the ending thread).
pub fn hand_over_at_end(slab_addr: usize) {
    if delay_ms() == 0 {
        return;
    }
    let slab = layout::slab_of(slab_addr);
    let t = tables(metadata::private_block(slab_addr));
    for sc in MIN_SC..=MAX_SC {
        let large = sc >= LARGE_SC;
        let head = if large {
            t.large_head(sc)
        } else {
            t.head(private_index(sc))
        };
        // Relaxed: the owner's cell.
        if head.load(Ordering::Relaxed) == 0 {
            // Nothing of it here, and its shared line not worth a miss.
            continue;
        }
        if give_if_empty(slab_addr, sc, head) && large {
            // Relaxed: the owner's cell.
            t.large_count(sc).store(0, Ordering::Relaxed);
        }
        // Relaxed: a hint (a push meanwhile makes it one that never
        // matches).
        let w = shared(slab_addr, sc).flh.load(Ordering::Relaxed);
        record(slab, sc).handed.store(w, Ordering::Relaxed);
    }
    // Relaxed: a hint for the next sweep; the lists synchronize.
    ENDED_SLABS.fetch_or(1 << slab, Ordering::Relaxed);
}

/// Empties the private list at `head` before its chain is pushed, so that
/// a `fork` child that sees the push half done has lost the chain, not got
/// it twice (the compiler fence keeps the order).
fn clear(head: &AtomicU32) {
    // Relaxed: the owner's cell.
    head.store(0, Ordering::Relaxed);
    core::sync::atomic::compiler_fence(Ordering::Release);
}

/// Moves the private list at `head` of (slab, size class), the caller's,
/// onto the shared list whole if that list is empty (one compare-and-swap).
/// Returns whether it did.
fn give_if_empty(slab_addr: usize, sc: u32, head: &AtomicU32) -> bool {
    // Relaxed: the owner's cell.
    let first = head.load(Ordering::Relaxed);
    if first == 0 {
        return false;
    }
    let flh = &shared(slab_addr, sc).flh;
    // Relaxed: the compare-and-swap decides.
    let w = flh.load(Ordering::Relaxed);
    if w as u32 != 0 {
        return false;
    }
    clear(head);
    // SAFETY: the private chain is the owner's, of this region, and ends
    // with link 0.
    if unsafe { free_list::push_chain_if_empty(flh, w, first) } {
        crate::large_freed::pushed(layout::slab_of(slab_addr), sc, true);
        return true;
    }
    // Relaxed: as above.
    head.store(first, Ordering::Relaxed);
    false
}

/// Moves the private list at `head` of (slab, size class), the caller's,
/// onto the shared list whole: with one compare-and-swap when the shared
/// list is empty, else after a walk to its last slot (what the owner freed
/// since its last hand-over). Returns whether it held anything.
fn give(slab_addr: usize, sc: u32, head: &AtomicU32) -> bool {
    if give_if_empty(slab_addr, sc, head) {
        return true;
    }
    // Relaxed: the owner's cell.
    let first = head.load(Ordering::Relaxed);
    if first == 0 {
        return false;
    }
    let flh = &shared(slab_addr, sc).flh;
    // The walk reads links a corrupted one of which stops the secure mode:
    // with the chain still on the private list.
    let region = layout::region_addr(slab_addr, sc);
    let mut last = layout::slot_of_link(region, first);
    loop {
        let next = follow_link(last);
        if next == 0 {
            break;
        }
        last = layout::slot_of_link(region, next);
    }
    clear(head);
    // SAFETY: the chain is the owner's; `last` is its last slot.
    let p = unsafe { free_list::push(flh, &SlotLink::of(last), first) };
    crate::large_freed::pushed(layout::slab_of(slab_addr), sc, p.onto_empty);
    true
}

/// What the purge keeps of a (slab, size class)'s lists. One record per
/// (slab, size class), so that a process on one slab touches one page of
/// them (one table per field touched seven).
#[repr(C)]
struct ListRecord {
    /// What a sweep saw of the shared list: its flh word.
    seen: AtomicU64,
    /// The shared list's flh word when the slab's owner ended with slots on
    /// its private list (after it handed them over where it could): a list
    /// that still reads it is untouched since.
    handed: AtomicU64,
    /// The shared list's flh word as [`release_large`] (or, of a small
    /// class, [`release_unchanged_small`]) last saw it: a list that changed
    /// since is in use, and keeps its pages.
    shared_at_release: AtomicU64,
    /// The same of the owner's private list: of large slots its head and
    /// count, of small ones its head.
    private_at_release: AtomicU64,
    /// What a sweep made of [`seen`](Self::seen): [`QUIET`], [`BACKOFF`],
    /// [`SWEPT`].
    state: AtomicU32,
    /// When [`release_large`] last gave pages of the shared list back
    /// (coarse milliseconds, truncated; 0: not since the list was last
    /// used).
    shared_given_ms: AtomicU32,
    /// The same of the owner's private list of large slots. A pop leaves
    /// that list's head and count as they were after the push before it,
    /// so its use is noted where a slot is taken from it ([`large_taken`]).
    private_given_ms: AtomicU32,
}

/// Every [`ListRecord`], a slab's in a row; page-aligned so that slab 0's
/// (the size classes up to [`MAX_SC`], 73 of 48 bytes) fit in one page.
#[repr(C, align(4096))]
struct ListRecords([[ListRecord; NUM_SCS]; NUM_SLABS]);

// The record's point: slab 0's records of every size class on one page.
const _: () = assert!((MAX_SC as usize + 1) * size_of::<ListRecord>() <= 4096);

static RECORDS: ListRecords = ListRecords(
    [const {
        [const {
            ListRecord {
                seen: AtomicU64::new(0),
                handed: AtomicU64::new(0),
                shared_at_release: AtomicU64::new(0),
                private_at_release: AtomicU64::new(0),
                state: AtomicU32::new(0),
                shared_given_ms: AtomicU32::new(0),
                private_given_ms: AtomicU32::new(0),
            }
        }; NUM_SCS]
    }; NUM_SLABS],
);

/// The record of (slab, size class) (indices reduced, so no bounds check
/// and no panic is on any allocation path).
#[inline]
fn record(slab: usize, sc: u32) -> &'static ListRecord {
    &RECORDS.0[slab % NUM_SLABS][sc as usize % NUM_SCS]
}

/// In a [`state`](ListRecord::state) word: sweeps that found the list unchanged (bits 0-7).
const QUIET: u32 = 0xff;
/// In a [`state`](ListRecord::state) word: the list is swept once it was quiet for `1 << b`
/// sweeps, `b` here (bits 8-11): raised each time the list is used again
/// after a sweep gave its memory back, so that memory a program keeps
/// coming back to is not given back and faulted in again every delay.
const BACKOFF: u32 = 0xf00;
/// In a [`state`](ListRecord::state) word: the list was swept and has not changed since.
const SWEPT: u32 = 1 << 16;
/// The largest backoff: a list used again after every sweep is swept after
/// 32 delays of quiet (3.2 s by default).
const MAX_BACKOFF: u32 = 5;

/// Resident bytes given back by sweeps, ever.
static PURGED_BYTES: AtomicU64 = AtomicU64::new(0);

/// Regions reset by sweeps, ever.
static RESETS: AtomicU64 = AtomicU64::new(0);

/// Resident bytes given back by sweeps and the regions reset, ever.
pub fn purged() -> (u64, u64) {
    // Relaxed: statistics.
    (
        PURGED_BYTES.load(Ordering::Relaxed),
        RESETS.load(Ordering::Relaxed),
    )
}

/// One sweep at a time (the [`ListRecord`]s), and none across a `fork`.
static SWEEPING: AtomicBool = AtomicBool::new(false);

/// Threads about to fork: sweeps stop between lists.
pub static FORKING: AtomicUsize = AtomicUsize::new(0);

/// Takes the sweep lock, waiting for a sweep in progress (and going before
/// the next statistics snapshot).
pub fn lock() {
    lock_for_sweep(u64::MAX);
}

/// Takes the sweep lock if it is free.
pub fn try_lock() -> bool {
    // Acquire: as in `lock`.
    !SWEEPING.swap(true, Ordering::Acquire)
}

/// Takes the sweep lock, waiting at most about `ms` milliseconds for a
/// sweep in progress; false (not taken) if it is still held then.
fn lock_within(ms: u64) -> bool {
    if try_lock() {
        return true;
    }
    let start = sys::coarse_ms();
    while sys::coarse_ms().wrapping_sub(start) < ms {
        sys::yield_now();
        if try_lock() {
            return true;
        }
    }
    false
}

/// Sweeps and trims waiting for the sweep lock: snapshots let them go
/// first, or snapshots taken back to back would keep them out.
static SWEEPS_WAITING: AtomicUsize = AtomicUsize::new(0);

/// [`lock_within`] for a sweep, which statistics snapshots let go first.
fn lock_for_sweep(ms: u64) -> bool {
    if try_lock() {
        return true;
    }
    if ms == 0 {
        return false;
    }
    // Relaxed: a hint to snapshots; the lock synchronizes.
    SWEEPS_WAITING.fetch_add(1, Ordering::Relaxed);
    let taken = lock_within(ms);
    // Relaxed: as above.
    SWEEPS_WAITING.fetch_sub(1, Ordering::Relaxed);
    taken
}

/// [`lock_within`] for a statistics snapshot: after a sweep that waits.
pub fn lock_for_snapshot(ms: u64) -> bool {
    let start = sys::coarse_ms();
    let waited = || sys::coarse_ms().wrapping_sub(start);
    // Relaxed: as in `lock_for_sweep`.
    while SWEEPS_WAITING.load(Ordering::Relaxed) != 0 && waited() < ms {
        sys::yield_now();
    }
    lock_within(ms.saturating_sub(waited()))
}

/// Gives the sweep lock back.
pub fn unlock() {
    // Release: publishes the table to the next sweep.
    SWEEPING.store(false, Ordering::Release);
}

/// What a sweep did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Swept {
    /// Resident bytes given back.
    pub released: usize,
    /// Whether some list changed since the last sweep (the next one may
    /// find it quiet).
    pub pending: bool,
}

/// Sweeps (the caller holds the lock): lists quiet since the last sweep,
/// or with `force` every list; largest size classes first, until about
/// `budget` resident bytes were given back. Safe while other threads
/// allocate and free.
pub fn sweep(force: bool, budget: usize) -> Swept {
    // The slots threads without a slab hold go home first: a sweep may then
    // give their pages back with the rest.
    crate::guest::send_home_all();
    sweep_slabs(force, budget, false)
}

/// [`sweep`] of every slab in use, or, with `ended_only`, of the slabs
/// whose owner ended only ([`ended_sweep`]).
fn sweep_slabs(force: bool, budget: usize, ended_only: bool) -> Swept {
    let mut out = Swept::default();
    let Some(base) = geometry::base() else {
        return out;
    };
    let owned = home_slab::owned();
    let mine = is_owner(owned).then(|| layout::slab_of(home_slab::owned_slab(owned)));
    let used = occupancy::ever_used() | layout::RESERVED_SLABS;
    // Relaxed: a hint; the lists synchronize.
    let ended = if ended_only {
        ENDED_SLABS.swap(0, Ordering::Relaxed)
    } else {
        0
    };
    for slab in (0..NUM_SLABS).filter(|i| used & (1 << i) != 0) {
        let slab_addr = layout::slab_addr(base, slab);
        let bit = 1 << slab;
        if mine == Some(slab) && !ended_only {
            // A trim's caller, and the one thread of a process without the
            // background thread, give up their fresh runs too (a region
            // the thread stopped using can then be reset); an owner's
            // sweep on a cold free beside the background thread does not.
            flush(
                slab_addr,
                force || !purger::runs() || !occupancy::many_threads_seen(),
            );
        } else if ownership::unowned() & bit != 0 && ownership::claim(slab) {
            flush(slab_addr, true);
            ownership::release(slab);
            if ended_only {
                sweep_what_ended_left(slab_addr, slab, false, &mut out);
            } else {
                ended_is_seen(slab_addr, slab);
            }
        } else if ended & bit != 0 {
            // Taken over since its thread ended: its shared lists hold
            // what that thread handed over at its end.
            sweep_what_ended_left(slab_addr, slab, true, &mut out);
        }
    }
    if ended_only {
        return out;
    }
    for sc in (MIN_SC..=MAX_SC).rev() {
        for slab in (0..NUM_SLABS).filter(|i| used & (1 << i) != 0) {
            // Relaxed: a request to stop early; the fork handler waits for
            // the lock anyway.
            if out.released >= budget || FORKING.load(Ordering::Relaxed) != 0 {
                return out;
            }
            sweep_list(layout::slab_addr(base, slab), slab, sc, force, &mut out);
        }
    }
    out
}

/// Sweeps the shared list of (slab, size class) if it is quiet (or with
/// `force`), adding to `out`.
fn sweep_list(slab_addr: usize, slab: usize, sc: u32, force: bool, out: &mut Swept) {
    let line = shared(slab_addr, sc);
    let (seen, state) = (&record(slab, sc).seen, &record(slab, sc).state);
    // Relaxed: a first look; `take_all` synchronizes. The tables are ours
    // under the lock.
    let w = line.flh.load(Ordering::Relaxed);
    let mut st = state.load(Ordering::Relaxed);
    if w != seen.load(Ordering::Relaxed) {
        st = note_change(slab, sc, w);
        out.pending |= w as u32 != 0;
        if !force {
            if w as u32 != 0 && idle_passes() && idle::applies(sc) && !idle::waits(slab, sc) {
                idle_pass(slab_addr, sc, seen, out);
            }
            return;
        }
    }
    if w as u32 == 0 || st & SWEPT != 0 {
        return;
    }
    let backoff = (st & BACKOFF) >> 8;
    let quiet = (st & QUIET) + 1;
    if !force && quiet < 1 << backoff {
        state.store((st & !QUIET) | quiet, Ordering::Relaxed);
        out.pending = true;
        return;
    }
    let first = free_list::take_all(&line.flh);
    if first == 0 {
        return;
    }
    let region = layout::region_addr(slab_addr, sc);
    // Relaxed: the tail hands out slot numbers only (see `claim_tail`).
    let tail = line.tail.load(Ordering::Relaxed);
    // Count the chain (bounded by the tail: a corrupted chain ends there).
    let (mut n, mut last, mut link) = (0u32, 0, first);
    while link != 0 && n <= tail {
        last = layout::slot_of_link(region, link);
        n += 1;
        // The take's Acquire ordered the pushes before us.
        link = follow_link(last);
    }
    let swept = (st & BACKOFF) | SWEPT;
    if n == tail && reset(slab_addr, sc, tail, out) {
        // Relaxed: the tables are ours under the lock.
        seen.store(line.flh.load(Ordering::Relaxed), Ordering::Relaxed);
        state.store(swept, Ordering::Relaxed);
        return;
    }
    let (mut first, mut last, mut n) = (first, last, n);
    if let Some(left) = spans::give_back(slab_addr, sc, first, n, tail) {
        out.released += left.released;
        // Relaxed: statistics.
        PURGED_BYTES.fetch_add(left.released as u64, Ordering::Relaxed);
        if left.first == 0 {
            // Every slot went back with its span: nothing to put back.
            // Relaxed: ours under the lock.
            seen.store(line.flh.load(Ordering::Relaxed), Ordering::Relaxed);
            state.store(swept, Ordering::Relaxed);
            return;
        }
        (first, last, n) = (left.first, left.last, left.n);
    }
    let page = sys::page_size();
    if layout::slot_size(sc) >= 2 * page && sc < RELEASE_SC {
        let mut link = first;
        for _ in 0..n {
            if link == 0 {
                break;
            }
            let slot = layout::slot_of_link(region, link);
            link = follow_link(slot);
            out.released += release_slot(slot, sc);
        }
    }
    // SAFETY: the chain was on this list; we took it and hold it whole;
    // `last` is the last slot we walked to.
    let p = unsafe { free_list::push(&line.flh, &SlotLink::of(last), first) };
    crate::large_freed::pushed(slab, sc, p.onto_empty);
    // Relaxed: ours under the lock.
    seen.store(p.now, Ordering::Relaxed);
    state.store(swept, Ordering::Relaxed);
}

/// What a thread that ended freed is idle: what its slab's shared lists
/// hold counts as seen, so that this sweep can take it.
fn ended_is_seen(slab_addr: usize, slab: usize) {
    for sc in MIN_SC..=MAX_SC {
        // Relaxed: a first look; the tables are ours under the lock.
        let w = shared(slab_addr, sc).flh.load(Ordering::Relaxed);
        if w != record(slab, sc).seen.load(Ordering::Relaxed) {
            note_change(slab, sc, w);
        }
    }
}

/// In a sweep of the slabs whose owner ended: each shared list that changed
/// since the last sweep (what the thread freed) counts as seen, and goes
/// back now unless it was used again after an earlier sweep gave its
/// memory back (a program that replaces its threads keeps it: the later
/// sweeps decide, by its backoff). Lists that did not change wait for the
/// sweeps every delay: a sweep per thread's end must not count as quiet
/// time. In a slab another thread `taken_over`, only the lists untouched
/// since the ended thread handed them over: the new owner takes its
/// shared lists whole when it needs them, and would find one the sweep
/// holds empty and take new memory instead.
fn sweep_what_ended_left(slab_addr: usize, slab: usize, taken_over: bool, out: &mut Swept) {
    for sc in (MIN_SC..=MAX_SC).rev() {
        // Relaxed: a request to stop early, as in `sweep`.
        if FORKING.load(Ordering::Relaxed) != 0 {
            return;
        }
        // Relaxed: a first look; the records are ours under the lock (and
        // `handed` a hint).
        let w = shared(slab_addr, sc).flh.load(Ordering::Relaxed);
        if w == record(slab, sc).seen.load(Ordering::Relaxed)
            || taken_over && w != record(slab, sc).handed.load(Ordering::Relaxed)
        {
            continue;
        }
        if note_change(slab, sc, w) & BACKOFF == 0 {
            sweep_list(slab_addr, slab, sc, false, out);
        } else {
            out.pending = true;
        }
    }
}

/// Notes that the shared list of (slab, size class) reads `w`, not what the
/// last sweep saw: its quiet count starts again, and a list used again
/// after a sweep gave its memory back waits twice as long for the next.
/// Returns the list's state word (the caller holds the lock).
fn note_change(slab: usize, sc: u32, w: u64) -> u32 {
    let (seen, state) = (&record(slab, sc).seen, &record(slab, sc).state);
    // Relaxed: ours under the lock.
    seen.store(w, Ordering::Relaxed);
    let mut st = state.load(Ordering::Relaxed) & !QUIET;
    if w as u32 != 0 && st & SWEPT != 0 {
        let backoff = (((st & BACKOFF) >> 8) + 1).min(MAX_BACKOFF);
        st = (st & !(SWEPT | BACKOFF)) | backoff << 8;
    }
    // Relaxed: as above.
    state.store(st, Ordering::Relaxed);
    st
}

/// Whether sweeps of lists in use give back their idle slots
/// ([`idle`]): where the sweeping thread is the only one that allocates.
fn idle_passes() -> bool {
    !occupancy::many_threads_seen() && is_owner(home_slab::owned())
}

/// Takes the shared list of (slab, size class) whole and puts back what
/// [`idle::pass`] leaves of it, noting the list as `seen` after that.
fn idle_pass(slab_addr: usize, sc: u32, seen: &AtomicU64, out: &mut Swept) {
    let line = shared(slab_addr, sc);
    let first = free_list::take_all(&line.flh);
    if first == 0 {
        return;
    }
    // Relaxed: the tail hands out slot numbers only (see `claim_tail`).
    let tail = line.tail.load(Ordering::Relaxed);
    let kept = idle::pass(slab_addr, sc, first, tail);
    out.released += kept.released;
    // Relaxed: statistics.
    PURGED_BYTES.fetch_add(kept.spans_released as u64, Ordering::Relaxed);
    let now = if kept.first == 0 {
        line.flh.load(Ordering::Relaxed)
    } else {
        // SAFETY: the chain was on this list; we took it and hold it whole;
        // `last` is its last slot.
        let p = unsafe { free_list::push(&line.flh, &SlotLink::of(kept.last), kept.first) };
        crate::large_freed::pushed(layout::slab_of(slab_addr), sc, p.onto_empty);
        p.now
    };
    // Relaxed: ours under the lock.
    seen.store(now, Ordering::Relaxed);
}

/// Resets (slab, size class), whose `tail` slots the caller holds, every
/// one of them (its whole shared list, nothing private, no fresh run):
/// gives back every page below the tail and makes the tail 0. False, and
/// nothing done, if a thread claimed from the tail meanwhile.
fn reset(slab_addr: usize, sc: u32, tail: u32, out: &mut Swept) -> bool {
    let line = shared(slab_addr, sc);
    // While the tail says "used up", nobody claims a slot of the region
    // (claimers fail over); Relaxed: slot numbers only.
    if line
        .tail
        .compare_exchange(
            tail,
            layout::num_slots(sc),
            Ordering::Relaxed,
            Ordering::Relaxed,
        )
        .is_err()
    {
        return false;
    }
    let region = layout::region_addr(slab_addr, sc);
    // The rest of the last page was never handed out.
    let len = layout::slots_end(sc, tail).next_multiple_of(sys::page_size());
    let resident = sys::resident(region, len);
    // SAFETY: every slot of the region below the tail is ours, and nothing
    // above it was ever handed out; page-aligned (regions are).
    let released = unsafe { zeroed::release_to_zero(sys::ptr_at(region), len) };
    // Relaxed: a counter's bound only (`pressure`); claims wait for the tail.
    line.high.store(0, Ordering::Relaxed);
    // Release (to the claim's Acquire): the links were read and the pages
    // given back before anyone claims the slots anew.
    line.tail.store(0, Ordering::Release);
    // Locked pages stay (zeroed, not given back).
    let resident = if released { resident } else { 0 };
    out.released += resident;
    // Relaxed: statistics.
    PURGED_BYTES.fetch_add(resident as u64, Ordering::Relaxed);
    RESETS.fetch_add(1, Ordering::Relaxed);
    true
}

/// Releases the pages past the first of the free slot at `slot`, of size
/// class `sc`, which the caller holds; returns how many bytes of them were
/// resident (none released: no system call beyond `mincore`).
pub fn release_slot(slot: usize, sc: u32) -> usize {
    let (start, len) = sys::whole_pages(slot + 1, slot + layout::slot_size(sc));
    let resident = sys::resident(start, len);
    if resident != 0 {
        // SAFETY: `[start, start + len)` is page-aligned and inside a free
        // slot the caller holds, past its link's page; its contents are
        // needed by no one.
        unsafe { sys::release(sys::ptr_at(start), len) };
        // Relaxed: statistics.
        PURGED_BYTES.fetch_add(resident as u64, Ordering::Relaxed);
    }
    resident
}

/// Gives back the resident pages past the first of freed large slots
/// (below [`RELEASE_SC`], whose pages go back when freed), largest classes
/// first, until about `budget` bytes: the caller's own private lists of
/// large slots, and the shared lists, each taken whole and put back (the
/// caller holds the lock). Returns the bytes given back and how many lists
/// were used again within [`SOON_MS`] of a release that gave their pages
/// back. See
/// [`pressure`](crate::pressure).
pub fn release_large(budget: usize) -> (usize, u32) {
    let Some(base) = geometry::base() else {
        return (0, 0);
    };
    // Relaxed: a count; the lock orders the releases.
    let mut reused = PRIVATE_REUSED.swap(0, Ordering::Relaxed);
    let owned = home_slab::owned();
    let mine = is_owner(owned).then(|| home_slab::owned_slab(owned));
    let used = occupancy::ever_used() | layout::RESERVED_SLABS;
    let mut released = 0;
    for sc in (LARGE_SC..RELEASE_SC).rev() {
        if let Some(slab_addr) = mine {
            let t = tables(metadata::private_block(slab_addr));
            let head = t.large_head(sc);
            // Relaxed: the owner's cells; we are their owner.
            let first = head.load(Ordering::Relaxed);
            let count = t.large_count(sc).load(Ordering::Relaxed);
            let sig = u64::from(first) | u64::from(count) << 32;
            let slab = layout::slab_of(slab_addr);
            if unchanged(&record(slab, sc).private_at_release, sig) && first != 0 {
                let region = layout::region_addr(slab_addr, sc);
                let before = released;
                release_chain(region, sc, first, count, budget, &mut released);
                if released > before {
                    given_back(&record(slab, sc).private_given_ms);
                }
            }
        }
        for slab in (0..NUM_SLABS).filter(|i| used & (1 << i) != 0) {
            // Relaxed: a request to stop early, as in `sweep`.
            if released >= budget || FORKING.load(Ordering::Relaxed) != 0 {
                return (released, reused);
            }
            let slab_addr = layout::slab_addr(base, slab);
            let line = shared(slab_addr, sc);
            let seen = &record(slab, sc).seen;
            // Relaxed: a first look; `take_all` synchronizes. The tables
            // are ours under the lock.
            let w = line.flh.load(Ordering::Relaxed);
            let quiet = w == seen.load(Ordering::Relaxed);
            if w as u32 == 0
                || quiet && record(slab, sc).state.load(Ordering::Relaxed) & SWEPT != 0
                || !may_release(
                    slab,
                    sc,
                    unchanged(&record(slab, sc).shared_at_release, w),
                    &mut reused,
                )
            {
                continue;
            }
            let first = free_list::take_all(&line.flh);
            if first == 0 {
                continue;
            }
            // Relaxed: the tail hands out slot numbers only (see `claim_tail`).
            let tail = line.tail.load(Ordering::Relaxed);
            let region = layout::region_addr(slab_addr, sc);
            let before = released;
            let last = release_chain(region, sc, first, tail, budget, &mut released);
            if released > before {
                given_back(&record(slab, sc).shared_given_ms);
            }
            // SAFETY: the chain was on this list; we took it and hold it
            // whole; `last` is its last slot.
            let p = unsafe { free_list::push(&line.flh, &SlotLink::of(last), first) };
            crate::large_freed::pushed(slab, sc, p.onto_empty);
            // Relaxed: ours under the lock.
            record(slab, sc)
                .shared_at_release
                .store(p.now, Ordering::Relaxed);
            if quiet {
                // Our take and push are not a use: the list stays quiet.
                seen.store(p.now, Ordering::Relaxed);
            }
        }
    }
    (released, reused)
}

/// Where one thread allocates (the caller, an owner; see `pressure`): its
/// small size classes whose private list's head, or whose shared list, is
/// what the last such look saw are swept at once, the private list handed
/// to the shared one first (whole pages of freed slots go back, a region
/// whose every slot is free is reset). A program whose heap grows in new
/// classes no longer keeps the freed slots of the classes it stopped
/// using until the purge delay has passed. The caller holds the lock.
/// Returns the bytes given back.
pub fn release_unchanged_small() -> usize {
    if !idle_passes() {
        return 0;
    }
    let slab_addr = home_slab::owned_slab(home_slab::owned());
    let slab = layout::slab_of(slab_addr);
    let t = tables(metadata::private_block(slab_addr));
    let mut out = Swept::default();
    for sc in MIN_SC..LARGE_SC {
        let head = t.head(private_index(sc));
        // Relaxed: the owner's cell; we are its owner.
        let first = head.load(Ordering::Relaxed);
        let private_same = unchanged(&record(slab, sc).private_at_release, u64::from(first));
        let line = shared(slab_addr, sc);
        // Relaxed: a first look; the sweep's take synchronizes.
        let w = line.flh.load(Ordering::Relaxed);
        let shared_same = unchanged(&record(slab, sc).shared_at_release, w);
        let mut due = w as u32 != 0 && shared_same;
        if first != 0 && private_same {
            give(slab_addr, sc, head);
            due = true;
        }
        if due {
            sweep_list(slab_addr, slab, sc, true, &mut out);
            // Relaxed: ours under the lock. The sweep's own take and push
            // are not a use.
            let now = line.flh.load(Ordering::Relaxed);
            record(slab, sc)
                .shared_at_release
                .store(now, Ordering::Relaxed);
        }
    }
    out.released
}

/// A list used again within this many milliseconds of a release that gave
/// its pages back counts as used again soon ([`release_large`]).
const SOON_MS: u32 = 5;

/// Private lists of large slots used again soon after [`release_large`]
/// gave their pages back, not yet counted by it.
static PRIVATE_REUSED: AtomicU32 = AtomicU32::new(0);

/// Whether a list whose pages went back at `given` (0: not given back) and
/// that is used again now was used again soon.
fn soon(given: u32) -> bool {
    given != 0 && (sys::coarse_ms() as u32).wrapping_sub(given) < SOON_MS
}

/// Called when a slot is taken from the private list of large slots of
/// (slab, size class) (a cold path).
#[inline]
pub fn large_taken(slab: usize, sc: u32) {
    let cell = &record(slab, sc).private_given_ms;
    // Relaxed: a hint; the list's owner (or claimer) alone takes from it,
    // and only the owner releases it.
    let given = cell.load(Ordering::Relaxed);
    if given != 0 {
        cell.store(0, Ordering::Relaxed);
        if soon(given) {
            PRIVATE_REUSED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Whether [`release_large`] gives back the shared list of (slab, size
/// class), given whether it is `same` as at its last look (its push
/// counter changes with every use); counts in `reused` a list used again
/// soon after its pages went back. The caller holds the lock.
fn may_release(slab: usize, sc: u32, same: bool, reused: &mut u32) -> bool {
    if !same {
        // Relaxed: ours under the lock.
        let given = record(slab, sc).shared_given_ms.swap(0, Ordering::Relaxed);
        *reused += u32::from(soon(given));
    }
    same
}

/// Notes that [`release_large`] gave pages of the list back now (a look at
/// a list whose pages are gone already changes nothing).
fn given_back(cell: &AtomicU32) {
    // Relaxed: ours under the lock (and the private list's taker's, which
    // clears it).
    cell.store((sys::coarse_ms() as u32).max(1), Ordering::Relaxed);
}

/// Records `sig` as what [`release_large`] saw of a list in `cell`, and says
/// whether it is what it saw the last time.
fn unchanged(cell: &AtomicU64, sig: u64) -> bool {
    // Relaxed: ours under the sweep lock.
    cell.swap(sig, Ordering::Relaxed) == sig
}

/// Walks the chain of free large slots of size class `sc` from link
/// `first` in `region` (at most `max` slots: a corrupted chain ends there),
/// which the caller holds, giving back each slot's pages past the first
/// while `released` is below `budget`. Returns the last slot's address.
fn release_chain(
    region: usize,
    sc: u32,
    first: u32,
    max: u32,
    budget: usize,
    released: &mut usize,
) -> usize {
    let (mut n, mut last, mut link) = (0u32, 0, first);
    while link != 0 && n < max {
        last = layout::slot_of_link(region, link);
        n += 1;
        link = follow_link(last);
        if *released < budget {
            *released += release_slot(last, sc);
        }
    }
    last
}

/// How long the background thread waits for the sweep lock before it lets
/// a sweep pass: as long as a statistics snapshot waits for it, as a sweep
/// let pass waits a whole delay for the next (docs/decisions.md,
/// "Snapshots and sweeps share the sweep lock").
pub const LOCK_WAIT_MS: u64 = 1000;

/// A sweep by the background thread (or, in a process without one, on a
/// cold free or refill, with no wait): quiet lists only; then the owners
/// hand their private lists over at their next cold path. Passed (and
/// pending) if the sweep lock stays taken for `wait_ms`.
pub fn background_sweep(wait_ms: u64) -> Swept {
    if !lock_for_sweep(wait_ms) {
        return Swept {
            released: 0,
            pending: true,
        };
    }
    let out = sweep(false, usize::MAX);
    unlock();
    // Relaxed: see `owner_tick`.
    EPOCH.fetch_add(1, Ordering::Relaxed);
    out
}

/// A sweep of the slabs whose owner ended, by the background thread soon
/// after a thread's end: what the thread freed goes back without waiting a
/// whole delay. Skipped if the sweep lock stays taken for [`LOCK_WAIT_MS`].
pub fn ended_sweep() {
    if lock_for_sweep(LOCK_WAIT_MS) {
        sweep_slabs(false, usize::MAX, true);
        unlock();
    }
}

/// In a `fork` child: the parent's sweep lock was taken by the forking
/// thread's handler.
pub fn reset_after_fork() {
    // Relaxed: the child has one thread.
    FORKING.store(0, Ordering::Relaxed);
    SWEEPING.store(false, Ordering::Relaxed);
    // The threads that may have been waiting are not here.
    SWEEPS_WAITING.store(0, Ordering::Relaxed);
}

/// Called by free for the slot at `addr`, of size class `sc`, before it is
/// pushed: from [`RELEASE_SC`] on, releases its pages past the first.
///
/// # Safety
/// The caller owns the slot (it is being freed and is not yet pushed).
#[inline]
pub unsafe fn before_push(addr: usize, sc: u32) {
    if sc < RELEASE_SC {
        return;
    }
    // The whole pages after the one holding the link.
    let (first, len) = sys::whole_pages(addr + 1, addr + layout::slot_size(sc));
    if len > 0 {
        // SAFETY: `[first, first + len)` lies inside the slot, which the
        // caller owns, past the link's page, and is page-aligned.
        unsafe { sys::release(sys::ptr_at(first), len) };
    }
}

#[cfg(test)]
mod tests {
    use core::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    use super::SWEEPS_WAITING;

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot fork")]
    fn a_fork_child_does_not_wait_for_the_parents_background_thread() {
        // The background thread's fork handlers are registered when it starts.
        crate::start_purge_thread();
        // As if the background thread were waiting for the sweep lock at the
        // fork: the child has no such thread, and its snapshots must not wait.
        SWEEPS_WAITING.store(1, Ordering::Relaxed);
        devutils::fork::in_child(|| {
            let start = Instant::now();
            let _ = crate::stats::snapshot();
            assert!(
                start.elapsed() < Duration::from_millis(500),
                "{:?}",
                start.elapsed()
            );
        });
        SWEEPS_WAITING.store(0, Ordering::Relaxed);
    }
}
