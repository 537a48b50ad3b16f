//! Guest cells: the held slots (`held`) of a thread that owns no slab (a
//! thread beyond the slabs' count). Such a thread allocates from and frees
//! onto shared lists, a compare-and-swap on a line other threads write each
//! time; with cells of its own it keeps the small slots it frees, chained
//! like an owner's (up to `held::DEPTH` per size class), and hands them out
//! at its next allocations of the class: the pair then touches only its own
//! cells and the slot.
//!
//! The cells are sets of a static table, claimed like slabs (a bit per set)
//! at the thread's first allocation as a guest, their number kept in its
//! hint word (`home_slab::guest_set`). Unlike an owner's cells, anyone may
//! empty them: the thread changes its cells with read-modify-writes, so a
//! trim, a sweep or a `fork` child's handler takes each chain with one swap
//! and sends it home, and the thread's own next change fails (only the
//! thread writes a value other than 0, so no value comes back) and sends
//! its slot home instead. The thread empties and gives its set back when it
//! ends or claims a slab.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::held::{self, ADDR_MASK, DEPTH, DEPTH_SHIFT, HELD_SC, TAKEN};
use crate::home_slab::{self, is_owner};
use crate::layout::{self, Slot};
use crate::sys;

/// Sets of cells: a process with more threads than that beyond the slabs
/// leaves the others without (they use the shared lists, as before).
const SETS: usize = 128;

/// Words of the claimed bit set.
const WORDS: usize = SETS / usize::BITS as usize;

/// Cells in a set: one per size class below [`HELD_SC`], a power of two so
/// that an index needs no bounds check.
const CELLS_PER_SET: usize = (HELD_SC as usize).next_power_of_two();

/// The word of a set below the first size class: the thread's credits, a
/// bit per class as an owner's (`home_slab::held_credits`): it holds more
/// than one slot of a class only after allocating one since its chain was
/// last full, so a thread that only frees keeps one per class.
const CREDITS: usize = 0;

const _: () = assert!(CREDITS < layout::MIN_SC as usize && HELD_SC <= u64::BITS);

/// One thread's cells, by size class, on lines of their own: a chain's
/// word (`held`), or with [`TAKEN`] the slot last handed out from the cell,
/// or 0; and its credits.
#[repr(align(64))]
struct Set([AtomicU64; CELLS_PER_SET]);

/// The sets (in the library's zero-initialised data: untouched, and so no
/// memory, in a process with no thread beyond the slabs).
static CELLS: [Set; SETS] = [const { Set([const { AtomicU64::new(0) }; CELLS_PER_SET]) }; SETS];

/// Which sets a thread has claimed, a bit per set.
static CLAIMED: [AtomicUsize; WORDS] = [const { AtomicUsize::new(0) }; WORDS];

/// The cell of size class `sc` of set `n`.
#[inline]
fn cell(n: usize, sc: u32) -> &'static AtomicU64 {
    // The masks keep the indexes in range (they are already): no check.
    &CELLS[n % SETS].0[sc as usize % CELLS_PER_SET]
}

/// The word of the claimed set holding set `n`'s bit, and the bit.
#[inline]
fn claimed_bit(n: usize) -> (&'static AtomicUsize, usize) {
    let n = n % SETS;
    let bits = usize::BITS as usize;
    (&CLAIMED[n / bits], 1 << (n % bits))
}

/// A guest cell's word. Generic for the model checker
/// (`smalloc/tests/loom_free_list.rs`), like the list operations.
pub trait CellWord {
    /// Atomic load.
    fn load(&self, order: Ordering) -> u64;
    /// Atomic compare-and-swap.
    fn compare_exchange(&self, c: u64, n: u64, s: Ordering, f: Ordering) -> Result<u64, u64>;
    /// Atomic swap.
    fn swap(&self, v: u64, order: Ordering) -> u64;
    /// Atomic store (only the non-vacuity build's blind emptying uses it).
    fn store(&self, v: u64, order: Ordering);
}

impl CellWord for AtomicU64 {
    #[inline(always)]
    fn load(&self, order: Ordering) -> u64 {
        AtomicU64::load(self, order)
    }
    #[inline(always)]
    fn compare_exchange(&self, c: u64, n: u64, s: Ordering, f: Ordering) -> Result<u64, u64> {
        AtomicU64::compare_exchange(self, c, n, s, f)
    }
    #[inline(always)]
    fn swap(&self, v: u64, order: Ordering) -> u64 {
        AtomicU64::swap(self, v, order)
    }
    #[inline(always)]
    fn store(&self, v: u64, order: Ordering) {
        AtomicU64::store(self, v, order)
    }
}

/// Where a chain's word keeps its length (above the address).
pub const LEN_SHIFT: u32 = DEPTH_SHIFT;

/// The chain words of held slots (`held`'s format: the rest of the chain
/// from each). Generic for the model checker, which keeps them in its
/// slots' links.
pub trait ChainWords {
    /// The chain word of the held slot at `addr`. The caller may read it
    /// after an emptier took the chain, and then must not use the value.
    fn load(&self, addr: usize) -> usize;
    /// Sets the chain word of the slot at `addr`, which the caller holds.
    fn store(&self, addr: usize, word: usize);
}

/// The chain words where they are: each held slot's first word.
struct InSlots;

impl ChainWords for InSlots {
    #[inline(always)]
    fn load(&self, addr: usize) -> usize {
        // Relaxed: the cell's read-modify-writes order the chain.
        held::chain_word(addr).load(Ordering::Relaxed) as usize
    }
    #[inline(always)]
    fn store(&self, addr: usize, word: usize) {
        // Relaxed: published by the cell's Release compare-and-swap.
        held::chain_word(addr).store(word as u64, Ordering::Relaxed)
    }
}

/// The cell's thread frees the slot at `addr` (at least 2-aligned), with
/// room for a chain word if `chain` (and a credit for its class): the
/// chain's length if the cell holds it now, 0 if it goes home. Without
/// `chain` only an empty cell takes it.
#[inline]
pub fn hold_in<C: CellWord + ?Sized, W: ChainWords + ?Sized>(
    cell: &C,
    words: &W,
    addr: usize,
    chain: bool,
) -> usize {
    // Relaxed: only the cell's thread writes a slot into it.
    let c = cell.load(Ordering::Relaxed) as usize;
    if c == addr | TAKEN {
        // The slot just handed out, freed again (see `held::TAKEN`): home.
        return 0;
    }
    let before = if c & TAKEN != 0 { 0 } else { c };
    let len = before >> DEPTH_SHIFT;
    if len != 0 {
        if !chain || len >= DEPTH {
            return 0;
        }
        words.store(addr, before);
    }
    // Release: our writes to the slot (its chain word too) happen-before an
    // emptier's, which acquires the cell before it reads the chain. Fails
    // only if an emptier cleared the cell meanwhile: the slot goes home.
    let now = addr | (len + 1) << DEPTH_SHIFT;
    match cell.compare_exchange(c as u64, now as u64, Ordering::Release, Ordering::Relaxed) {
        Ok(_) => len + 1,
        Err(_) => 0,
    }
}

/// The cell's thread takes the slot its cell held last, if any.
#[inline]
pub fn take_in<C: CellWord + ?Sized, W: ChainWords + ?Sized>(cell: &C, words: &W) -> Option<usize> {
    // Relaxed: a chain in our cell is one we wrote there; an emptier only
    // writes 0.
    let c = cell.load(Ordering::Relaxed) as usize;
    if c == 0 || c & TAKEN != 0 {
        return None;
    }
    let addr = c & ADDR_MASK;
    // If an emptier took the chain since the load, the slot may be anyone's
    // now and its word anything: the compare-and-swap below then fails, as
    // no one but us writes a value other than 0 into the cell.
    let left = if c >> DEPTH_SHIFT > 1 {
        words.load(addr)
    } else {
        addr | TAKEN
    };
    // Relaxed: as above (and our reads of the chain are our own writes).
    cell.compare_exchange(c as u64, left as u64, Ordering::Relaxed, Ordering::Relaxed)
        .ok()?;
    Some(addr)
}

/// Any thread empties the cell: the chain it held (its word), now the
/// caller's to send home with [`for_each_in_chain`].
///
/// Built with `--cfg smalloc_blind_guest_empty` (tests only) it reads and
/// then clears the cell, so the model checker can show that the swap is
/// what keeps a slot from going home while its thread hands it out.
#[inline]
pub fn empty_in<C: CellWord + ?Sized>(cell: &C) -> Option<usize> {
    // Acquire: the holder's writes to the slots (its Release) happen-before
    // the caller's reads of the chain and its pushes.
    let c = if cfg!(smalloc_blind_guest_empty) {
        let c = cell.load(Ordering::Acquire);
        cell.store(0, Ordering::Relaxed);
        c
    } else {
        cell.swap(0, Ordering::Acquire)
    } as usize;
    (c != 0 && c & TAKEN == 0).then_some(c)
}

/// Calls `f` with each slot of the chain whose word is `chain`, which the
/// caller took from a cell ([`empty_in`]); each slot's chain word is read
/// before `f` gets it.
pub fn for_each_in_chain<W: ChainWords + ?Sized>(
    words: &W,
    chain: usize,
    mut f: impl FnMut(usize),
) {
    let mut word = chain;
    for left in (1..=word >> DEPTH_SHIFT).rev() {
        let addr = word & ADDR_MASK;
        if left > 1 {
            word = words.load(addr);
        }
        f(addr);
    }
}

/// The calling thread, which owns no slab and has set `n`, frees the small
/// slot at `addr` of size class `sc` (below [`HELD_SC`]): true if it holds
/// it now.
#[inline]
pub(crate) fn hold(n: usize, addr: usize, sc: u32) -> bool {
    debug_assert!(sc < HELD_SC && !is_owner(home_slab::owned()));
    debug_assert_eq!(home_slab::guest_set(), Some(n));
    let credits = credits(n);
    // Relaxed: only the set's thread reads and writes its credits.
    let mine = credits.load(Ordering::Relaxed);
    let chain = held::chained(sc) && (mine >> sc) & 1 != 0;
    let len = hold_in(cell(n, sc), &InSlots, addr, chain);
    if len >= DEPTH {
        credits.store(mine & !(1 << sc), Ordering::Relaxed);
    }
    len != 0
}

/// The slot the calling thread, which owns no slab but may own one, holds
/// last for size class `sc`, taken; the thread gets its credit for `sc`
/// either way. A thread without a set claims one here, at its first
/// allocation as a guest (a pinned or ending thread, which may not own a
/// slab, never gets here, and so holds nothing).
#[inline]
pub(crate) fn take(sc: u32) -> Option<Slot> {
    if held::config_off() || sc >= HELD_SC {
        return None;
    }
    let Some(n) = home_slab::guest_set_unowned() else {
        claim();
        return None;
    };
    take_from(n, sc)
}

/// The set of the calling thread, which owns no slab, if it has one and
/// its cells take slots of size class `sc`.
#[inline]
pub(crate) fn set_for(sc: u32) -> Option<usize> {
    if held::config_off() || sc >= HELD_SC {
        return None;
    }
    home_slab::guest_set_unowned()
}

/// [`take`] by the thread of set `n` ([`set_for`] `sc`).
#[inline]
pub(crate) fn take_from(n: usize, sc: u32) -> Option<Slot> {
    let credits = credits(n);
    // Relaxed: the set's thread's own word.
    let mine = credits.load(Ordering::Relaxed);
    if mine & 1 << sc == 0 {
        credits.store(mine | 1 << sc, Ordering::Relaxed);
    }
    let c = take_in(cell(n, sc), &InSlots)?;
    Some(Slot {
        ptr: sys::ptr_at(c),
        fresh: false,
    })
}

/// The credits of set `n`.
#[inline(always)]
fn credits(n: usize) -> &'static AtomicU64 {
    &CELLS[n % SETS].0[CREDITS]
}

/// Claims a set for the calling thread, which has none and may own a slab
/// (not one that ends: its set would outlive it), unless every set is
/// taken.
#[cold]
fn claim() {
    for (w, word) in CLAIMED.iter().enumerate() {
        // Relaxed: a hint; the `fetch_or` decides.
        let mut free = !word.load(Ordering::Relaxed);
        while free != 0 {
            let bit = 1 << free.trailing_zeros();
            // Acquire: the set's last user emptied its cells before its
            // release.
            if word.fetch_or(bit, Ordering::Acquire) & bit == 0 {
                let n = w * usize::BITS as usize + bit.trailing_zeros() as usize;
                // Relaxed: the set is ours now; no credits carried over.
                credits(n).store(0, Ordering::Relaxed);
                home_slab::set_guest_set(Some(n));
                return;
            }
            free &= !bit;
        }
    }
}

/// Sends every slot held in set `n` home and empties its cells.
fn empty(n: usize) {
    for sc in layout::MIN_SC..HELD_SC {
        if let Some(c) = empty_in(cell(n, sc)) {
            for_each_in_chain(&InSlots, c, |addr| {
                // SAFETY: the slot was free and held; emptying made it
                // ours, and its chain word was read before.
                unsafe { crate::cold_path::push_home_quiet(addr, sc) };
            });
        }
    }
}

/// The calling thread claims a slab or is pinned to a shared one: sends
/// its held slots home and gives its set back.
pub(crate) fn leave() {
    if let Some(n) = home_slab::guest_set() {
        give_back(n);
    }
}

/// The calling thread, whose set is `n`, gives it back (it leaves, or ends:
/// then `n` comes from the value its end is noticed by), its held slots
/// sent home.
pub(crate) fn give_back(n: usize) {
    home_slab::set_guest_set(None);
    empty(n);
    let (word, bit) = claimed_bit(n);
    // Release: the emptied cells before the next claimer's Acquire.
    word.fetch_and(!bit, Ordering::Release);
}

/// Sends the slots every thread holds in its cells home (a trim, a sweep).
/// Their threads keep their sets.
pub(crate) fn send_home_all() {
    for_claimed(empty);
}

/// In a `fork` child: the sets of the parent's other threads, which do not
/// exist here, are emptied and free again; the forking thread keeps its
/// own.
pub(crate) fn reset_after_fork() {
    let mine = home_slab::guest_set();
    for_claimed(|n| {
        if Some(n) != mine {
            empty(n);
            let (word, bit) = claimed_bit(n);
            // Relaxed: the child has a single thread.
            word.fetch_and(!bit, Ordering::Relaxed);
        }
    });
}

/// Calls `f` with each claimed set's number.
fn for_claimed(mut f: impl FnMut(usize)) {
    for (w, word) in CLAIMED.iter().enumerate() {
        // Acquire: a set claimed is seen with its claim's cells.
        let mut bits = word.load(Ordering::Acquire);
        while bits != 0 {
            let b = bits.trailing_zeros() as usize;
            f(w * usize::BITS as usize + b);
            bits &= bits - 1;
        }
    }
}

/// Calls `f` with each slot held in the cells of any thread and its size
/// class. A snapshot's read: the threads may change their chains
/// meanwhile, so it follows only addresses `valid` accepts for the class
/// (`held::for_each_in_snapshot`).
pub(crate) fn for_each_held(valid: impl Fn(usize, u32) -> bool, mut f: impl FnMut(usize, u32)) {
    if held::config_off() {
        return;
    }
    for_claimed(|n| {
        for sc in layout::MIN_SC..HELD_SC {
            // Relaxed: a snapshot reads; addresses are checked before they
            // are followed.
            let c = cell(n, sc).load(Ordering::Relaxed) as usize;
            held::for_each_in_snapshot(c, |a| valid(a, sc), |a| f(a, sc));
        }
    });
}
