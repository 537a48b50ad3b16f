//! Which part of each region is memory in use: its *committed* prefix.
//!
//! Slots are handed out from a region's start upwards (the never-used tail
//! only grows), so what a region has in use is a prefix of it. Each region
//! records how many bytes from its start are committed, and a claim of
//! never-used slots ([`cold_path`](crate::cold_path)) commits up to its end
//! before the slots are handed out. What committing does depends on how
//! the layout's address space is held ([`reservation`](crate::reservation)):
//!
//! * **reserved** (the default): the whole reservation is left out of core
//!   dumps (`MADV_DONTDUMP`) when it is made, and committing puts the prefix
//!   back in (`MADV_DODUMP`), with the slab's metadata at its first commit.
//!   A core dump then holds what the program used, not terabytes of
//!   untouched zeros, and a debugger sees every block. Nothing can fail: the
//!   memory is usable whatever the kernel answers.
//! * **on demand** (no reservation): committing maps the prefix at its
//!   layout address (`MAP_FIXED_NOREPLACE`), so only what is used counts
//!   against an address-space limit or the commit limit of strict
//!   overcommit. It fails when the kernel refuses; the claim is then given
//!   back and the allocation looks elsewhere, down to null.
//!
//! A commit runs ahead of the need, by what the region has committed in the
//! reservation and by a quarter of it on demand (at most [`MAX_AHEAD`]), so
//! a region growing to `n` bytes costs about `log2(n / 64 KiB)` system calls
//! (`log1.25` on demand), and a mapping per region: consecutive commits of a
//! region merge into one mapping. Commits never shrink. On demand they are
//! serialized by one lock (the kernel serializes these calls on the
//! process's address space anyway).

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::{features, geometry, layout, metadata, sys};

/// Commits are rounded up to this (64 KiB: a step of never-used slots).
const COMMIT_ALIGN: usize = layout::NEW_MEMORY_STEP;

/// The most a commit runs ahead of the need.
const MAX_AHEAD: usize = 32 << 20;

/// The committed bytes of the region of (slab, size class), given the
/// slab's address.
#[inline(always)]
fn cell(slab_addr: usize, sc: u32) -> &'static AtomicU64 {
    &metadata::shared(slab_addr, sc).committed
}

/// Bytes of the region of (slab, size class) that are committed.
#[inline]
pub fn committed(slab_addr: usize, sc: u32) -> usize {
    // Acquire: pairs with the Release store in `commit_slow`; a thread that
    // sees the bytes committed sees the mapping made.
    cell(slab_addr, sc).load(Ordering::Acquire) as usize
}

/// Makes the first `end` bytes of the region of (slab, size class) memory
/// in use (see the module documentation). False when the kernel refuses
/// (on demand only); nothing is committed then.
#[inline]
pub fn commit(slab_addr: usize, sc: u32, end: usize) -> bool {
    committed(slab_addr, sc) >= end || commit_slow(slab_addr, sc, end)
}

/// [`commit`] when the region must grow.
#[cold]
#[inline(never)]
fn commit_slow(slab_addr: usize, sc: u32, end: usize) -> bool {
    if in_reservation(slab_addr, sc, end) {
        return true;
    }
    let Some(_guard) = Lock::take() else {
        return false;
    };
    let cell = cell(slab_addr, sc);
    // Relaxed: under the lock, which ordered the last store.
    let done = cell.load(Ordering::Relaxed) as usize;
    if done >= end {
        return true;
    }
    let region = layout::region_addr(slab_addr, sc);
    // Ahead, by a quarter (what runs ahead counts against the limit), if
    // the kernel allows it, else just what is needed.
    let (ahead, exact) = targets(sc, done, end, 2);
    for want in [ahead, exact] {
        if sys::map_at(region + done, want - done).is_ok() {
            features::mapped_on_demand(region + done, want - done);
            // Release: publishes the mapping with the count (see
            // `committed`).
            cell.store(want as u64, Ordering::Release);
            return true;
        }
        if want == exact {
            break;
        }
    }
    false
}

/// [`dump`] if the layout is still the reservation; false (nothing done)
/// if it is mapped on demand. Counted in [`IN_RESERVATION`] meanwhile, so
/// that [`keep_committed`] sees the count it raises: either this commit
/// sees the geometry the give-up stored, or the give-up sees this count
/// and waits for it.
fn in_reservation(slab_addr: usize, sc: u32, end: usize) -> bool {
    // SeqCst (with `on_demand_now`): against `keep_committed`'s store of
    // the geometry and its loads of this count (a store-load pair each way).
    IN_RESERVATION.fetch_add(1, Ordering::SeqCst);
    let reserved = !geometry::on_demand_now();
    if reserved {
        dump(slab_addr, sc, end);
    }
    // Release: the raised count happens before the give-up reads it.
    IN_RESERVATION.fetch_sub(1, Ordering::Release);
    reserved
}

/// Commits in the reservation under way ([`in_reservation`]).
static IN_RESERVATION: AtomicUsize = AtomicUsize::new(0);

/// Gives up the reservation at `base`: records the geometry on demand
/// (`code`, `value`), waits for the commits under way in the reservation,
/// then unmaps everything of it but the slabs' metadata and the regions'
/// committed prefixes, which stay where they are. Under the commit lock,
/// so no commit on demand runs meanwhile. False if the calling thread
/// holds the lock (a signal handler interrupting a commit).
pub fn keep_committed(base: usize, code: u64, value: u64) -> bool {
    let Some(_guard) = Lock::take() else {
        return false;
    };
    if geometry::on_demand_now() {
        return true;
    }
    geometry::set_geometry(code, value);
    // SeqCst: see `in_reservation`; Acquire for the counts it raised.
    while IN_RESERVATION.load(Ordering::SeqCst) != 0 {
        sys::yield_now();
    }
    let mut from = base;
    for slab in 0..layout::NUM_SLABS {
        let slab_addr = layout::slab_addr(base, slab);
        let kept = slab_metadata(slab_addr).chain(
            (0..layout::NUM_SCS as u32)
                .map(|sc| (layout::region_addr(slab_addr, sc), committed(slab_addr, sc))),
        );
        for (start, len) in kept.filter(|&(_, len)| len > 0) {
            if start > from {
                sys::unmap(sys::ptr_at(from), start - from);
            }
            from = from.max(start + len);
        }
    }
    sys::unmap(sys::ptr_at(from), base + layout::TOTAL_SIZE - from);
    true
}

/// Where a region of size class `sc` with `done` bytes committed and `end`
/// needed commits up to: ahead of the need by `done >> shift` (at most
/// [`MAX_AHEAD`]), or just the need.
fn targets(sc: u32, done: usize, end: usize, shift: u32) -> (usize, usize) {
    let span = layout::slots_span(sc);
    let exact = end.next_multiple_of(COMMIT_ALIGN).min(span);
    let ahead = end
        .max(done + (done >> shift).min(MAX_AHEAD))
        .next_multiple_of(COMMIT_ALIGN)
        .min(span);
    (ahead, exact)
}

/// [`commit`] in the reservation: into core dumps, with the slab's metadata
/// the first time (so only slabs in use split the reservation). No lock:
/// marking pages dumpable again is harmless, so threads that race here
/// mark overlapping ranges, and the count only grows, each thread raising
/// it past what it marked once that is done.
fn dump(slab_addr: usize, sc: u32, end: usize) {
    let cell = cell(slab_addr, sc);
    // Relaxed: where to start marking; everything below it was marked
    // before it was counted.
    let done = cell.load(Ordering::Relaxed) as usize;
    // Ahead by all it has: what runs ahead is untouched, holes in a core.
    let (ahead, _) = targets(sc, done, end, 0);
    let bit = 1 << layout::slab_of(slab_addr);
    // Relaxed: decides who marks the metadata; nothing is published.
    if DUMPED.fetch_or(bit, Ordering::Relaxed) & bit == 0 {
        slab_metadata(slab_addr).for_each(|(addr, len)| sys::set_dumped(addr, len, true));
    }
    sys::set_dumped(
        layout::region_addr(slab_addr, sc) + done,
        ahead - done,
        true,
    );
    // Release: see `committed`.
    cell.fetch_max(ahead as u64, Ordering::Release);
}

/// The slabs whose metadata is in core dumps (the reservation), as a bit
/// set.
static DUMPED: AtomicUsize = AtomicUsize::new(0);

/// The pages of the metadata of the slab at `slab_addr`
/// ([`layout::METADATA`]), as (address, length).
fn slab_metadata(slab_addr: usize) -> impl Iterator<Item = (usize, usize)> + Clone {
    let page = sys::page_size();
    metadata::METADATA.into_iter().map(move |(start, end)| {
        let start = (slab_addr + start) & !(page - 1);
        (start, (slab_addr + end).next_multiple_of(page) - start)
    })
}

/// Maps the metadata of every slab of a layout on demand at `base`. `Err`
/// holds the `errno` of the refusal (`EEXIST`: something is mapped there),
/// and nothing stays mapped then.
pub fn map_metadata(base: usize) -> Result<(), i32> {
    let ranges =
        (0..layout::NUM_SLABS).flat_map(|slab| slab_metadata(layout::slab_addr(base, slab)));
    for (i, (addr, len)) in ranges.clone().enumerate() {
        if let Err(e) = sys::map_at(addr, len) {
            ranges
                .take(i)
                .for_each(|(addr, len)| sys::unmap(sys::ptr_at(addr), len));
            return Err(e);
        }
    }
    Ok(())
}

/// The lock of commits: the holding thread (`pthread_self`), 0 when free.
static LOCK: AtomicUsize = AtomicUsize::new(0);

/// The commit lock, held.
struct Lock;

impl Lock {
    /// Takes the lock. `None` if the calling thread holds it already (a
    /// signal handler that allocates, interrupting a commit): that
    /// allocation fails instead of waiting for itself.
    fn take() -> Option<Lock> {
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() } as usize;
        loop {
            // Acquire: what the last holder committed happens before.
            match LOCK.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Some(Lock),
                Err(holder) if holder == me => return None,
                Err(_) => sys::yield_now(),
            }
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        // Release: publishes the commit with the lock.
        LOCK.store(0, Ordering::Release);
    }
}

/// In a `fork` child: frees the lock, which a thread of the parent may have
/// held (it does not exist here). Its commit happened before the fork or
/// not at all, and the count says which, but for a mapping made and not
/// yet counted: that region's next commit on demand then meets it and
/// fails, and the allocation looks elsewhere.
pub fn reset_after_fork() {
    // Relaxed: the child runs one thread now.
    LOCK.store(0, Ordering::Relaxed);
    IN_RESERVATION.store(0, Ordering::Relaxed);
}
