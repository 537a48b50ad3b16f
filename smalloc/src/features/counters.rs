//! Event counters, compiled only with the `counters` cargo feature (off by
//! default): allocations and frees per (slab, size class), those made by
//! threads that do not own the slot's slab, and the cold paths' events.
//! Without the feature every function here is empty and inlined away, and
//! nothing is stored: a default build carries nothing of this module.
//!
//! No count adds a shared atomic to the hot path. A thread counts its
//! allocations and frees of its own slab's slots in that slab's private
//! block, with a plain load and store (only the owner writes there, like
//! its private lists). Any other thread counts with a relaxed `fetch_add`
//! on the slot's shared line, which its compare-and-swap of the flh has
//! just taken. Events go to the slab where they happen.
//! [`snapshot`](crate::stats::snapshot) reads them all.

use crate::layout;

/// Whether the counters are compiled in.
pub const ENABLED: bool = cfg!(feature = "counters");

/// Cold-path events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Event {
    /// A thread's first allocation (picks its home slab).
    FirstAlloc,
    /// A thread became the owner of a slab (first allocation or later).
    Claim,
    /// An owner's private list was empty and it took the shared list whole.
    TakeShared,
    /// The thread was about to touch a new step of never-used slots, and
    /// the search for freed slots began.
    NewMemory,
    /// ... it found one on a slab no live thread calls home.
    FreedUnowned,
    /// ... on a slab that a live thread calls home.
    FreedOwned,
    /// ... of a larger size class (large slots only).
    FreedLarger,
    /// An owner short of slots took one from the slab where its last search
    /// found some, without searching.
    Borrow,
    /// Never-used slots were claimed from a tail (a step, or one slot).
    NeverUsed,
    /// A pop from the shared list at home collided with another pop.
    Contended,
    /// A retry at home after a collision with a push.
    PushRetry,
    /// The failover over other slabs and larger size classes began.
    Failover,
    /// The failover served a larger size class.
    FailoverLarger,
    /// A thread that owns no slab moved to another slab (a failover or a
    /// search).
    Move,
    /// Time stamp counter ticks spent in searches for freed slots (x86-64
    /// only).
    SearchTicks,
}

/// Number of [`Event`]s.
pub const NUM_EVENTS: usize = Event::SearchTicks as usize + 1;

/// Names of the events, in [`Event`] order.
pub const NAMES: [&str; NUM_EVENTS] = [
    "first-alloc",
    "claim",
    "take-shared",
    "new-memory",
    "freed-unowned",
    "freed-owned",
    "freed-larger",
    "borrow",
    "never-used",
    "contended",
    "push-retry",
    "failover",
    "failover-larger",
    "move",
    "search-ticks",
];

/// Allocations and frees of one size class (or one slab, or one (slab,
/// size class)) since the process started; zero without the feature.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Slots handed out (reallocations in place are not counted).
    pub allocs: u64,
    /// Slots freed.
    pub frees: u64,
    /// Of `allocs`, by threads that did not own the slot's slab.
    pub remote_allocs: u64,
    /// Of `frees`, by threads that did not own the slot's slab.
    pub remote_frees: u64,
}

impl Counts {
    /// All zero.
    pub const ZERO: Counts = Counts {
        allocs: 0,
        frees: 0,
        remote_allocs: 0,
        remote_frees: 0,
    };

    /// Adds `o` to these counts.
    pub fn add(&mut self, o: &Counts) {
        self.allocs += o.allocs;
        self.frees += o.frees;
        self.remote_allocs += o.remote_allocs;
        self.remote_frees += o.remote_frees;
    }
}

#[cfg(feature = "counters")]
mod on {
    use core::sync::atomic::{AtomicU64, Ordering};

    use super::{Counts, Event, NUM_EVENTS};
    use crate::{layout, metadata, thread_words};

    /// The owner's count of allocations (`which` 0) or frees (1) of `sc` in
    /// the private block at `block`.
    #[inline(always)]
    fn owner_word(block: usize, sc: usize, which: usize) -> &'static AtomicU64 {
        metadata::owner_count(block, sc, which)
    }

    /// The other threads' count of allocations (0) or frees (1) of `sc` in
    /// the slab at `slab_addr`.
    #[inline(always)]
    fn remote_word(slab_addr: usize, sc: u32, which: usize) -> &'static AtomicU64 {
        &metadata::shared(slab_addr, sc).remote_counts[which]
    }

    /// One more in a word only the calling thread writes.
    #[inline(always)]
    fn bump(w: &AtomicU64) {
        // Relaxed: a statistic; only the slab's owner writes this word (the
        // next owner's claim acquires this one's release), so a load and a
        // store lose no count.
        w.store(w.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    #[inline(always)]
    pub fn owner(block: usize, index: usize, which: usize) {
        bump(owner_word(block, index + 1, which));
    }

    pub fn cold(addr: usize, which: usize) {
        let sc = layout::sc_of(addr);
        let slab_addr = layout::slab_addr_of(addr);
        let block = metadata::private_block(slab_addr);
        if thread_words::load::<{ thread_words::OWNED }>() == block {
            bump(owner_word(block, sc as usize, which));
        } else {
            // Relaxed: a statistic; other threads count here too.
            remote_word(slab_addr, sc, which).fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn event(e: Event, slab_addr: usize, n: u64) {
        let events = metadata::events(layout::slab_addr_of(slab_addr));
        // Relaxed: a statistic; any thread at the slab counts here.
        events[e as usize].fetch_add(n, Ordering::Relaxed);
    }

    pub fn read(slab_addr: usize, sc: u32) -> Counts {
        let block = metadata::private_block(slab_addr);
        // Relaxed: a statistic.
        let get = |w: &AtomicU64| w.load(Ordering::Relaxed);
        let remote_allocs = get(remote_word(slab_addr, sc, 0));
        let remote_frees = get(remote_word(slab_addr, sc, 1));
        Counts {
            allocs: get(owner_word(block, sc as usize, 0)) + remote_allocs,
            frees: get(owner_word(block, sc as usize, 1)) + remote_frees,
            remote_allocs,
            remote_frees,
        }
    }

    pub fn read_events(slab_addr: usize, into: &mut [u64; NUM_EVENTS]) {
        for (n, e) in into.iter_mut().zip(metadata::events(slab_addr)) {
            // Relaxed: a statistic.
            *n += e.load(Ordering::Relaxed);
        }
    }
}

/// The hot path handed out a slot of private index `index` from the
/// private block at `block`, which the thread owns.
#[inline(always)]
pub fn owner_alloc(block: usize, index: usize) {
    #[cfg(feature = "counters")]
    on::owner(block, index, 0);
    #[cfg(not(feature = "counters"))]
    let _ = (block, index);
}

/// The hot path freed a slot of private index `index` onto the private
/// block at `block`, which the thread owns.
#[inline(always)]
pub fn owner_free(block: usize, index: usize) {
    #[cfg(feature = "counters")]
    on::owner(block, index, 1);
    #[cfg(not(feature = "counters"))]
    let _ = (block, index);
}

/// A cold path handed out the slot at `p` (nothing when null).
#[inline(always)]
pub fn alloc(p: *mut u8) {
    #[cfg(feature = "counters")]
    if !p.is_null() {
        on::cold(p.addr(), 0);
    }
    #[cfg(not(feature = "counters"))]
    let _ = p;
}

/// A cold path is freeing the slot at `addr`.
#[inline(always)]
pub fn free(addr: usize) {
    #[cfg(feature = "counters")]
    on::cold(addr, 1);
    #[cfg(not(feature = "counters"))]
    let _ = addr;
}

/// Counts one `e` at the slab holding address `at`.
#[inline(always)]
pub fn count(e: Event, at: usize) {
    count_n(e, at, 1);
}

/// Adds `n` to the count of `e` at the slab holding address `at`.
#[inline(always)]
pub fn count_n(e: Event, at: usize, n: u64) {
    #[cfg(feature = "counters")]
    on::event(e, at, n);
    #[cfg(not(feature = "counters"))]
    let _ = (e, at, n);
}

/// The time stamp counter (aarch64: the virtual counter), for
/// [`Event::SearchTicks`] (0 without the feature or on other
/// architectures).
#[inline(always)]
pub fn ticks() -> u64 {
    #[cfg(all(feature = "counters", target_arch = "x86_64"))]
    // SAFETY: rdtsc has no preconditions on x86-64.
    return unsafe { core::arch::x86_64::_rdtsc() };
    #[cfg(all(feature = "counters", target_arch = "aarch64"))]
    {
        let t: u64;
        // SAFETY: Linux lets user space read the virtual counter; the read
        // has no other effect.
        unsafe {
            core::arch::asm!("mrs {t}, cntvct_el0", t = out(reg) t, options(nomem, nostack, preserves_flags));
        }
        return t;
    }
    #[allow(unreachable_code)]
    0
}

/// The counts of (slab, size class), the slab given by its address.
pub(crate) fn read(slab_addr: usize, sc: u32) -> Counts {
    #[cfg(feature = "counters")]
    return on::read(slab_addr, sc);
    #[cfg(not(feature = "counters"))]
    {
        let _ = (slab_addr, sc);
        Counts::ZERO
    }
}

/// Adds the event counts of the slab at `slab_addr` to `into`.
pub(crate) fn read_events(slab_addr: usize, into: &mut [u64; NUM_EVENTS]) {
    #[cfg(feature = "counters")]
    on::read_events(slab_addr, into);
    #[cfg(not(feature = "counters"))]
    let _ = (slab_addr, into);
}

/// The event counts so far over all slabs, in [`Event`] order; `None`
/// without the feature.
pub fn events() -> Option<[u64; NUM_EVENTS]> {
    if !ENABLED {
        return None;
    }
    let mut e = [0; NUM_EVENTS];
    if let Some(base) = crate::geometry::base() {
        let used = crate::occupancy::ever_used() | layout::RESERVED_SLABS;
        for slab in (0..layout::NUM_SLABS).filter(|i| used & (1 << i) != 0) {
            read_events(layout::slab_addr(base, slab), &mut e);
        }
    }
    Some(e)
}

#[cfg(test)]
mod tests {
    use core::alloc::{GlobalAlloc, Layout};

    use crate::Smalloc;

    #[test]
    fn counters_count_cold_path_events_only_with_their_feature() {
        use crate::counters::{Event, events};
        let l = Layout::from_size_align(48, 8).unwrap();
        let before = events();
        // A new thread's first allocation is a cold-path event.
        std::thread::spawn(move || {
            // SAFETY: a non-zero layout; the block is freed at once.
            unsafe { Smalloc.dealloc(Smalloc.alloc(l), l) }
        })
        .join()
        .unwrap();
        let after = events();
        if cfg!(feature = "counters") {
            let (before, after) = (before.unwrap(), after.unwrap());
            let first = Event::FirstAlloc as usize;
            assert!(after[first] > before[first], "{before:?} -> {after:?}");
            assert_eq!(crate::stats::snapshot().events, after);
        } else {
            assert_eq!((before, after), (None, None));
        }
    }
}
