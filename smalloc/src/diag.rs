//! Diagnostic event counters of the cold paths, compiled only with the
//! `diag` cargo feature (off by default). Without it, [`count`] is an empty
//! inline function and no counter exists, so a default build carries
//! nothing of this module. With it, every event is one
//! relaxed `fetch_add` on a shared counter: use it to see where a workload
//! goes off the hot path, not to time it.

/// Cold-path events, counted with the `diag` feature.
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

#[cfg(feature = "diag")]
static COUNTS: [core::sync::atomic::AtomicU64; NUM_EVENTS] =
    [const { core::sync::atomic::AtomicU64::new(0) }; NUM_EVENTS];

/// Counts one `e` (nothing without the `diag` feature).
#[inline(always)]
pub fn count(e: Event) {
    #[cfg(feature = "diag")]
    // Relaxed: a statistic; nothing is ordered by it.
    COUNTS[e as usize].fetch_add(1, core::sync::atomic::Ordering::Relaxed);
    #[cfg(not(feature = "diag"))]
    let _ = e;
}

/// Adds `n` to the count of `e` (nothing without the `diag` feature).
#[inline(always)]
pub fn add(e: Event, n: u64) {
    #[cfg(feature = "diag")]
    // Relaxed: a statistic; nothing is ordered by it.
    COUNTS[e as usize].fetch_add(n, core::sync::atomic::Ordering::Relaxed);
    #[cfg(not(feature = "diag"))]
    let _ = (e, n);
}

/// The time stamp counter, for [`Event::SearchTicks`] (0 without the
/// `diag` feature or off x86-64).
#[inline(always)]
pub fn ticks() -> u64 {
    #[cfg(all(feature = "diag", target_arch = "x86_64"))]
    // SAFETY: rdtsc has no preconditions on x86-64.
    return unsafe { core::arch::x86_64::_rdtsc() };
    #[allow(unreachable_code)]
    0
}

/// The counts so far, in [`Event`] order; `None` without the `diag` feature.
pub fn snapshot() -> Option<[u64; NUM_EVENTS]> {
    #[cfg(feature = "diag")]
    {
        // Relaxed: a statistic.
        Some(core::array::from_fn(|i| {
            COUNTS[i].load(core::sync::atomic::Ordering::Relaxed)
        }))
    }
    #[cfg(not(feature = "diag"))]
    None
}
