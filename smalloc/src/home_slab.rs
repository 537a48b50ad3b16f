//! The calling thread's home slab: which slab it allocates from, whether it
//! owns that slab, and the changes of both (first allocation, moves, exit,
//! `fork`); how many threads live on each slab is [`occupancy`].
//!
//! Each thread holds four thread-local words:
//!
//! * the *alloc word*: the address of the private block of the slab the
//!   thread owns, or of an always-empty block (the initial value). The hot
//!   path of allocation reads only this word and indexes the block with it;
//!   a thread without a slab of its own finds an empty list there and takes
//!   the cold path, with no test of its own.
//! * the *owned word*: the same private block address, or [`NOT_OWNER`]
//!   (bit 63 set, the initial value). The hot path of free reads only this
//!   word: a pointer's offset from it says whether the slot is a small slot
//!   of the owned slab, and of which size class.
//! * the *current word*: the address of the slab the thread allocates from
//!   (the same slab for an owner), 0 before the thread's first allocation;
//!   bit 0 set ([`NO_OWN`]) when the thread must not own a slab again (it is
//!   exiting, or a benchmark pinned it to a shared slab).
//! * the *search hint*: the slab where its last search for freed slots
//!   succeeded, where the next search starts; above it, the purge epoch at
//!   which the thread last handed its private lists over.
//!
//! The words themselves, and how they are reached:
//! [`thread_words`](crate::thread_words).

use core::sync::atomic::{AtomicU32, Ordering};

use crate::features::{self, Event};
use crate::layout::{self, NUM_SLABS};
use crate::{metadata, nudge, occupancy, ownership, sys, thread_words};

pub use crate::thread_words::NOT_OWNER;

/// Flag in the current word: the thread never owns a slab again.
pub const NO_OWN: usize = 1;

/// The alloc word: the owned slab's private block, or the empty block.
#[inline(always)]
pub fn alloc_word() -> usize {
    thread_words::load::<{ thread_words::ALLOC }>()
}

/// The owned word: the owned slab's private block, or [`NOT_OWNER`].
#[inline(always)]
pub fn owned() -> usize {
    thread_words::load::<{ thread_words::OWNED }>()
}

/// Makes the thread's words say it owns the slab at `slab_addr`. A new
/// owner counts as having handed the private lists over at the current
/// purge epoch: what it inherits is not handed over (walked) until the next
/// sweep.
fn set_owned(slab_addr: usize) {
    let block = metadata::private_block(slab_addr);
    thread_words::store::<{ thread_words::OWNED }>(block);
    thread_words::store::<{ thread_words::ALLOC }>(block);
    set_purge_epoch(crate::purge::epoch());
}

/// Makes the thread's words say it owns no slab. Done before the slab is
/// released, so the thread never touches the private lists afterwards.
fn set_not_owner() {
    let owned = owned();
    // The owner's credits go; the same bits then name no guest set (a
    // thread without a slab gave its own back before: `guest::leave`).
    set_held_credits(0);
    thread_words::store::<{ thread_words::ALLOC }>(metadata::empty_block());
    thread_words::store::<{ thread_words::OWNED }>(NOT_OWNER);
    if is_owner(owned) {
        nudge::unregister(layout::slab_of(owned_slab(owned)));
    }
}

/// On an owner's cold path of allocation: points the alloc word back at the
/// private block `owned` if the purging thread nudged it ([`nudge`]).
#[inline]
pub fn answer_nudge(owned: usize) {
    if alloc_word() != owned {
        thread_words::store::<{ thread_words::ALLOC }>(owned);
    }
}

/// The slab address of an owned word that names one.
#[inline]
pub const fn owned_slab(owned: usize) -> usize {
    owned - metadata::PRIVATE_OFFSET
}

/// Whether an owned word names a slab.
#[inline(always)]
pub const fn is_owner(owned: usize) -> bool {
    (owned as isize) >= 0
}

/// The current word: the address of the slab the thread allocates from,
/// with [`NO_OWN`] possibly set; 0 before the thread's first allocation.
#[inline]
pub fn current() -> usize {
    thread_words::load::<{ thread_words::CURRENT }>()
}

/// The slab where the thread's last search for freed slots succeeded (a
/// slab number; 0 at first): the next search looks there first.
#[inline]
pub fn search_hint() -> usize {
    thread_words::load::<{ thread_words::HINT }>() % NUM_SLABS
}

/// Records where a search for freed slots succeeded.
#[inline]
pub fn set_search_hint(slab: usize) {
    let w = thread_words::load::<{ thread_words::HINT }>();
    thread_words::store::<{ thread_words::HINT }>((w & !HINT_SLAB) | slab)
}

/// In the hint word: the slab (the bits above hold the purge epoch the
/// thread last acted on, [`purge_epoch`]: a word the cold paths read
/// anyway, where a cell of the slab's tables would cost a cache line).
const HINT_SLAB: usize = 0xff;

/// The purge epoch the thread last handed its private lists over at.
#[inline]
pub fn purge_epoch() -> u32 {
    epoch_in_hint(thread_words::load::<{ thread_words::HINT }>())
}

/// The purge epoch a hint word holds.
#[inline]
pub const fn epoch_in_hint(hint: usize) -> u32 {
    (hint >> 8) as u32 & crate::purge::EPOCH_MASK
}

/// Records the purge epoch the thread handed its private lists over at.
#[inline]
pub fn set_purge_epoch(epoch: u32) {
    let w = thread_words::load::<{ thread_words::HINT }>();
    let epoch = (epoch & crate::purge::EPOCH_MASK) as usize;
    thread_words::store::<{ thread_words::HINT }>((w & !HINT_EPOCH) | epoch << 8)
}

/// In the hint word: the purge epoch's bits.
const HINT_EPOCH: usize = (crate::purge::EPOCH_MASK as usize) << 8;

/// In the hint word, from this bit on: the owner's credits for holding a
/// slot ([`held`](crate::held)), a bit per small size class.
const HELD_CREDITS_SHIFT: u32 = 32;

/// Size classes the hint word has a credit bit for.
pub const HELD_CREDIT_BITS: u32 = usize::BITS - HELD_CREDITS_SHIFT;

/// The thread's credits for holding a slot, a bit per size class.
#[inline(always)]
pub fn held_credits() -> usize {
    thread_words::load::<{ thread_words::HINT }>() >> HELD_CREDITS_SHIFT
}

/// Sets the thread's credits for holding a slot.
#[inline(always)]
pub fn set_held_credits(credits: usize) {
    let w = thread_words::load::<{ thread_words::HINT }>();
    let keep = w & ((1 << HELD_CREDITS_SHIFT) - 1);
    thread_words::store::<{ thread_words::HINT }>(keep | credits << HELD_CREDITS_SHIFT)
}

/// For a thread that owns no slab, the same bits of the hint word hold the
/// number of its guest cells' set plus one ([`guest`](crate::guest)), 0
/// while it has none; `None` for an owner.
#[inline]
pub fn guest_set() -> Option<usize> {
    if is_owner(owned()) {
        return None;
    }
    guest_set_unowned()
}

/// [`guest_set`] of a thread the caller knows owns no slab.
#[inline(always)]
pub fn guest_set_unowned() -> Option<usize> {
    held_credits().checked_sub(1)
}

/// Records the guest cells' set of a thread that owns no slab (and, for a
/// set claimed, in the value its end is noticed by: with the pthread-key
/// fallback the C library may have cleared the hint word by then).
#[inline]
pub fn set_guest_set(n: Option<usize>) {
    debug_assert!(!is_owner(owned()));
    set_held_credits(n.map_or(0, |n| n + 1));
    let current = current();
    if n.is_some() && current != 0 {
        exit::update(layout::slab_of(slab_addr(current)), false);
    }
}

/// The slab address of a non-zero current word.
#[inline]
pub const fn slab_addr(current: usize) -> usize {
    current & !NO_OWN
}

/// Whether the thread may claim a slab.
#[inline]
pub const fn may_own(current: usize) -> bool {
    current & NO_OWN == 0
}

/// The thread's first allocation: picks its home slab (the one with the
/// fewest live threads), owns it if nobody does, and arranges for its exit
/// to be noticed. `base` is the reservation's base.
#[cold]
#[inline(never)]
pub fn assign(base: usize) {
    let slab = occupancy::take();
    let addr = layout::slab_addr(base, slab);
    let owns = ownership::claim(slab);
    // Set the words before registering anything: registering may allocate,
    // which must find the thread placed.
    thread_words::store::<{ thread_words::CURRENT }>(addr);
    if owns {
        metadata::tables(metadata::private_block(addr)).fill_regions(addr);
        unsettle(slab);
        set_owned(addr);
        features::count(Event::Claim, addr);
    }
    occupancy::note_used(slab);
    exit::register(slab, owns);
    fork::register_once();
}

/// Makes the calling thread the owner of `slab`, whose claim it just won,
/// giving up the slab it owned before, if any.
#[cold]
pub fn become_owner(base: usize, slab: usize) {
    let old_owned = owned();
    let old_current = current();
    let addr = layout::slab_addr(base, slab);
    debug_assert!(old_current != 0);
    if is_owner(old_owned) {
        // Stop using the old private lists before anyone can claim them.
        set_not_owner();
        release_owned(owned_slab(old_owned));
    } else {
        // Its held slots, in cells of its own until now.
        crate::guest::leave();
    }
    metadata::tables(metadata::private_block(addr)).fill_regions(addr);
    unsettle(slab);
    set_owned(addr);
    thread_words::store::<{ thread_words::CURRENT }>(addr);
    occupancy::moved(layout::slab_of(slab_addr(old_current)), slab);
    occupancy::note_used(slab);
    exit::update(slab, true);
    features::count(Event::Claim, addr);
}

/// How long an owner that moved to another slab's freed slots stays there:
/// for this long its searches for freed small slots skip the slabs nobody
/// owns (it borrows from owned slabs or takes new memory of its own). Why,
/// measured: docs/decisions.md ("An owner settles where it moved").
pub const SETTLE_MS: u32 = 10;

/// When the owner of each slab moved there to take its freed slots: coarse
/// monotonic milliseconds, truncated, never 0; 0 when it came another way.
static MOVED_IN_MS: [AtomicU32; NUM_SLABS] = [const { AtomicU32::new(0) }; NUM_SLABS];

/// The calling thread became the owner of `slab` by moving to its freed
/// slots: it settles there for [`SETTLE_MS`].
#[cold]
pub fn settle(slab: usize) {
    if !cfg!(miri) {
        // Relaxed: only the slab's owner reads it, on its own cold paths.
        MOVED_IN_MS[slab % NUM_SLABS].store((sys::coarse_ms() as u32).max(1), Ordering::Relaxed);
    }
}

/// A thread became the owner of `slab` without a search: not settling.
fn unsettle(slab: usize) {
    // Relaxed: as in `settle`.
    MOVED_IN_MS[slab % NUM_SLABS].store(0, Ordering::Relaxed);
}

/// Whether the owner of `slab` (the caller) moved there within
/// [`SETTLE_MS`].
pub fn settling(slab: usize) -> bool {
    // Relaxed: as in `settle`.
    let at = MOVED_IN_MS[slab % NUM_SLABS].load(Ordering::Relaxed);
    at != 0 && !cfg!(miri) && (sys::coarse_ms() as u32).wrapping_sub(at) < SETTLE_MS
}

/// Moves a thread that owns no slab to `slab` for its next allocations.
#[cold]
pub fn move_to(base: usize, slab: usize) {
    debug_assert!(slab < NUM_SLABS && !is_owner(owned()));
    let old = current();
    thread_words::store::<{ thread_words::CURRENT }>(
        layout::slab_addr(base, slab) | (old & NO_OWN),
    );
    occupancy::moved(layout::slab_of(slab_addr(old)), slab);
    occupancy::note_used(slab);
    exit::update(slab, false);
    features::count(Event::Move, layout::slab_addr(base, slab));
}

/// Releases the slab at `slab_addr`, which the calling thread owned until
/// now: its private lists of large slots become borrowable.
fn release_owned(slab_addr: usize) {
    let heads = crate::large_freed::private_heads(slab_addr);
    ownership::release(layout::slab_of(slab_addr));
    crate::large_freed::left(slab_addr, &heads);
}

/// Pins the calling thread, which has a slab, to `slab` without owning it:
/// it gives up the slab it owns, if any, and never claims one again.
pub fn pin_unowned(base: usize, slab: usize) {
    let w = owned();
    if is_owner(w) {
        set_not_owner();
        release_owned(owned_slab(w));
    } else {
        // A pinned thread holds nothing.
        crate::guest::leave();
    }
    thread_words::store::<{ thread_words::CURRENT }>(current() | NO_OWN);
    move_to(base, slab);
}

/// Noticing a thread's end: a pthread key whose value, while the thread
/// lives, says where it is, and whose destructor gives its place back.
mod exit {
    use core::ffi::c_void;
    use core::sync::atomic::AtomicUsize;

    use super::{NO_OWN, set_not_owner};
    use crate::layout::{self, NUM_SLABS};
    use crate::{occupancy, thread_words};

    /// Added to the key's value when the thread owns its slab.
    const OWNS: usize = 1 << 8;

    /// In the key's value, from this bit on: the thread's guest cells' set
    /// plus one, 0 for none ([`guest`](crate::guest)).
    const GUEST_SHIFT: u32 = 16;

    /// The key (see [`key_once`](crate::thread_words::key_once)). Without one, exits go
    /// unnoticed: slabs stay owned and counts only grow, so later threads
    /// share slabs without owning them.
    static KEY: AtomicUsize = AtomicUsize::new(0);

    /// First registration of the calling thread, on `slab`.
    pub fn register(slab: usize, owns: bool) {
        update(slab, owns)
    }

    /// Records where the calling thread is now.
    pub fn update(slab: usize, owns: bool) {
        if let Some(key) = key() {
            let guest = super::guest_set().map_or(0, |n| n + 1) << GUEST_SHIFT;
            let value = slab + 1 + if owns { OWNS } else { 0 } + guest;
            // SAFETY: a valid key; the value is an integer in pointer form,
            // never dereferenced. glibc stores the values of the first 32
            // keys without allocating; for a later key the first store may
            // call calloc, which reaches this allocator with the thread's
            // words already set.
            unsafe { libc::pthread_setspecific(key, core::ptr::without_provenance(value)) };
            // Only a thread whose end is noticed may be nudged: its end
            // removes the registration before its words go away.
            if owns {
                crate::nudge::register(slab);
            }
        }
    }

    /// The key, created on first use.
    fn key() -> Option<libc::pthread_key_t> {
        // The destructor only touches atomics and this thread's words.
        thread_words::key_once(&KEY, Some(at_exit))
    }

    /// The key's destructor, run by the C library when a thread that
    /// allocated ends. Other destructors may still allocate and free after
    /// it: the thread then uses the shared lists and never owns again.
    extern "C" fn at_exit(value: *mut c_void) {
        let value = value.addr();
        let slab = (value & (OWNS - 1)).wrapping_sub(1);
        // From the key's value too, as the slab below.
        if let Some(set) = (value >> GUEST_SHIFT).checked_sub(1) {
            crate::guest::give_back(set);
        }
        if slab >= NUM_SLABS {
            return;
        }
        // From the key's value, not the current word: the C library clears
        // every key of an ending thread, so with the pthread-key fallback
        // the current word may read 0 (never placed) here.
        let addr = layout::slab_addr(crate::geometry::base_raw(), slab);
        if value & OWNS != 0 {
            crate::held::send_home(addr);
            crate::purge::hand_over_at_end(addr);
        }
        // Stop using the private lists before anyone can claim them.
        set_not_owner();
        thread_words::store::<{ thread_words::CURRENT }>(addr | NO_OWN);
        if value & OWNS != 0 {
            super::release_owned(addr);
        }
        occupancy::left(slab);
        // What the thread freed is now the sweeps' to give back, soon.
        crate::purger::thread_ended();
    }
}

/// Handing the slabs of threads that do not exist in a `fork` child back.
mod fork {
    use core::sync::atomic::{AtomicBool, Ordering};

    use super::{is_owner, owned_slab, slab_addr};
    use crate::{layout, ownership};
    use crate::{occupancy, thread_words};

    /// Whether the child handler was registered.
    static REGISTERED: AtomicBool = AtomicBool::new(false);

    /// Registers [`child`] with `pthread_atfork`, once per process. Called
    /// by a thread's first allocation, after its words are set, because
    /// registering may allocate.
    pub fn register_once() {
        // Relaxed: only decides who registers; nothing is published.
        if cfg!(miri) || REGISTERED.swap(true, Ordering::Relaxed) {
            return;
        }
        // SAFETY: `child` only stores to atomics and reads this thread's
        // words: async-signal-safe, as a fork child handler must be.
        unsafe { libc::pthread_atfork(None, None, Some(child)) };
    }

    /// Runs in the child after `fork`: the forking thread is the only one,
    /// so it alone may own a slab and live on one. The private lists of the
    /// slabs the parent's other threads owned become claimable.
    extern "C" fn child() {
        let owned = thread_words::load::<{ thread_words::OWNED }>();
        let current = thread_words::load::<{ thread_words::CURRENT }>();
        let mine = is_owner(owned).then(|| layout::slab_of(owned_slab(owned)));
        ownership::reset_after_fork(mine);
        crate::nudge::reset_after_fork(mine);
        crate::commit::reset_after_fork();
        crate::guest::reset_after_fork();
        crate::large_freed::reset_after_fork();
        occupancy::reset_after_fork((current != 0).then(|| layout::slab_of(slab_addr(current))));
    }
}
