//! Where samples are kept: a fixed table of records in its own mapping
//! (never in the sampled heap), appended to lock-free, and a map from each
//! sampled slot to its record for the free. Both are mapped on the first
//! start, untouched pages cost nothing.
//!
//! A sampled block lives in [`PROFILE_SLAB`](layout::PROFILE_SLAB); its
//! (size class, slot number) indexes the map. A slot number beyond the
//! map's width, or a full table, makes the sample lost (counted, and the
//! profile says so); the allocation itself is served as usual.

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::layout::{self, NUM_SCS};
use crate::sys;

/// Records in the table: about 36 MiB of address space, touched as used.
pub const CAPACITY: usize = 1 << 16;
/// Return addresses kept per sample.
pub const MAX_FRAMES: usize = 64;
/// Sampled slots per size class the map can tell apart (slot numbers
/// below this).
const MAP_SLOTS: usize = 1 << 18;

/// One sample.
#[repr(C)]
struct Record {
    /// Non-zero once the record is written (the depth + 1).
    ready: AtomicU32,
    /// Size class of the slot.
    sc: AtomicU32,
    /// Clock (ns since the epoch) at the allocation.
    alloc_ns: AtomicU64,
    /// Clock at the free; 0 while live.
    freed_ns: AtomicU64,
    /// The mean sampling interval it was taken under (bytes).
    mean: AtomicUsize,
    /// Return addresses, innermost first.
    frames: [AtomicUsize; MAX_FRAMES],
}

/// The records, the map, the count of records taken, of samples lost.
static RECORDS: AtomicUsize = AtomicUsize::new(0);
static MAP: AtomicUsize = AtomicUsize::new(0);
static TAKEN: AtomicUsize = AtomicUsize::new(0);
static LOST: AtomicU64 = AtomicU64::new(0);

/// Maps the table and the map if not yet done; false if the OS refused.
pub fn init() -> bool {
    // Acquire/Release: whoever sees the address sees the mapping.
    if MAP.load(Ordering::Acquire) != 0 {
        return true;
    }
    let records = size_of::<Record>() * CAPACITY;
    let map = 4 * MAP_SLOTS * NUM_SCS;
    let (Some(r), Some(m)) = (sys::map(0, records, false), sys::map(0, map, false)) else {
        return false;
    };
    // Two threads starting at once: the loser unmaps its own.
    if RECORDS
        .compare_exchange(0, sys::expose(r), Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        sys::unmap(r, records);
    }
    if MAP
        .compare_exchange(0, sys::expose(m), Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        sys::unmap(m, map);
    }
    true
}

fn record(i: usize) -> &'static Record {
    debug_assert!(i < CAPACITY);
    // Acquire: see `init`.
    let base = RECORDS.load(Ordering::Acquire);
    // SAFETY: `init` mapped CAPACITY zeroed records at `base`, never
    // unmapped; every field is atomic.
    unsafe { &*sys::ptr_at::<Record>(base + i * size_of::<Record>()) }
}

/// The map's entry for the sampled slot at `addr`, if it has one.
fn entry(addr: usize) -> Option<&'static AtomicU32> {
    let sc = layout::sc_of(addr);
    let region = layout::region_addr(layout::slab_addr_of(addr), sc);
    let n = (addr - region) >> sc;
    // Acquire: see `init`.
    let map = MAP.load(Ordering::Acquire);
    if n >= MAP_SLOTS || map == 0 {
        return None;
    }
    // SAFETY: inside the mapping `init` made, never unmapped; 4-aligned.
    Some(unsafe { &*sys::ptr_at::<AtomicU32>(map + 4 * (sc as usize * MAP_SLOTS + n)) })
}

/// Records a sample of the slot at `addr`, taken at mean interval `mean`,
/// with the stack `frames`: false
/// (and the sample counted lost) when the table is full or the slot
/// cannot be mapped.
pub fn add(addr: usize, frames: &[usize], now: u64, mean: usize) -> bool {
    let Some(e) = entry(addr) else {
        LOST.fetch_add(1, Ordering::Relaxed);
        return false;
    };
    // Relaxed: only hands out distinct indexes.
    let i = TAKEN.fetch_add(1, Ordering::Relaxed);
    if i >= CAPACITY {
        // Relaxed: a statistic.
        LOST.fetch_add(1, Ordering::Relaxed);
        return false;
    }
    let r = record(i);
    let depth = frames.len().min(MAX_FRAMES);
    // Relaxed stores, published by the Release store of `ready`.
    for (cell, &f) in r.frames.iter().zip(&frames[..depth]) {
        cell.store(f, Ordering::Relaxed);
    }
    r.sc.store(layout::sc_of(addr), Ordering::Relaxed);
    r.alloc_ns.store(now, Ordering::Relaxed);
    r.mean.store(mean, Ordering::Relaxed);
    r.ready.store(depth as u32 + 1, Ordering::Release);
    // Relaxed: read only by this slot's free, which the program orders
    // after the allocation returns.
    e.store(i as u32 + 1, Ordering::Relaxed);
    true
}

/// The sampled slot at `addr` is being freed: its record leaves the live
/// profile.
pub fn freed(addr: usize, now: u64) {
    // Relaxed: see `add`.
    if let Some(i) = entry(addr).map(|e| e.swap(0, Ordering::Relaxed)) {
        if i != 0 {
            // Release: a reader that sees it freed sees the record.
            record(i as usize - 1)
                .freed_ns
                .store(now.max(1), Ordering::Release);
        }
    }
}

/// One sample as read back.
#[derive(Clone, Copy)]
pub struct Sample {
    /// Size class of the slot (slots of `2^sc` bytes).
    pub sc: u32,
    /// Clock at the allocation (ns since the epoch).
    pub alloc_ns: u64,
    /// Clock at the free; 0 while the block is live.
    pub freed_ns: u64,
    /// The mean sampling interval it was taken under (bytes).
    pub mean: usize,
    /// Number of frames.
    pub depth: usize,
    /// Return addresses, innermost first (`frames[..depth]`).
    pub frames: [usize; MAX_FRAMES],
}

/// Calls `f` with every sample written so far.
pub fn for_each(mut f: impl FnMut(&Sample)) {
    // Acquire: see `init`.
    if RECORDS.load(Ordering::Acquire) == 0 {
        return;
    }
    // Relaxed: records beyond are skipped until `ready`.
    let n = TAKEN.load(Ordering::Relaxed).min(CAPACITY);
    for i in 0..n {
        let r = record(i);
        // Acquire: pairs with `add`'s Release.
        let ready = r.ready.load(Ordering::Acquire) as usize;
        if ready == 0 {
            continue;
        }
        let mut s = Sample {
            sc: r.sc.load(Ordering::Relaxed),
            alloc_ns: r.alloc_ns.load(Ordering::Relaxed),
            // Acquire: pairs with `freed`'s Release.
            freed_ns: r.freed_ns.load(Ordering::Acquire),
            mean: r.mean.load(Ordering::Relaxed),
            depth: ready - 1,
            frames: [0; MAX_FRAMES],
        };
        for (d, cell) in s.frames.iter_mut().zip(&r.frames[..s.depth]) {
            // Relaxed: published by `ready`.
            *d = cell.load(Ordering::Relaxed);
        }
        f(&s);
    }
}

/// Counts a sample lost (no slot for it).
pub fn lose() {
    // Relaxed: a statistic.
    LOST.fetch_add(1, Ordering::Relaxed);
}

/// Samples lost so far (table full, or a slot the map cannot hold).
pub fn lost() -> u64 {
    // Relaxed: a statistic.
    LOST.load(Ordering::Relaxed)
}
