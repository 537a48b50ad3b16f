//! Guest cells: the held slots (`held`) of a thread that owns no slab (a
//! thread beyond the slabs' count). Such a thread allocates from and frees
//! onto shared lists, a compare-and-swap on a line other threads write each
//! time; with cells of its own it keeps a small slot it frees, one per size
//! class, and hands it out at its next allocation of the class: the pair
//! then touches only its own cells.
//!
//! The cells are sets of a static table, claimed like slabs (a bit per set)
//! at the thread's first allocation as a guest, their number kept in its
//! hint word (`home_slab::guest_set`). Unlike an owner's cells, anyone may
//! empty them: the thread changes its cells with read-modify-writes, so a
//! trim, a sweep or a `fork` child's handler takes each slot held with one
//! swap and sends it home, and the thread's own next change fails and sends
//! its slot home instead. The thread empties and gives its set back when it
//! ends or claims a slab.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::held::{self, HELD_SC, TAKEN};
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

/// One thread's cells, by size class, on lines of their own: a held slot's
/// address, or with [`TAKEN`] the slot last handed out from the cell, or 0.
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

/// The cell's thread frees the slot at `addr` (at least 2-aligned): true if
/// the cell holds it now.
#[inline]
pub fn hold_in<C: CellWord + ?Sized>(cell: &C, addr: usize) -> bool {
    // Relaxed: only the cell's thread writes a slot into it.
    let c = cell.load(Ordering::Relaxed) as usize;
    if c != 0 && (c & TAKEN == 0 || c == addr | TAKEN) {
        // A slot held already, or the slot just handed out, freed again
        // (see `held::TAKEN`): home.
        return false;
    }
    // Release: our writes to the slot happen-before an emptier's, which
    // acquires the cell before it writes the slot's link. Fails only if an
    // emptier cleared the cell meanwhile: the slot goes home.
    cell.compare_exchange(c as u64, addr as u64, Ordering::Release, Ordering::Relaxed)
        .is_ok()
}

/// The cell's thread takes the slot its cell holds, if any.
#[inline]
pub fn take_in<C: CellWord + ?Sized>(cell: &C) -> Option<usize> {
    // Relaxed: a slot in our cell is one we wrote there; an emptier only
    // writes 0.
    let c = cell.load(Ordering::Relaxed) as usize;
    if c == 0 || c & TAKEN != 0 {
        return None;
    }
    // Relaxed: as above. Fails only if an emptier took the slot home.
    cell.compare_exchange(
        c as u64,
        (c | TAKEN) as u64,
        Ordering::Relaxed,
        Ordering::Relaxed,
    )
    .ok()?;
    Some(c)
}

/// Any thread empties the cell: the slot it held, now the caller's to send
/// home.
///
/// Built with `--cfg smalloc_blind_guest_empty` (tests only) it reads and
/// then clears the cell, so the model checker can show that the swap is
/// what keeps a slot from going home while its thread hands it out.
#[inline]
pub fn empty_in<C: CellWord + ?Sized>(cell: &C) -> Option<usize> {
    // Acquire: the holder's writes to the slot (its Release) happen-before
    // the caller's push writes its link.
    let c = if cfg!(smalloc_blind_guest_empty) {
        let c = cell.load(Ordering::Acquire);
        cell.store(0, Ordering::Relaxed);
        c
    } else {
        cell.swap(0, Ordering::Acquire)
    } as usize;
    (c != 0 && c & TAKEN == 0).then_some(c)
}

/// The calling thread, which owns no slab and has set `n`, frees the small
/// slot at `addr` of size class `sc` (below [`HELD_SC`]): true if it holds
/// it now.
#[inline]
pub(crate) fn hold(n: usize, addr: usize, sc: u32) -> bool {
    debug_assert!(sc < HELD_SC && !is_owner(home_slab::owned()));
    debug_assert_eq!(home_slab::guest_set(), Some(n));
    hold_in(cell(n, sc), addr)
}

/// The slot the calling thread, which owns no slab but may own one, holds
/// for size class `sc`, taken. A thread without a set claims one here, at
/// its first allocation as a guest (a pinned or ending thread, which may
/// not own a slab, never gets here, and so holds nothing).
#[inline]
pub(crate) fn take(sc: u32) -> Option<Slot> {
    if held::config_off() || sc >= HELD_SC {
        return None;
    }
    let Some(n) = home_slab::guest_set_unowned() else {
        claim();
        return None;
    };
    let c = take_in(cell(n, sc))?;
    Some(Slot {
        ptr: sys::ptr_at(c),
        fresh: false,
    })
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
            // SAFETY: the slot was free and held; emptying made it ours.
            unsafe { crate::cold_path::push_home_quiet(c, sc) };
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
/// class (a snapshot's read: the threads may change them meanwhile).
pub(crate) fn for_each_held(mut f: impl FnMut(usize, u32)) {
    if held::config_off() {
        return;
    }
    for_claimed(|n| {
        for sc in layout::MIN_SC..HELD_SC {
            // Relaxed: a snapshot reads; nothing is read through the value.
            let c = cell(n, sc).load(Ordering::Relaxed) as usize;
            if c != 0 && c & TAKEN == 0 {
                f(c, sc);
            }
        }
    });
}
