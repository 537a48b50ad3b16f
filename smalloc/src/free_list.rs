//! The shared free list of one (slab, size class): the lock-free list that
//! every thread may push a freed slot onto, headed by the flh.
//!
//! # The flh word
//!
//! ```text
//!  63                 32 31                          0
//! +---------------------+-----------------------------+
//! |    push counter     |        head link            |
//! +---------------------+-----------------------------+
//! ```
//!
//! * `head link`: the first slot of the list, as a link
//!   ([`layout::link_of`](crate::layout::link_of)); 0 when the list is
//!   empty. Each slot on the list holds the link of the next one in its
//!   first four bytes (0 in the last).
//! * `push counter`: incremented by every push, so a pop that read a stale
//!   head fails its compare-and-swap even if the same slot is back at the
//!   head (the ABA problem). Nothing ever lowers it: [`take_all`] keeps it.
//!
//! A word of all zeros is an empty list: nothing is initialized up front.
//! Slots that were never handed out are not on any list; they are counted
//! out of the never-used tail instead (see `hot_path`).
//!
//! The slab's owner frees its own slots to its private list
//! ([`private_list`](crate::private_list)); this list receives the frees of
//! every other thread, and the owner takes it whole ([`take_all`]) when its
//! private list runs dry. Threads that own no slab pop from it one slot at a
//! time ([`pop`]).
//!
//! The operations are generic over the flh cell and the link storage so the
//! very same functions run in the allocator and under loom.

use core::sync::atomic::Ordering;

/// One increment of the push counter. Built with
/// `--cfg smalloc_no_push_counter` (tests only) the counter never moves, so
/// the model checker can show that it is what prevents ABA.
pub const COUNTER_ONE: u64 = if cfg!(smalloc_no_push_counter) {
    0
} else {
    1 << 32
};
/// Mask of the push counter in the flh word.
pub const COUNTER_MASK: u64 = !0xffff_ffff;

/// What a checked [`LinkStore`] reads from a free slot whose link fails its
/// check (the secure mode). Never a link: slot numbers have at most
/// [`MAX_SLOT_NUM_BITS`](crate::layout::MAX_SLOT_NUM_BITS) bits.
pub const BAD_LINK: u32 = u32::MAX;

/// A 64-bit atomic cell holding an flh.
pub trait FlhCell {
    /// Atomic load.
    fn load(&self, order: Ordering) -> u64;
    /// Atomic strong compare-and-swap.
    fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64>;
}

impl FlhCell for core::sync::atomic::AtomicU64 {
    #[inline(always)]
    fn load(&self, order: Ordering) -> u64 {
        core::sync::atomic::AtomicU64::load(self, order)
    }
    #[inline(always)]
    fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        core::sync::atomic::AtomicU64::compare_exchange(self, current, new, success, failure)
    }
}

/// One slot's link cell (its first four bytes in the allocator).
pub trait LinkCell {
    /// Writes the link.
    ///
    /// # Safety
    /// The caller owns the slot (it is being freed).
    unsafe fn store_link(&self, link: u32);
}

impl LinkCell for core::sync::atomic::AtomicU32 {
    #[inline(always)]
    unsafe fn store_link(&self, link: u32) {
        // Relaxed: published by the Release compare-and-swap of a push, or,
        // on a private list, read only by the slab's owner.
        self.store(link, Ordering::Relaxed)
    }
}

/// Where the links of free slots are read from: the first four bytes of
/// each slot in the allocator, an array in model-checking tests.
pub trait LinkStore {
    /// Whether [`load_link`](Self::load_link) checks what it reads and may
    /// return [`BAD_LINK`] (the secure mode).
    const CHECKED: bool = false;

    /// Reads the link stored in the slot named by `link` (non-zero).
    ///
    /// # Safety
    /// `link` names a slot of this store. On the shared list the slot may
    /// meanwhile belong to someone else (a stale read); the value is then
    /// garbage and the caller's compare-and-swap fails.
    unsafe fn load_link(&self, link: u32) -> u32;

    /// The free slot named by `link` holds a link that fails its check:
    /// stops the program. Only a checked store reports it.
    fn corrupt(&self, link: u32) -> ! {
        panic!("corrupted link in slot {link}")
    }
}

/// Result of one pop attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pop {
    /// Got the slot named by this link (non-zero).
    Slot(u32),
    /// The list holds no slot.
    Empty,
    /// Another thread changed the flh between our load and our
    /// compare-and-swap; the list may well still hold slots.
    Collision {
        /// The flh word we expected.
        expected: u64,
        /// The flh word we found instead.
        observed: u64,
    },
}

impl Pop {
    /// Whether this is a collision that included a push (the push counter
    /// moved): some thread freed a slot of this list, which says nothing
    /// about contention among allocating threads. A collision without one
    /// means another thread popped or took the list.
    #[inline]
    pub fn is_push_collision(&self) -> bool {
        match *self {
            Pop::Collision { expected, observed } => (expected ^ observed) & COUNTER_MASK != 0,
            _ => false,
        }
    }
}

/// Tries once to take the first slot of the list.
#[inline(always)]
pub fn pop<F: FlhCell + ?Sized, L: LinkStore + ?Sized>(flh: &F, links: &L) -> Pop {
    // Acquire: the head's link was stored before the pusher's Release
    // compare-and-swap that we read from here.
    let old = flh.load(Ordering::Acquire);
    let head = old as u32;
    if head == 0 {
        return Pop::Empty;
    }
    // SAFETY: pushes only store links of this list's region; a stale read is
    // caught by the compare-and-swap.
    let next = unsafe { links.load_link(head) };
    if L::CHECKED && next == BAD_LINK {
        // A stale read (the slot was taken and reused meanwhile) fails its
        // check too; only a head that is still the head is corrupt.
        // Acquire: as the first load.
        let now = flh.load(Ordering::Acquire);
        if now == old {
            links.corrupt(head);
        }
        return Pop::Collision {
            expected: old,
            observed: now,
        };
    }
    let new = (old & COUNTER_MASK) | u64::from(next);
    // Success Acquire: the slot's previous owner released it with the push
    // whose value (or a later read-modify-write of it, all of which continue
    // its release sequence) we replace, so its writes happen-before ours.
    // Failure Relaxed: we discard the value.
    match flh.compare_exchange(old, new, Ordering::Acquire, Ordering::Relaxed) {
        Ok(_) => Pop::Slot(head),
        Err(observed) => Pop::Collision {
            expected: old,
            observed,
        },
    }
}

/// Takes the whole list: returns its head link (0 if it was empty) and
/// leaves the list empty, keeping the push counter (a pop that read the old
/// head must still fail). The caller then owns every slot of the chain.
#[inline]
pub fn take_all<F: FlhCell + ?Sized>(flh: &F) -> u32 {
    // Relaxed: only a first guess of the value; the CAS below synchronizes.
    let mut old = flh.load(Ordering::Relaxed);
    loop {
        if old as u32 == 0 {
            return 0;
        }
        // Success Acquire: every push of the chain released its link and the
        // slot's contents; pushes are read-modify-writes, so reading the last
        // one synchronizes with all of them. Failure Relaxed: retried.
        match flh.compare_exchange(
            old,
            old & COUNTER_MASK,
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            Ok(_) => return old as u32,
            Err(current) => old = current,
        }
    }
}

/// What a [`push`] did.
#[derive(Clone, Copy, Debug)]
pub struct Pushed {
    /// The flh word it wrote.
    pub now: u64,
    /// Whether the list was empty before it.
    pub onto_empty: bool,
}

/// Puts the slot named by `link`, whose link cell is `cell`, at the head of
/// the list. Never fails: retries until its compare-and-swap succeeds.
/// A chain the caller holds goes on whole with `link` naming its first slot
/// and `cell` its last slot's link cell.
///
/// # Safety
/// The caller owns the slot (or chain), which belongs to this list's
/// region, and `cell` is that slot's (the chain's last slot's) link cell.
#[inline(always)]
pub unsafe fn push<F: FlhCell + ?Sized, C: LinkCell + ?Sized>(
    flh: &F,
    cell: &C,
    link: u32,
) -> Pushed {
    debug_assert!(link != 0);
    // Relaxed: we never read through the old head, we only copy its value.
    let mut old = flh.load(Ordering::Relaxed);
    loop {
        // SAFETY: the caller owns the slot.
        unsafe { cell.store_link(old as u32) };
        let new = ((old & COUNTER_MASK).wrapping_add(COUNTER_ONE)) | u64::from(link);
        // Success Release: the link just stored, and every write the owner
        // made to the slot, become visible to the thread that takes it.
        // Failure Relaxed: as for the first load.
        match flh.compare_exchange(old, new, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => {
                return Pushed {
                    now: new,
                    onto_empty: old as u32 == 0,
                };
            }
            Err(current) => old = current,
        }
    }
}

/// Puts the chain starting at `first` (its last link 0, as a private list
/// ends) on the list if the list is empty, with one compare-and-swap; false
/// (nothing done) if it was not, or changed since `empty` was read.
///
/// # Safety
/// The caller owns every slot of the chain, all of this list's region.
#[inline]
pub unsafe fn push_chain_if_empty<F: FlhCell + ?Sized>(flh: &F, empty: u64, first: u32) -> bool {
    debug_assert!(empty as u32 == 0 && first != 0);
    // Built with `--cfg smalloc_blind_chain_push` (tests only), the chain
    // replaces whatever the list holds by then, so the model checker can
    // show that comparing with the empty list is what keeps its slots.
    if cfg!(smalloc_blind_chain_push) {
        loop {
            let now = flh.load(Ordering::Relaxed);
            let new = ((now & COUNTER_MASK).wrapping_add(COUNTER_ONE)) | u64::from(first);
            if flh
                .compare_exchange(now, new, Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                return true;
            }
        }
    }
    let new = ((empty & COUNTER_MASK).wrapping_add(COUNTER_ONE)) | u64::from(first);
    // Success Release: as a push, for every link and slot of the chain.
    // Failure Relaxed: nothing read.
    flh.compare_exchange(empty, new, Ordering::Release, Ordering::Relaxed)
        .is_ok()
}

/// Link cells in memory of the test's own, for the lists' unit tests.
#[cfg(test)]
pub(crate) mod array_links {
    use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
    use std::vec::Vec;

    use super::LinkStore;

    /// Link cells in an array (link `k` is element `k - 1`), for free-list
    /// tests without the reservation.
    pub struct ArrayLinks(Vec<AtomicU32>);

    impl ArrayLinks {
        pub fn new(n: usize) -> Self {
            ArrayLinks((0..n).map(|_| AtomicU32::new(0)).collect())
        }

        pub fn cell(&self, link: u32) -> &AtomicU32 {
            &self.0[link as usize - 1]
        }

        /// Pushes links `links` (in order) onto the shared list.
        pub fn push_all(&self, flh: &AtomicU64, links: &[u32]) {
            for &l in links {
                // SAFETY: the test owns every slot it pushes.
                unsafe { super::push(flh, self.cell(l), l) };
            }
        }
    }

    impl LinkStore for ArrayLinks {
        unsafe fn load_link(&self, link: u32) -> u32 {
            self.cell(link).load(Ordering::Relaxed)
        }
    }
}

#[cfg(test)]
mod tests {
    use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
    use std::vec::Vec;

    use super::array_links::ArrayLinks;
    use super::*;
    use crate::{free_list, private_list};

    #[test]
    fn zero_word_is_an_empty_list() {
        let flh = AtomicU64::new(0);
        let links = ArrayLinks::new(4);
        assert_eq!(free_list::pop(&flh, &links), Pop::Empty);
        assert_eq!(free_list::take_all(&flh), 0);
        let head = AtomicU32::new(0);
        // SAFETY: the test owns the list.
        assert_eq!(unsafe { private_list::pop(&head, &links) }, None);
    }

    #[test]
    fn shared_push_then_pop_is_lifo_and_counts_pushes() {
        let flh = AtomicU64::new(0);
        let links = ArrayLinks::new(4);
        links.push_all(&flh, &[1, 2, 3]);
        assert_eq!(flh.load(Ordering::Relaxed) >> 32, 3, "three pushes");
        assert_eq!(free_list::pop(&flh, &links), Pop::Slot(3));
        assert_eq!(free_list::pop(&flh, &links), Pop::Slot(2));
        links.push_all(&flh, &[4]);
        assert_eq!(free_list::pop(&flh, &links), Pop::Slot(4));
        assert_eq!(free_list::pop(&flh, &links), Pop::Slot(1));
        assert_eq!(free_list::pop(&flh, &links), Pop::Empty);
        assert_eq!(
            flh.load(Ordering::Relaxed) >> 32,
            4,
            "pops keep the counter"
        );
    }

    #[test]
    fn take_all_hands_over_the_chain_and_keeps_the_counter() {
        let flh = AtomicU64::new(0);
        let links = ArrayLinks::new(4);
        links.push_all(&flh, &[1, 2, 3]);
        let stale = flh.load(Ordering::Relaxed);
        let first = free_list::take_all(&flh);
        assert_eq!(first, 3);
        assert_eq!(flh.load(Ordering::Relaxed), 3 << 32, "empty, counter kept");
        // The chain becomes a private list as it is.
        let head = AtomicU32::new(first);
        // SAFETY: the test owns the list.
        let order: Vec<u32> =
            std::iter::from_fn(|| unsafe { private_list::pop(&head, &links) }).collect();
        assert_eq!(order, [3, 2, 1]);
        // A pop that read the list before it was taken cannot succeed, even
        // with its head pushed back.
        links.push_all(&flh, &[3]);
        assert_eq!(flh.load(Ordering::Relaxed) as u32, stale as u32);
        assert!(
            flh.compare_exchange(
                stale,
                stale & !0xffff_ffff | 2,
                Ordering::Acquire,
                Ordering::Relaxed
            )
            .is_err()
        );
    }

    #[test]
    fn stale_head_after_aba_fails_its_cas() {
        // Replay the ABA sequence by hand: a popper reads head A (next B), then
        // others pop A, pop B and push A back. The stale popper's CAS must fail.
        let flh = AtomicU64::new(0);
        let links = ArrayLinks::new(8);
        links.push_all(&flh, &[3, 2, 1]);
        let stale = flh.load(Ordering::Acquire);
        assert_eq!(stale as u32, 1);
        assert_eq!(free_list::pop(&flh, &links), Pop::Slot(1));
        assert_eq!(free_list::pop(&flh, &links), Pop::Slot(2));
        links.push_all(&flh, &[1]);
        let now = flh.load(Ordering::Relaxed);
        assert_eq!(now as u32, 1, "slot 1 is the head again");
        assert_eq!(now >> 32, 4, "but the push counter moved");
        let stale_new = stale & !0xffff_ffff | 2;
        assert!(
            flh.compare_exchange(stale, stale_new, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        );
    }

    #[test]
    fn collisions_are_told_apart_by_the_push_counter() {
        let flh = AtomicU64::new(0);
        let links = ArrayLinks::new(8);
        links.push_all(&flh, &[1, 2]);
        // A pop collided with another thread's pop: the counter did not move.
        let before = flh.load(Ordering::Relaxed);
        assert_eq!(free_list::pop(&flh, &links), Pop::Slot(2));
        let popped = Pop::Collision {
            expected: before,
            observed: flh.load(Ordering::Relaxed),
        };
        assert!(
            !popped.is_push_collision(),
            "a pop is contention: fail over"
        );
        // A pop collided with a free into this list: the counter moved.
        let before = flh.load(Ordering::Relaxed);
        links.push_all(&flh, &[2]);
        let pushed = Pop::Collision {
            expected: before,
            observed: flh.load(Ordering::Relaxed),
        };
        assert!(
            pushed.is_push_collision(),
            "a free is no contention: stay home"
        );
        assert!(!Pop::Empty.is_push_collision());
    }
}
