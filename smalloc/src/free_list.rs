//! The lock-free free list of one (slab, size class): pop and push on its flh.
//!
//! # The flh word
//!
//! ```text
//!  63                 32  31  30                      0
//! +---------------------+----+-------------------------+
//! |    push counter     |used|   head slot number      |
//! +---------------------+----+-------------------------+
//! ```
//!
//! * `head slot number`: the first free slot of the list.
//! * `used` clear: the head is the first slot of the *never-used tail*: it and
//!   every slot after it have never been handed out, so nothing was ever
//!   written into them, and the slot after the head is simply `head + 1`.
//!   A head equal to the number of slots with `used` clear means "empty".
//! * `used` set: the head slot was freed at least once; its first four bytes
//!   hold its *link*: the low 32 bits the flh had when the slot was pushed
//!   (the next slot number and that slot's own `used` flag).
//! * `push counter`: incremented by every push, so a pop that read a stale
//!   head fails its compare-and-swap even if the same slot number is back at
//!   the head (the ABA problem).
//!
//! A word of all zeros is therefore a list holding every slot of the region,
//! in order: nothing is initialized up front (zero-is-initialization), and a
//! never-used slot is never read, so handing it out does not touch its memory.
//!
//! The operations are generic over the flh cell and the link storage so the
//! very same functions run in the allocator and under loom.

use core::sync::atomic::Ordering;

/// Mask of the head slot number in the flh word and in a link.
pub const HEAD_MASK: u32 = 0x7fff_ffff;
/// The `used` flag in the flh word and in a link.
pub const USED: u32 = 0x8000_0000;
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
        // Relaxed: published by the push's Release compare-and-swap.
        self.store(link, Ordering::Relaxed)
    }
}

/// Where the links of free slots are read from by pop: the first four bytes
/// of each slot in the allocator, an array in model-checking tests.
pub trait LinkStore {
    /// Reads the link of `slot`.
    ///
    /// # Safety
    /// `slot` is a slot number of this store. The slot may meanwhile belong
    /// to someone else (a stale read); the value is then garbage and the
    /// caller's compare-and-swap fails.
    unsafe fn load_link(&self, slot: u32) -> u32;
}

/// Result of one pop attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pop {
    /// Got `slot`; `fresh` says it was never handed out before, so its
    /// memory was never written since the reservation.
    Slot {
        /// The slot number taken.
        slot: u32,
        /// Whether the slot was never handed out before.
        fresh: bool,
    },
    /// The list holds no slot.
    Empty,
    /// (Only from [`pop_or_new_memory`].) Nothing was taken: the head is a
    /// never-used slot that starts a new [`NEW_MEMORY_STEP`] of the region,
    /// or the end of the region (the list is empty); the caller asked to
    /// hear of that first.
    NewMemory,
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
    /// means another thread popped: it allocates from this slab too.
    #[inline]
    pub fn is_push_collision(&self) -> bool {
        match *self {
            Pop::Collision { expected, observed } => (expected ^ observed) & COUNTER_MASK != 0,
            _ => false,
        }
    }
}

/// Tries once to take the first free slot of the list. `num_slots` is the
/// number of slots of the region.
#[inline(always)]
pub fn pop<F: FlhCell + ?Sized, L: LinkStore + ?Sized>(flh: &F, links: &L, num_slots: u32) -> Pop {
    pop_inner(flh, links, num_slots, None)
}

/// [`pop`], except that it takes nothing and returns [`Pop::NewMemory`] when
/// the head is a never-used slot that starts a new [`NEW_MEMORY_STEP`]
/// bytes of the region, given slots of `2^slot_shift` bytes (every
/// never-used slot, for slots of that size and more): the caller may prefer
/// a freed slot elsewhere to touching new memory. An empty list (the head
/// is the end of the region) is reported the same way, which keeps the hot
/// path to one test; the region's size in bytes must be a multiple of
/// [`NEW_MEMORY_STEP`].
#[inline(always)]
pub fn pop_or_new_memory<F: FlhCell + ?Sized, L: LinkStore + ?Sized>(
    flh: &F,
    links: &L,
    num_slots: u32,
    slot_shift: u32,
) -> Pop {
    pop_inner(flh, links, num_slots, Some(slot_shift))
}

/// Bytes of never-used slots handed out between two [`Pop::NewMemory`]s
/// (64 KiB). Measured with `bench/preload` larson at 8 threads: 4 KiB
/// steps cost 5% more time than 64 KiB ones (more searches, more threads
/// meeting on one slab) for the same peak RSS.
pub const NEW_MEMORY_STEP: u64 = 1 << 16;

#[inline(always)]
fn pop_inner<F: FlhCell + ?Sized, L: LinkStore + ?Sized>(
    flh: &F,
    links: &L,
    num_slots: u32,
    new_memory_shift: Option<u32>,
) -> Pop {
    // Acquire: if the head was pushed, its link was stored before the
    // pusher's Release compare-and-swap that we read from here.
    let old = flh.load(Ordering::Acquire);
    let low = old as u32;
    let head = low & HEAD_MASK;
    let fresh = low & USED == 0;
    let next = if fresh {
        match new_memory_shift {
            // The head starts a new NEW_MEMORY_STEP of the region, or is the
            // end of the region: `num_slots << shift` is a multiple of the
            // step (checked at compile time in slots.rs), so
            // one test on the hot path covers both rare cases, and the
            // caller's plain `pop` tells them apart.
            Some(shift) if (u64::from(head) << shift) & (NEW_MEMORY_STEP - 1) == 0 => {
                debug_assert_eq!((u64::from(num_slots) << shift) % NEW_MEMORY_STEP, 0);
                debug_assert!(head <= num_slots);
                return Pop::NewMemory;
            }
            Some(_) => debug_assert!(head < num_slots),
            None if head >= num_slots => return Pop::Empty,
            None => {}
        }
        // The never-used tail continues with the next slot, still unused.
        head + 1
    } else {
        debug_assert!(head < num_slots, "used head {head} out of range");
        // SAFETY: `head` is a slot number of this region (pushes only store
        // slot numbers of the region); a stale read is caught by the CAS.
        unsafe { links.load_link(head) }
    };
    let new = (old & COUNTER_MASK) | next as u64;
    // Success Acquire: the slot's previous owner released it with the push
    // whose value (or a later read-modify-write of it, all of which continue
    // its release sequence) we replace, so its writes happen-before ours.
    // Failure Relaxed: we discard the value.
    match flh.compare_exchange(old, new, Ordering::Acquire, Ordering::Relaxed) {
        Ok(_) => {
            debug_assert!(next & HEAD_MASK <= num_slots, "link {next:#x} out of range");
            Pop::Slot { slot: head, fresh }
        }
        Err(observed) => Pop::Collision {
            expected: old,
            observed,
        },
    }
}

/// Puts `slot`, whose link cell is `link`, at the head of the list. Never
/// fails: retries until its compare-and-swap succeeds.
///
/// # Safety
/// The caller owns `slot`, which belongs to this list's region, and `link`
/// is that slot's link cell.
#[inline(always)]
pub unsafe fn push<F: FlhCell + ?Sized, C: LinkCell + ?Sized>(flh: &F, link: &C, slot: u32) {
    debug_assert!(slot <= HEAD_MASK);
    // Relaxed: we never read through the old head, we only copy its value.
    let mut old = flh.load(Ordering::Relaxed);
    loop {
        // SAFETY: the caller owns `slot`.
        unsafe { link.store_link(old as u32) };
        let new = ((old & COUNTER_MASK).wrapping_add(COUNTER_ONE)) | (USED | slot) as u64;
        // Success Release: the link just stored, and every write the owner
        // made to the slot, become visible to the pop that takes it.
        // Failure Relaxed: as for the first load.
        match flh.compare_exchange(old, new, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return,
            Err(current) => old = current,
        }
    }
}
