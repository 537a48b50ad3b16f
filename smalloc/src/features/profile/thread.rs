//! Each sampling thread's record, outside the heap: a few free slots of the
//! profile's slab per size class, the walks of its last distinct stacks, and
//! (for the first records) a shard of the stack totals of its own.
//!
//! * **Slots**: a sampled block freed by a thread with a record goes to the
//!   record (up to [`room`] per size class), and its next sample of that size
//!   class takes it back: no compare-and-swap on the shared list that every
//!   sampling thread uses, and no link written into a block that has left
//!   the cache. Beyond the room, slots go to the slab's shared list as
//!   before.
//! * **Stacks**: see [`Walks`]: a sample taken from a stack seen lately is
//!   recognized by rereading the words its walk read, independent loads
//!   instead of a chain, and needs no lookup in the stack table.
//!
//! A thread takes a record at its first sample (the lowest free one) and
//! gives it back at its exit (a pthread key's destructor) or, in a `fork`
//! child, when it is not the thread that forked; the record keeps its slots
//! and walks for the next thread that takes it (programs that start
//! threads over and over start them alike). A thread that finds every
//! record taken samples without one. Slots in a free record are taken by a
//! sample that would otherwise touch new memory, and given to the shared
//! lists by a trim. Only the holder reads or writes a record's slots and
//! walks (one who takes a free record only for that holds it meanwhile;
//! the fork child handler runs when the child has no other thread); the
//! statistics read the slot counts.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicUsize, Ordering};

use super::stack::Walks;
use crate::features::links::SlotLink;
use crate::layout::{self, NUM_SCS, PROFILE_SLAB};
use crate::metadata::shared;
use crate::thread_words::profile::RECORD;
use crate::thread_words::{self, load as profile_word, store as set_profile_word};
use crate::{free_list, geometry, sys};

/// Records: threads that sample at once with a record each.
pub const RECORDS: usize = 1024;
/// Most slots a record keeps of one size class.
const CACHED: usize = 8;
/// Most bytes of slots a record keeps of one size class (but one slot).
const CACHED_BYTES: usize = 2 << 20;
/// Walks a record keeps: the stacks of that many distinct recent samples
/// are known without a walk.
const WALKS: usize = 4;
/// In the record word: the thread takes no record (it is exiting, or found
/// none free).
const NONE: usize = 1;

/// One thread's record.
#[repr(C, align(64))]
pub struct Record {
    /// Whether a thread holds the record.
    taken: AtomicBool,
    /// Slots kept, per size class (read by the statistics).
    counts: [AtomicU8; NUM_SCS],
    /// Their links, per size class.
    links: [[AtomicU32; CACHED]; NUM_SCS],
    /// The walks of the last samples (the holder's only).
    walks: UnsafeCell<Walks<WALKS>>,
}

// SAFETY: `walks` is only touched by the thread that holds the record (see
// the module documentation); every other field is atomic.
unsafe impl Sync for Record {}

/// The records' mapping (0 until the first start).
static RECORDS_AT: AtomicUsize = AtomicUsize::new(0);
/// The pthread key whose destructor gives a record back (see
/// `thread_words::key_once`).
static KEY: AtomicUsize = AtomicUsize::new(0);
/// Whether the fork child handler is registered.
static FORK: AtomicBool = AtomicBool::new(false);
/// Records ever taken are below this number.
static USED: AtomicUsize = AtomicUsize::new(0);

/// Maps the records if not yet done; false if the OS refused.
pub fn init() -> bool {
    // Acquire: whoever sees the address sees the mapping.
    if RECORDS_AT.load(Ordering::Acquire) != 0 {
        return true;
    }
    let len = size_of::<Record>() * RECORDS;
    let Some(m) = sys::map(0, len, false) else {
        return false;
    };
    // AcqRel/Acquire: publishes the mapping; the loser unmaps its own.
    if RECORDS_AT
        .compare_exchange(0, sys::expose(m), Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        sys::unmap(m, len);
    }
    true
}

/// Record `i`, if the records are mapped.
fn record(i: usize) -> Option<&'static Record> {
    debug_assert!(i < RECORDS);
    // Acquire: see `init`.
    let base = RECORDS_AT.load(Ordering::Acquire);
    // SAFETY: `init` mapped RECORDS zeroed records at `base`, never unmapped;
    // all-zero is a free record (its walk knows no stack).
    (base != 0).then(|| unsafe { &*sys::ptr_at::<Record>(base + i * size_of::<Record>()) })
}

/// The calling thread's record, taken now if it has none yet; `None` when
/// every record is taken or the thread is exiting. Called inside the
/// profiler's re-entrancy guard (taking one may allocate).
pub fn mine() -> Option<&'static Record> {
    match profile_word::<RECORD>() {
        0 => take(),
        NONE => None,
        // SAFETY: the word holds our record's address (set by `take`).
        addr => Some(unsafe { &*sys::ptr_at::<Record>(addr) }),
    }
}

/// The calling thread's record if it has one (never takes one).
fn held() -> Option<&'static Record> {
    match profile_word::<RECORD>() {
        0 | NONE => None,
        // SAFETY: as in `mine`.
        addr => Some(unsafe { &*sys::ptr_at::<Record>(addr) }),
    }
}

/// Takes a free record for the calling thread.
#[cold]
#[inline(never)]
fn take() -> Option<&'static Record> {
    set_profile_word::<RECORD>(NONE);
    // The lowest free one: the first records have stack totals of their own
    // (see `table::EXCLUSIVE`).
    let (i, r) = (0..RECORDS).find_map(|i| Some((i, record(i)?.claim()?)))?;
    // Relaxed: bounds the scans of the records; a record counts once its
    // claim is visible anyway.
    USED.fetch_max(i + 1, Ordering::Relaxed);
    // SAFETY: we hold the record now.
    unsafe { (*r.walks.get()).handed_to_this_thread() };
    let addr = core::ptr::from_ref(r).addr();
    set_profile_word::<RECORD>(addr);
    if let Some(key) = thread_words::key_once(&KEY, Some(at_exit)) {
        // SAFETY: a valid key; the value is the record's address, read back
        // only by `at_exit`.
        unsafe { libc::pthread_setspecific(key, sys::ptr_at::<libc::c_void>(addr)) };
    }
    // Relaxed: only decides who registers.
    if !cfg!(miri) && !FORK.swap(true, Ordering::Relaxed) {
        // SAFETY: `after_fork` only touches atomics and this thread's
        // words: async-signal-safe, as a fork child handler must be.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork)) };
    }
    Some(r)
}

/// The records ever taken.
fn used() -> impl Iterator<Item = &'static Record> {
    // Relaxed: see `take`.
    (0..USED.load(Ordering::Relaxed)).map_while(record)
}

impl Record {
    /// Takes the record if it is free.
    fn claim(&self) -> Option<&Record> {
        // Acquire: the last holder's writes to the record (its slots, its
        // walks) happen before ours; it released them (`release`). Relaxed
        // on failure: passed over.
        (!self.taken.load(Ordering::Relaxed)
            && self
                .taken
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok())
        .then_some(self)
    }

    /// Gives the record back, with its slots and walks.
    fn release(&self) {
        // Release: see `claim`.
        self.taken.store(false, Ordering::Release);
    }

    /// The holder's walks of its last samples.
    ///
    /// # Safety
    /// Called by the thread holding the record, which keeps no other
    /// reference to the walks.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn walks(&self) -> &mut Walks<WALKS> {
        // SAFETY: per the contract, nobody else touches them.
        unsafe { &mut *self.walks.get() }
    }

    /// The record's number (the holder's shard of the stack totals).
    pub fn shard(&self) -> usize {
        // Relaxed: the records never move once mapped (we are one of them).
        let first = RECORDS_AT.load(Ordering::Relaxed);
        (core::ptr::from_ref(self).addr() - first) / size_of::<Record>()
    }

    /// A kept slot of size class `sc`, if any (the holder only).
    #[inline]
    pub fn take_slot(&self, sc: u32) -> Option<*mut u8> {
        let c = &self.counts[sc as usize];
        // Relaxed: only the holder writes the record's slots.
        let n = c.load(Ordering::Relaxed);
        if n == 0 {
            return None;
        }
        // Relaxed: as above.
        let link = self.links[sc as usize][n as usize - 1].load(Ordering::Relaxed);
        c.store(n - 1, Ordering::Relaxed);
        Some(sys::ptr_at(layout::slot_of_link(region(sc), link)))
    }

    /// Keeps the freed slot at `addr`, of size class `sc`, if there is room
    /// (the holder only).
    fn keep(&self, addr: usize, sc: u32) -> bool {
        let c = &self.counts[sc as usize];
        // Relaxed: only the holder writes the record's slots.
        let n = c.load(Ordering::Relaxed);
        if n as usize >= room(sc) {
            return false;
        }
        // Relaxed: as above.
        self.links[sc as usize][n as usize].store(layout::link_of(addr), Ordering::Relaxed);
        c.store(n + 1, Ordering::Relaxed);
        true
    }

    /// Puts every kept slot on the profile slab's shared lists (the holder
    /// only).
    fn flush(&self) {
        for sc in layout::MIN_SC..=layout::MAX_SC {
            while let Some(p) = self.take_slot(sc) {
                let addr = p.addr();
                // SAFETY: the record held the slot, free and not on any list;
                // its link cell is its first four bytes.
                let p = unsafe {
                    free_list::push(
                        &shared(layout::slab_addr_of(addr), sc).flh,
                        &SlotLink::of(addr),
                        layout::link_of(addr),
                    )
                };
                crate::large_freed::pushed(layout::slab_of(addr), sc, p.onto_empty);
            }
        }
    }
}

/// Slots of size class `sc` a record keeps: at most [`CACHED`] and
/// [`CACHED_BYTES`], at least one; none of the sizes that give their pages
/// back on free, and none in the secure mode (whose checks are made on the
/// shared list).
fn room(sc: u32) -> usize {
    if cfg!(feature = "secure") || sc >= crate::layout::RELEASE_SC {
        return 0;
    }
    (CACHED_BYTES / crate::layout::slot_size_nonzero(sc)).clamp(1, CACHED)
}

/// The region of size class `sc` of the profile's slab.
fn region(sc: u32) -> usize {
    let base = geometry::base_raw();
    layout::region_addr(layout::slab_addr(base, PROFILE_SLAB), sc)
}

/// The slot at `addr` of the profile's slab, of size class `sc`, is being
/// freed: true if the calling thread's record keeps it.
pub fn keep(addr: usize, sc: u32) -> bool {
    held().is_some_and(|r| r.keep(addr, sc))
}

/// Slots of size class `sc` kept by records (for the statistics: free
/// slots of the profile's slab, on no list).
pub fn kept(sc: u32) -> u64 {
    used()
        // Relaxed: a count, exact when no thread samples or frees.
        .map(|r| u64::from(r.counts[sc as usize].load(Ordering::Relaxed)))
        .sum()
}

/// A slot of size class `sc` from a free record, for a sample that would
/// otherwise touch new memory.
pub fn idle_slot(sc: u32) -> Option<*mut u8> {
    used().find_map(|r| {
        let r = r.claim()?;
        let p = r.take_slot(sc);
        r.release();
        p
    })
}

/// Puts the slots of the free records and of the calling thread's own on
/// the shared lists (a trim then reaches them).
pub fn flush_idle() {
    if let Some(r) = held() {
        r.flush();
    }
    for r in used().filter_map(Record::claim) {
        r.flush();
        r.release();
    }
}

/// The key's destructor: the exiting thread gives its record back and takes
/// none again (destructors run after this one may still allocate).
extern "C" fn at_exit(value: *mut libc::c_void) {
    set_profile_word::<RECORD>(NONE);
    // SAFETY: the value is our record's address (see `take`).
    unsafe { &*value.cast::<Record>() }.release();
}

/// Runs in a `fork` child: the records of the parent's other threads are
/// free (their threads do not exist here), their slots still kept.
extern "C" fn after_fork() {
    let mine = held().map(|r| core::ptr::from_ref(r).addr());
    for r in used() {
        // Relaxed: the child's only thread reads what it wrote or inherited.
        if r.taken.load(Ordering::Relaxed) && Some(core::ptr::from_ref(r).addr()) != mine {
            r.release();
        }
    }
}
