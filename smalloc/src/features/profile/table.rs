//! Where samples are kept, outside the sampled heap, lock-free, in two
//! fixed mappings made on the first start (untouched pages cost nothing):
//!
//! * the stack table: each distinct call stack once, with the totals of
//!   every sample taken there since the start (the allocation profile). A
//!   program's stacks repeat, so a sample adds to a line already in cache,
//!   and the table fills only with [`STACKS`] distinct stacks, however long
//!   the program runs;
//! * the live map: one entry per slot of the profile's slab (indexed by
//!   size class and slot number), written when the slot is handed out as a
//!   sample and cleared by its free; and, for big blocks (their own
//!   mappings, which have no slot number), a small table of entries keyed
//!   by the mapping's address. The live profile is what they hold.
//!
//! A sample whose stack finds no room, whose slot number is beyond the
//! map's width, or whose big block finds no free entry, is lost (counted,
//! and the profile says so); the allocation itself is served as usual.

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use super::approx;
use super::stack::Frames;
use crate::layout::{self, NUM_SCS};
use crate::sys;

/// Distinct stacks the table holds (about 9 MiB of address space).
pub const STACKS: usize = 1 << 14;
/// Return addresses kept per stack.
pub const MAX_FRAMES: usize = 64;
/// Entries a stack's hash probes before the table counts as full.
const PROBES: usize = 32;
/// Sampled slots per size class the live map can tell apart (slot numbers
/// below this).
pub const MAP_SLOTS: usize = 1 << 16;
/// Live big blocks the profile can hold at once.
pub const BIG_SLOTS: usize = 1024;
/// Fixed-point scale of estimated counts.
const ONE: f64 = 65536.0;

/// Shards of a stack's totals that one thread each adds to, by plain loads
/// and stores: the holder of record `n` (`profile::thread`), for `n` below
/// this. Other threads add to one more shard with atomic adds. A locked
/// add waits for the thread's earlier stores to leave the store buffer,
/// which after a program's writes to memory out of the cache took as long
/// as the rest of a sample; and threads sampling one stack at once would
/// pass a shared line between them.
pub const EXCLUSIVE: usize = 8;
/// Shards of a stack's totals.
const SHARDS: usize = EXCLUSIVE + 1;

/// One distinct stack and the totals of its samples.
#[repr(C, align(64))]
struct Stack {
    /// The frames' hash (never 0); 0 while the entry is free.
    key: AtomicU64,
    /// The depth + 1, once the frames are written; 0 before.
    ready: AtomicU32,
    /// Return addresses, innermost first.
    frames: [AtomicUsize; MAX_FRAMES],
    /// The totals, in shards.
    totals: [Shard; SHARDS],
}

/// A share of a stack's totals, a cache line of its own.
#[repr(C, align(64))]
struct Shard {
    /// Samples taken here.
    samples: AtomicU64,
    /// Blocks they stand for, in 1/[`ONE`].
    count: AtomicU64,
    /// Bytes they stand for.
    bytes: AtomicU64,
}

/// The live map's entry for a slot of the profile's slab, a cache line of
/// its own (threads sampling at once write neighbouring slots' entries).
#[repr(C, align(64))]
struct Live {
    /// The stack's index + 1 while the slot is a live sample; 0 otherwise.
    stack: AtomicU32,
    /// Bytes of the block.
    size: AtomicUsize,
    /// Blocks the sample stands for, in 1/[`ONE`].
    count: AtomicU64,
    /// Clock at the allocation (ns since the epoch).
    alloc_ns: AtomicU64,
}

impl Live {
    /// Makes the entry a live sample of stack `i` (the caller owns the
    /// entry until it clears it).
    fn write(&self, i: usize, size: usize, count: u64, now: u64) {
        // Relaxed: published by `stack`.
        self.size.store(size, Ordering::Relaxed);
        self.count.store(count, Ordering::Relaxed);
        self.alloc_ns.store(now, Ordering::Relaxed);
        // Release: a snapshot that sees the stack sees the fields.
        self.stack.store(i as u32 + 1, Ordering::Release);
    }

    /// The entry as a snapshot reads it, if it is a live sample.
    fn read(&self) -> Option<LiveRead> {
        // Acquire: pairs with `write`'s Release.
        let stack = self.stack.load(Ordering::Acquire);
        if stack == 0 {
            return None;
        }
        // Relaxed: published by `stack`.
        let read = LiveRead {
            stack: stack as usize - 1,
            size: self.size.load(Ordering::Relaxed),
            count: self.count.load(Ordering::Relaxed) as f64 / ONE,
            alloc_ns: self.alloc_ns.load(Ordering::Relaxed),
        };
        // Freed (or freed and sampled again) meanwhile: skipped, or read
        // again next time. Acquire: as above.
        (self.stack.load(Ordering::Acquire) == stack).then_some(read)
    }
}

/// A live big block's entry: the mapping's address (0: free) and its
/// sample.
struct Big {
    start: AtomicUsize,
    live: Live,
}

/// The stack table, the live map, the highest slot number + 1 the map has
/// seen per size class, the big blocks' entries and how many are taken,
/// the samples lost.
static STACK_TABLE: AtomicUsize = AtomicUsize::new(0);
static MAP: AtomicUsize = AtomicUsize::new(0);
static SEEN: [AtomicU32; NUM_SCS] = [const { AtomicU32::new(0) }; NUM_SCS];
static BIG: [Big; BIG_SLOTS] = [const {
    Big {
        start: AtomicUsize::new(0),
        live: Live {
            stack: AtomicU32::new(0),
            size: AtomicUsize::new(0),
            count: AtomicU64::new(0),
            alloc_ns: AtomicU64::new(0),
        },
    }
}; BIG_SLOTS];
static BIG_TAKEN: AtomicUsize = AtomicUsize::new(0);
static LOST: AtomicU64 = AtomicU64::new(0);

/// Maps the table and the map if not yet done; false if the OS refused.
pub fn init() -> bool {
    // Acquire/Release: whoever sees the address sees the mapping.
    if MAP.load(Ordering::Acquire) != 0 {
        return true;
    }
    let stacks = size_of::<Stack>() * STACKS;
    let map = size_of::<Live>() * MAP_SLOTS * NUM_SCS;
    let (Some(s), Some(m)) = (sys::map(0, stacks, false), sys::map(0, map, false)) else {
        return false;
    };
    // Two threads starting at once: the loser unmaps its own.
    if STACK_TABLE
        .compare_exchange(0, sys::expose(s), Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        sys::unmap(s, stacks);
    }
    if MAP
        .compare_exchange(0, sys::expose(m), Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        sys::unmap(m, map);
    }
    true
}

fn stack(i: usize) -> &'static Stack {
    debug_assert!(i < STACKS);
    // Acquire: see `init`.
    let base = STACK_TABLE.load(Ordering::Acquire);
    // SAFETY: `init` mapped STACKS zeroed entries at `base` (callers check
    // it ran), never unmapped; every field is atomic.
    unsafe { &*sys::ptr_at::<Stack>(base + i * size_of::<Stack>()) }
}

/// The live map's entry for size class `sc`, slot number `n`.
fn live(sc: u32, n: usize) -> &'static Live {
    debug_assert!(n < MAP_SLOTS && (sc as usize) < NUM_SCS);
    // Acquire: see `init`.
    let map = MAP.load(Ordering::Acquire);
    // SAFETY: inside the mapping `init` made (callers check it ran), never
    // unmapped; every field is atomic.
    unsafe { &*sys::ptr_at::<Live>(map + size_of::<Live>() * (sc as usize * MAP_SLOTS + n)) }
}

/// The size class and slot number of the profile's slot at `addr`, if the
/// map can hold it.
fn place(addr: usize) -> Option<(u32, usize)> {
    let sc = layout::sc_of(addr);
    let region = layout::region_addr(layout::slab_addr_of(addr), sc);
    let n = layout::slot_index(addr - region, sc) as usize;
    // Acquire: see `init`.
    (n < MAP_SLOTS && MAP.load(Ordering::Acquire) != 0).then_some((sc, n))
}

/// The index of `frames` (whose hash is `key`, never 0) in the stack table,
/// entered if new; `None` when no entry within [`PROBES`] of its hash is
/// free or equal.
fn find(frames: &[usize], key: u64) -> Option<usize> {
    debug_assert!(key != 0);
    for probe in 0..PROBES {
        let i = (key as usize).wrapping_add(probe) % STACKS;
        let s = stack(i);
        // Acquire: pairs with the winner's Release of `ready` below.
        let mut k = s.key.load(Ordering::Acquire);
        if k == 0 {
            // Relaxed: the claim only decides who writes the frames; they
            // are published by `ready`.
            match s
                .key
                .compare_exchange(0, key, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    // Relaxed, published by the Release store of `ready`.
                    for (cell, &f) in s.frames.iter().zip(frames) {
                        cell.store(f, Ordering::Relaxed);
                    }
                    s.ready.store(frames.len() as u32 + 1, Ordering::Release);
                    return Some(i);
                }
                Err(now) => k = now,
            }
        }
        // An entry still being written is passed over: at worst the stack
        // gets a second entry, which the outputs merge.
        // Acquire: pairs with the Release of `ready`.
        if k == key && s.ready.load(Ordering::Acquire) as usize == frames.len() + 1 {
            // SAFETY: the first `frames.len()` cells were written before the
            // Release store of `ready` that we read (Acquire) and are never
            // written again, so plain reads of them race with nothing;
            // `AtomicUsize` has the layout of `usize`. One comparison of the
            // slices (a `memcmp`) instead of a load and a test per frame.
            let stored = unsafe {
                core::slice::from_raw_parts(s.frames.as_ptr().cast::<usize>(), frames.len())
            };
            if stored == frames {
                return Some(i);
            }
        }
    }
    None
}

/// The index of the stack `frames` in the stack table, entered if new;
/// `None` (the sample counted lost) when the table has no room for it.
pub fn intern(frames: &Frames) -> Option<usize> {
    let found = find(frames.get(), frames.key());
    if found.is_none() {
        lose();
    }
    found
}

/// A sample of `size` bytes standing for `count` blocks, taken with the
/// stack at `i` by the holder of record `shard` (or [`EXCLUSIVE`] or more:
/// by any thread): added to the stack's totals; the count in fixed point.
fn account(i: usize, shard: usize, size: usize, count: f64) -> u64 {
    let fixed = approx::to_u64(count * ONE);
    let bytes = approx::to_u64(approx::to_f64(size) * count);
    let totals = &stack(i).totals;
    if shard < EXCLUSIVE {
        let t = &totals[shard];
        // Relaxed loads and stores: this thread is the shard's only writer
        // (the record's previous holder gave it back with a Release that
        // our claim of it acquired); a snapshot reads each total a moment
        // old.
        let add = |a: &AtomicU64, v: u64| a.store(a.load(Ordering::Relaxed) + v, Ordering::Relaxed);
        add(&t.samples, 1);
        add(&t.count, fixed);
        add(&t.bytes, bytes);
    } else {
        let t = &totals[EXCLUSIVE];
        // Relaxed: totals, read only by a snapshot.
        t.samples.fetch_add(1, Ordering::Relaxed);
        t.count.fetch_add(fixed, Ordering::Relaxed);
        t.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    fixed
}

/// Records a sample of the slot at `addr` (`size` bytes, standing for
/// `count` blocks), taken with the stack at `i` ([`intern`]), in totals'
/// shard `shard`: false (and the sample counted lost) when the map cannot
/// hold the slot.
pub fn add(addr: usize, size: usize, count: f64, i: usize, shard: usize, now: u64) -> bool {
    let Some((sc, n)) = place(addr) else {
        lose();
        return false;
    };
    let fixed = account(i, shard, size, count);
    live(sc, n).write(i, size, fixed, now);
    // Relaxed: only bounds a snapshot's scan (a plain load first: the bound
    // rarely moves).
    let seen = &SEEN[sc as usize];
    if seen.load(Ordering::Relaxed) <= n as u32 {
        seen.fetch_max(n as u32 + 1, Ordering::Relaxed);
    }
    true
}

/// The sampled slot at `addr` is being freed: it leaves the live profile.
pub fn freed(addr: usize) {
    if let Some((sc, n)) = place(addr) {
        // Relaxed: the program orders this free after the allocation that
        // wrote the entry; a snapshot rechecks the entry (`Live::read`).
        live(sc, n).stack.store(0, Ordering::Relaxed);
    }
}

/// Records a sample of the big block mapped at `start` (as [`add`]):
/// false (and the sample counted lost) when every big entry is taken.
pub fn add_big(start: usize, size: usize, count: f64, i: usize, shard: usize, now: u64) -> bool {
    debug_assert!(start != 0);
    // Acquire: the entry's last user cleared it before its Release (see
    // `big_freed`).
    let Some(e) = BIG.iter().find(|e| {
        e.start.load(Ordering::Relaxed) == 0
            && e.start
                .compare_exchange(0, start, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }) else {
        lose();
        return false;
    };
    let fixed = account(i, shard, size, count);
    e.live.write(i, size, fixed, now);
    // Relaxed: only tells `big_freed` whether to look.
    BIG_TAKEN.fetch_add(1, Ordering::Relaxed);
    true
}

/// The big block mapped at `start` is being unmapped: if it is a live
/// sample, it leaves the live profile. A scan of the big entries, and only
/// while some are taken: a big block's free is an `munmap` anyway.
pub fn big_freed(start: usize) {
    // Relaxed: the program orders this free after the allocation that took
    // the entry, on this thread or with its own synchronization.
    if BIG_TAKEN.load(Ordering::Relaxed) == 0 {
        return;
    }
    if let Some(e) = BIG
        .iter()
        .find(|e| e.start.load(Ordering::Relaxed) == start)
    {
        // Relaxed: a snapshot rechecks the entry (`Live::read`).
        e.live.stack.store(0, Ordering::Relaxed);
        // Release: the next user of the entry sees it cleared.
        e.start.store(0, Ordering::Release);
        // Relaxed: as in `add_big`.
        BIG_TAKEN.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The big block mapped at `from` moved to `to` (`mremap`): its entry, if
/// it has one, follows it.
pub fn big_moved(from: usize, to: usize) {
    // Relaxed: as in `big_freed`.
    if from == to || BIG_TAKEN.load(Ordering::Relaxed) == 0 {
        return;
    }
    if let Some(e) = BIG.iter().find(|e| e.start.load(Ordering::Relaxed) == from) {
        // Relaxed: only this block's owner looks the entry up by address.
        e.start.store(to, Ordering::Relaxed);
    }
}

/// A distinct stack and the totals of its samples, as read back.
pub struct StackRead<'a> {
    /// Its index in the table (what [`LiveRead::stack`] refers to).
    pub index: usize,
    /// Samples taken.
    pub samples: u64,
    /// Blocks they stand for.
    pub count: f64,
    /// Bytes they stand for.
    pub bytes: f64,
    /// Return addresses, innermost first.
    pub frames: &'a [usize],
}

/// Calls `f` with every stack entered so far.
pub fn for_each_stack(mut f: impl FnMut(&StackRead)) {
    // Acquire: see `init`.
    if STACK_TABLE.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut frames = [0; MAX_FRAMES];
    for index in 0..STACKS {
        let s = stack(index);
        // Acquire: pairs with `intern`'s Release. Relaxed is enough for the
        // untouched (all-zero) pages; the load maps no memory.
        let ready = s.ready.load(Ordering::Acquire) as usize;
        if ready == 0 {
            continue;
        }
        let depth = ready - 1;
        for (d, cell) in frames.iter_mut().zip(&s.frames[..depth]) {
            // Relaxed: published by `ready`.
            *d = cell.load(Ordering::Relaxed);
        }
        // Relaxed: totals, each exact or a moment old.
        let sum = |f: fn(&Shard) -> &AtomicU64| -> u64 {
            s.totals.iter().map(|t| f(t).load(Ordering::Relaxed)).sum()
        };
        f(&StackRead {
            index,
            samples: sum(|t| &t.samples),
            count: sum(|t| &t.count) as f64 / ONE,
            bytes: sum(|t| &t.bytes) as f64,
            frames: &frames[..depth],
        });
    }
}

/// A live sample, as read back.
pub struct LiveRead {
    /// The index of its stack ([`StackRead::index`]).
    pub stack: usize,
    /// Bytes of the block.
    pub size: usize,
    /// Blocks it stands for.
    pub count: f64,
    /// Clock at the allocation (ns since the epoch).
    pub alloc_ns: u64,
}

/// Calls `f` with every live sample.
pub fn for_each_live(mut f: impl FnMut(&LiveRead)) {
    // Acquire: see `init`.
    if MAP.load(Ordering::Acquire) == 0 {
        return;
    }
    for (sc, seen) in SEEN.iter().enumerate() {
        // Relaxed: see `add`.
        for n in 0..seen.load(Ordering::Relaxed) as usize {
            if let Some(read) = live(sc as u32, n).read() {
                f(&read);
            }
        }
    }
    for e in &BIG {
        if let Some(read) = e.live.read() {
            f(&read);
        }
    }
}

/// Counts a sample lost.
pub fn lose() {
    // Relaxed: a statistic.
    LOST.fetch_add(1, Ordering::Relaxed);
}

/// Samples lost so far (no room for a stack or a slot, or no slot).
pub fn lost() -> u64 {
    // Relaxed: a statistic.
    LOST.load(Ordering::Relaxed)
}
