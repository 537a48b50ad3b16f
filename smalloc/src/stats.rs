//! Statistics: what the heap holds, read from the metadata the allocator
//! keeps anyway (each list's flh and never-used tail, the owners' private
//! heads and fresh runs) and by walking the free lists. Nothing of this
//! runs on the hot paths. [`snapshot`] allocates nothing and may be called
//! from any thread at any time; [`report`] writes it as text.
//!
//! **Exact when quiescent**: when no thread allocates or frees during the
//! snapshot, every count is exact: the library's own sweeps and trims,
//! which take lists whole for a moment, wait for it, and it waits for
//! theirs (up to a second). **While threads run**, each list is read
//! at a slightly different moment, so the totals need not add up to any one
//! moment's heap; and a walk of a list may meet a slot that was taken
//! meanwhile (its first bytes are then someone's data). A walk follows a
//! link only if it names a slot its region has handed out, and takes at
//! most as many steps as the region has handed-out slots, so it always
//! ends, reads only the reservation, and counts at most that many; a walk
//! that met a link naming no such slot is counted in
//! [`Snapshot::walks_cut`]. The derived live count is then an estimate,
//! never below 0 nor above the slots handed out.

mod report;

pub use crate::features::Counts;
pub use crate::geometry::{Geometry, Why};
pub use report::report;

use core::sync::atomic::Ordering;

use crate::features::links::SharedLinks;
use crate::features::{self, NUM_EVENTS};
use crate::free_list::LinkStore;
use crate::layout::{self, LARGE_SC, MAX_SC, MIN_SC, NUM_SCS, NUM_SLABS};
use crate::metadata::{self, private_index, shared, tables};
use crate::{big, commit, occupancy, ownership, sys};

/// One size class, summed over the slabs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// Slots ever handed out (each counted once, however often reused;
    /// since the purge last reset the region, if it did).
    pub handed_out: u64,
    /// Freed slots on the shared lists.
    pub free_shared: u64,
    /// Freed slots on the owners' private lists, and those owners hold
    /// from other slabs (`held`) (with the `profile` feature, and in the
    /// profile's slab: kept by the sampling threads).
    pub free_private: u64,
    /// Pushes onto the shared lists: frees by threads that did not own the
    /// slot's slab, and of large slots (modulo 2^32 per list).
    pub shared_frees: u64,
    /// Allocations and frees (zero without the `counters` feature).
    pub counts: Counts,
}

impl ClassStats {
    /// Freed slots waiting on a list.
    pub fn free(&self) -> u64 {
        self.free_shared + self.free_private
    }

    /// Slots handed out and not freed.
    pub fn live(&self) -> u64 {
        self.handed_out.saturating_sub(self.free())
    }
}

/// One slab.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlabStats {
    /// Whether a thread owns the slab (allocates its small slots on private
    /// lists).
    pub owned: bool,
    /// Live threads whose home is this slab.
    pub threads: usize,
    /// Bytes of the slots the slab ever handed out.
    pub handed_out_bytes: u64,
    /// Bytes of its freed slots waiting on its lists.
    pub free_bytes: u64,
    /// Allocations and frees of its slots (zero without the `counters`
    /// feature).
    pub counts: Counts,
}

/// What the heap holds: see the module documentation for when it is exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The reservation's base address (0 before the first allocation).
    pub reservation_base: usize,
    /// The reservation's size in bytes (virtual address space only; 0 when
    /// mapped on demand).
    pub reservation_size: usize,
    /// How the layout's address space is held: one reservation, or mapped
    /// on demand (and why).
    pub geometry: Geometry,
    /// Bytes of the slots' regions that are committed: in core dumps (the
    /// reservation) or mapped (on demand); the slabs' metadata left out.
    pub committed_bytes: u64,
    /// Regions with committed bytes: in the reservation, one mapping each
    /// besides those of the untouched parts between them.
    pub committed_regions: u64,
    /// Bytes of the largest slot that new blocks get (2 GiB; 32 MiB on
    /// demand): larger blocks get a mapping each.
    pub largest_slot: usize,
    /// Per size class, indexed by size class (slots of `2^sc` bytes; the
    /// entries below [`layout::MIN_SC`] stay zero).
    pub classes: [ClassStats; NUM_SCS],
    /// Per slab.
    pub slabs: [SlabStats; NUM_SLABS],
    /// Big allocations (above the largest slot, a mapping each) now.
    pub big_count: u64,
    /// Bytes mapped for them.
    pub big_bytes: u64,
    /// Resident bytes of the slots' regions (`mincore` of every page that
    /// was ever handed out; the slab metadata and big mappings left out).
    pub resident_bytes: u64,
    /// Bytes a trim could give back: the resident pages past the first of
    /// freed slots of at least two pages (below the size that gives them
    /// back on free), on any list.
    pub trimmable_bytes: u64,
    /// Resident bytes the purge and trims gave back to the kernel, ever
    /// (the pages of regions reset, and those past the first of freed
    /// slots).
    pub purged_bytes: u64,
    /// Regions (slab, size class) that purges and trims reset to never-used,
    /// ever (every slot they had handed out was free).
    pub purge_resets: u64,
    /// Spans (runs of whole pages of freed slots below 64 KiB, between
    /// slots in use) given back by purges and trims, ever.
    pub purge_spans: u64,
    /// Times the purge's thread nudged an owner that took no cold path for
    /// a sweep onto one, so that it hands its private lists over, ever.
    pub purge_nudges: u64,
    /// List walks that met a link naming no handed-out slot (only while
    /// threads allocate and free).
    pub walks_cut: u64,
    /// Whether the event counters are compiled in (the `counters` feature):
    /// then `counts` and `events` hold them.
    pub counters: bool,
    /// Cold-path events, in [`Event`](crate::counters::Event) order.
    pub events: [u64; NUM_EVENTS],
}

impl Snapshot {
    /// A snapshot of an empty heap.
    pub const EMPTY: Snapshot = Snapshot {
        reservation_base: 0,
        reservation_size: 0,
        geometry: Geometry::None,
        committed_bytes: 0,
        committed_regions: 0,
        largest_slot: layout::MAX_SLOT_SIZE,
        classes: [ClassStats {
            handed_out: 0,
            free_shared: 0,
            free_private: 0,
            shared_frees: 0,
            counts: Counts::ZERO,
        }; NUM_SCS],
        slabs: [SlabStats {
            owned: false,
            threads: 0,
            handed_out_bytes: 0,
            free_bytes: 0,
            counts: Counts::ZERO,
        }; NUM_SLABS],
        big_count: 0,
        big_bytes: 0,
        resident_bytes: 0,
        trimmable_bytes: 0,
        purged_bytes: 0,
        purge_resets: 0,
        purge_spans: 0,
        purge_nudges: 0,
        walks_cut: 0,
        counters: features::config::COUNTERS,
        events: [0; NUM_EVENTS],
    };

    /// The size classes that ever handed out a slot (since the purge last
    /// reset their regions, or with counted operations), with their stats.
    pub fn used_classes(&self) -> impl Iterator<Item = (u32, &ClassStats)> {
        (MIN_SC..=MAX_SC)
            .map(|sc| (sc, &self.classes[sc as usize]))
            .filter(|(_, c)| c.handed_out != 0 || c.counts != Counts::ZERO)
    }

    /// Bytes of `f(class)` slots over the size classes.
    fn bytes(&self, f: impl Fn(&ClassStats) -> u64) -> u64 {
        self.used_classes()
            .map(|(sc, c)| f(c) * layout::slot_size(sc) as u64)
            .sum()
    }

    /// Bytes of the slots ever handed out: the memory the heap has touched.
    pub fn handed_out_bytes(&self) -> u64 {
        self.bytes(|c| c.handed_out)
    }

    /// Bytes of the slots in use (whole slots, not the sizes asked for),
    /// big allocations left out.
    pub fn live_bytes(&self) -> u64 {
        self.bytes(ClassStats::live)
    }

    /// Bytes of the freed slots waiting on a list.
    pub fn free_bytes(&self) -> u64 {
        self.bytes(ClassStats::free)
    }

    /// Slots in use.
    pub fn live_slots(&self) -> u64 {
        self.used_classes().map(|(_, c)| c.live()).sum()
    }

    /// Freed slots waiting on a list.
    pub fn free_slots(&self) -> u64 {
        self.used_classes().map(|(_, c)| c.free()).sum()
    }

    /// Allocations and frees over the size classes (zero without the
    /// `counters` feature).
    pub fn counts(&self) -> Counts {
        let mut t = Counts::ZERO;
        self.used_classes().for_each(|(_, c)| t.add(&c.counts));
        t
    }
}

/// Takes a snapshot of the heap. Waits for a sweep or trim in progress,
/// and holds the next ones back meanwhile: they take lists whole for a
/// moment, which would show their slots as live.
pub fn snapshot() -> Snapshot {
    // Bounded: a sweep this very thread was in when a signal handler
    // called `exit` (the report at exit) would never end.
    let locked = crate::purge::lock_for_snapshot(SWEEP_WAIT_MS);
    let s = read();
    if locked {
        crate::purge::unlock();
    }
    s
}

/// How long [`snapshot`] waits for a sweep in progress before it reads the
/// lists anyway (an estimate then, as while threads run).
const SWEEP_WAIT_MS: u64 = 1000;

/// [`snapshot`], under the sweep lock.
fn read() -> Snapshot {
    let mut s = Snapshot::EMPTY;
    (s.big_count, s.big_bytes) = big::usage();
    (s.purged_bytes, s.purge_resets) = crate::purge::purged();
    s.purge_spans = crate::spans::given_back();
    s.purge_nudges = crate::nudge::nudged();
    let Some(base) = crate::geometry::base() else {
        return s;
    };
    s.reservation_base = base;
    s.geometry = crate::geometry::geometry();
    s.largest_slot = layout::slot_size(crate::geometry::largest_sc());
    if s.geometry == Geometry::Reserved {
        s.reservation_size = layout::TOTAL_SIZE;
    }
    for slab in 0..NUM_SLABS {
        for sc in MIN_SC..=MAX_SC {
            let n = commit::committed(layout::slab_addr(base, slab), sc) as u64;
            s.committed_bytes += n;
            s.committed_regions += u64::from(n != 0);
        }
    }
    let threads = occupancy::live_threads();
    let owned = !ownership::unowned() & !layout::RESERVED_SLABS;
    let page = sys::page_size();
    let used = occupancy::ever_used() | layout::RESERVED_SLABS;
    for slab in (0..NUM_SLABS).filter(|i| used & (1 << i) != 0) {
        let slab_addr = layout::slab_addr(base, slab);
        let block = metadata::private_block(slab_addr);
        let mut st = SlabStats {
            owned: owned & (1 << slab) != 0,
            threads: threads[slab],
            ..SlabStats::default()
        };
        for sc in MIN_SC..=MAX_SC {
            let size = layout::slot_size(sc);
            let trims = size >= 2 * page && sc < crate::layout::RELEASE_SC;
            let trimmable = trims.then_some(&mut s.trimmable_bytes);
            let mut l = read_list(slab_addr, block, sc, &mut s.walks_cut, trimmable);
            // The profile's slab has no owner: its private slots are those
            // the sampling threads' records keep.
            if slab == layout::PROFILE_SLAB {
                l.free_private += features::kept(sc);
            }
            // Counted even where the purge reset the region since.
            let n = features::counts(slab_addr, sc);
            s.classes[sc as usize].counts.add(&n);
            st.counts.add(&n);
            if l.handed_out == 0 {
                continue;
            }
            let region = layout::region_addr(slab_addr, sc);
            let touched = layout::slots_end(sc, l.handed_out as u32).next_multiple_of(page);
            s.resident_bytes += sys::resident(region, touched) as u64;
            let free = l.free_shared + l.free_private;
            let c = &mut s.classes[sc as usize];
            c.handed_out += l.handed_out;
            c.free_shared += l.free_shared;
            c.free_private += l.free_private;
            c.shared_frees += l.shared_frees;
            st.handed_out_bytes += l.handed_out * size as u64;
            st.free_bytes += free * size as u64;
        }
        features::read_events(slab_addr, &mut s.events);
        s.slabs[slab] = st;
    }
    // The slots owners hold (`held`): free, and counted with the slab they
    // belong to.
    // A slot of `sc` that is memory: the chains may change meanwhile.
    let valid = |a: usize, sc: u32| {
        layout::base_of(a) == base
            && layout::sc_of(a) == sc
            && layout::is_slot_start(a, sc)
            && layout::slot_of(a, sc) < claimed_slots(layout::slab_addr_of(a), sc)
    };
    let mut count = |held: usize, sc: u32| {
        s.classes[sc as usize].free_private += 1;
        s.slabs[layout::slab_of(held)].free_bytes += layout::slot_size(sc) as u64;
    };
    for slab in (0..NUM_SLABS).filter(|i| used & (1 << i) != 0) {
        let block = metadata::private_block(layout::slab_addr(base, slab));
        for sc in MIN_SC..LARGE_SC {
            crate::held::for_each_held_in(block, sc, |a| valid(a, sc), |a| count(a, sc));
        }
    }
    // And those threads without a slab hold (`guest`).
    crate::guest::for_each_held(valid, &mut count);
    s
}

/// What one (slab, size class) holds.
#[derive(Default)]
pub(crate) struct ListStats {
    pub handed_out: u64,
    pub free_shared: u64,
    pub free_private: u64,
    pub shared_frees: u64,
}

/// Reads the lists of (slab, size class); with `trimmable`, adds to it the
/// resident bytes past the first page of each freed slot.
pub(crate) fn read_list(
    slab_addr: usize,
    block: usize,
    sc: u32,
    cut: &mut u64,
    mut trimmable: Option<&mut u64>,
) -> ListStats {
    // Relaxed loads throughout: a snapshot reads; nothing is read through
    // these values but links, which are checked before they are followed.
    let claimed = claimed_slots(slab_addr, sc);
    if claimed == 0 {
        return ListStats::default();
    }
    let run = tables(block).fresh(sc).load(Ordering::Relaxed);
    let waiting = ((run >> 32) as u32).saturating_sub(run as u32);
    let flh = shared(slab_addr, sc).flh.load(Ordering::Relaxed);
    let region = layout::region_addr(slab_addr, sc);
    let head = if sc < LARGE_SC {
        tables(block).head(private_index(sc))
    } else {
        tables(block).large_head(sc)
    };
    let first = head.load(Ordering::Relaxed);
    let free_private = walk(region, sc, first, claimed, cut, trimmable.as_deref_mut());
    let given_back = crate::spans::slots_given_back(slab_addr, sc);
    ListStats {
        handed_out: u64::from(claimed.saturating_sub(waiting).saturating_sub(given_back)),
        free_shared: walk(region, sc, flh as u32, claimed, cut, trimmable),
        free_private,
        shared_frees: flh >> 32,
    }
}

/// The slots of size class `sc` of the slab at `slab_addr` ever claimed
/// from its tail that are memory (on demand, a claim the kernel refused may
/// leave the tail past them).
fn claimed_slots(slab_addr: usize, sc: u32) -> u32 {
    let committed = (commit::committed(slab_addr, sc).saturating_sub(layout::first_slot(sc))
        / layout::slot_size_nonzero(sc))
    .min(u32::MAX as usize) as u32;
    // Relaxed: a snapshot reads.
    shared(slab_addr, sc)
        .tail
        .load(Ordering::Relaxed)
        .min(committed)
}

/// Counts the slots of the list starting at `first` in `region` (of slots
/// of size class `sc`, `claimed` of which were ever claimed from the tail):
/// stops at the end, at a link naming no claimed slot (counted in `cut`),
/// or after `claimed` steps. With `trimmable`, adds the resident bytes past
/// each slot's first page to it.
fn walk(
    region: usize,
    sc: u32,
    first: u32,
    claimed: u32,
    cut: &mut u64,
    trimmable: Option<&mut u64>,
) -> u64 {
    let size = layout::slot_size(sc);
    let mut trimmable = trimmable;
    let mut n = 0;
    let mut link = first;
    while link != 0 {
        let offset = (link as usize).wrapping_sub(4);
        if n >= u64::from(claimed)
            || offset >= layout::slots_end(sc, claimed)
            || !layout::is_slot_start(offset, sc)
        {
            *cut += 1;
            break;
        }
        n += 1;
        let slot = region + offset;
        if let Some(t) = trimmable.as_deref_mut() {
            let (first, len) = sys::whole_pages(slot + 1, slot + size);
            *t += sys::resident(first, len) as u64;
        }
        // SAFETY: `link` names a slot of this region. The list is not ours:
        // the slot may be handed out meanwhile, as in a pop of a shared
        // list, and what is read is checked above before it is followed (a
        // bad link of the secure mode is never in range).
        link = unsafe { SharedLinks { region }.load_link(link) };
    }
    n
}

/// Releases the pages past the first of freed slots, largest size classes
/// first, until at most `pad` bytes of what a trim could release are left
/// ([`Snapshot::trimmable_bytes`]; all of it for 0). Returns the bytes
/// released that were resident. Safe while other threads allocate and
/// free: it never releases a page of a slot someone is handed meanwhile.
pub fn trim(pad: usize) -> usize {
    // The profile's slots kept by ended threads' records, and ours: onto
    // the shared lists, where the trim reaches them.
    features::before_trim();
    let budget = if pad == 0 {
        usize::MAX
    } else {
        snapshot().trimmable_bytes.saturating_sub(pad as u64) as usize
    };
    crate::trim::release(budget)
}

#[cfg(test)]
mod tests {
    use core::alloc::{GlobalAlloc, Layout};
    use std::time::{Duration, Instant};

    use super::{SWEEP_WAIT_MS, snapshot};
    use crate::{Smalloc, purge};

    #[test]
    #[cfg_attr(miri, ignore = "a snapshot calls mincore, which Miri lacks")]
    fn a_snapshot_waits_a_bounded_time_for_a_sweep_that_does_not_end() {
        let l = Layout::from_size_align(48, 8).unwrap();
        // SAFETY: a non-zero layout; the block stays live.
        let p = unsafe { Smalloc.alloc(l) };
        assert!(!p.is_null());
        // As a sweep this thread was in when a signal handler took over.
        purge::lock();
        let start = Instant::now();
        let s = snapshot();
        let waited = start.elapsed();
        purge::unlock();
        assert_eq!(s.live_slots(), 1);
        let bound = Duration::from_millis(SWEEP_WAIT_MS);
        assert!(waited >= bound / 2 && waited < bound * 5, "{waited:?}");
        // With the lock free, no wait.
        let start = Instant::now();
        assert_eq!(snapshot().live_slots(), 1);
        assert!(start.elapsed() < bound / 2, "{:?}", start.elapsed());
    }
}
