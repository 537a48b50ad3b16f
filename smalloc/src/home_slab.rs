//! The calling thread's home slab: which slab it allocates from, whether it
//! owns that slab, and the changes of both (first allocation, moves, exit,
//! `fork`); how many threads live on each slab is [`occupancy`].
//!
//! Each thread holds four thread-local words:
//!
//! * the *alloc word*: the address of the private block of the slab the
//!   thread owns, or of an always-empty block (the initial value). The hot
//!   path of allocation reads only this word and indexes the block with it;
//!   a thread without a slab of its own finds an empty list there and takes
//!   the cold path, with no test of its own.
//! * the *owned word*: the same private block address, or [`NOT_OWNER`]
//!   (bit 63 set, the initial value). The hot path of free reads only this
//!   word: a pointer's offset from it says whether the slot is a small slot
//!   of the owned slab, and of which size class.
//! * the *current word*: the address of the slab the thread allocates from
//!   (the same slab for an owner), 0 before the thread's first allocation;
//!   bit 0 set ([`NO_OWN`]) when the thread must not own a slab again (it is
//!   exiting, or a benchmark pinned it to a shared slab).
//! * the *search hint*: the slab where its last search for freed slots
//!   succeeded, where the next search starts.
//!
//! # How the thread-local words are reached
//!
//! Stable Rust has no `#[thread_local]` and `no_std` has no `thread_local!`,
//! so on x86-64 the words are declared in `.tdata` with `global_asm!` and
//! read with the *initial-exec* TLS model: one load of their offset from the
//! GOT (a constant the dynamic loader fills in once) and one `fs:`-relative
//! load. In an executable the linker relaxes the first load to an immediate.
//! A library using initial-exec TLS works under `LD_PRELOAD` and, within
//! glibc's static TLS surplus, when dlopen'ed; it never calls
//! `__tls_get_addr`. The alloc word's initial value is the empty block's
//! address, a relocation in the TLS image, which the dynamic loader applies
//! before it copies the image for any thread. Other architectures, and Miri
//! (which cannot run inline assembly), fall back to pthread keys.
//! Alternatives measured: `docs/tls.md`.

use crate::counters::{self, Event};
use crate::layout::{self, NUM_SLABS};
use crate::{hot_path, ownership, sys};

pub mod occupancy;

/// Thread-local words of the `profile` feature (none without it): the bytes
/// left before the next sample, the random state, the re-entrancy flag, the
/// top of the thread's stack, the thread's record.
pub const PROFILE_WORDS: usize = if cfg!(feature = "profile") { 5 } else { 0 };

/// The profiler's thread-local words, for [`profile_word`].
#[cfg(feature = "profile")]
pub mod profile_words {
    use super::tls::{PROFILE, STRIDE};
    /// Bytes left before the next sample.
    pub const LEFT: usize = PROFILE;
    /// Random state.
    pub const RNG: usize = PROFILE + STRIDE;
    /// Flags (inside the profiler).
    pub const FLAGS: usize = PROFILE + 2 * STRIDE;
    /// Top of the thread's stack.
    pub const STACK_TOP: usize = PROFILE + 3 * STRIDE;
    /// The thread's record (`profile::thread`).
    pub const RECORD: usize = PROFILE + 4 * STRIDE;
}

/// A thread-local word of the profiler ([`profile_words`]).
#[cfg(feature = "profile")]
#[inline(always)]
pub fn profile_word<const W: usize>() -> usize {
    tls::load::<W>()
}

/// Sets a thread-local word of the profiler.
#[cfg(feature = "profile")]
#[inline(always)]
pub fn set_profile_word<const W: usize>(v: usize) {
    tls::store::<W>(v)
}

/// Subtracts `v` from a thread-local word of the profiler; true if it was
/// below `v` (the subtraction wrapped).
#[cfg(feature = "profile")]
#[inline(always)]
pub fn sub_profile_word<const W: usize>(v: usize) -> bool {
    tls::sub::<W>(v)
}

/// The owned word of a thread that owns no slab.
pub const NOT_OWNER: usize = 1 << 63;

/// Flag in the current word: the thread never owns a slab again.
pub const NO_OWN: usize = 1;

/// The alloc word: the owned slab's private block, or the empty block.
#[inline(always)]
pub fn alloc_word() -> usize {
    tls::load::<{ tls::ALLOC }>()
}

/// The owned word: the owned slab's private block, or [`NOT_OWNER`].
#[inline(always)]
pub fn owned() -> usize {
    tls::load::<{ tls::OWNED }>()
}

/// Makes the thread's words say it owns the slab at `slab_addr`.
fn set_owned(slab_addr: usize) {
    let block = layout::private_block(slab_addr);
    tls::store::<{ tls::OWNED }>(block);
    tls::store::<{ tls::ALLOC }>(block);
}

/// Makes the thread's words say it owns no slab. Done before the slab is
/// released, so the thread never touches the private lists afterwards.
fn set_not_owner() {
    tls::store::<{ tls::ALLOC }>(empty_block());
    tls::store::<{ tls::OWNED }>(NOT_OWNER);
}

/// The alloc word of a thread that owns no slab: the address of a private
/// block whose tables are the always-empty ones.
fn empty_block() -> usize {
    let tables = core::ptr::from_ref(&hot_path::EMPTY_TABLES)
        .cast_mut()
        .cast::<u8>();
    sys::expose(tables) - layout::HEADS_OFFSET
}

/// The slab address of an owned word that names one.
#[inline]
pub const fn owned_slab(owned: usize) -> usize {
    owned - layout::PRIVATE_OFFSET
}

/// Whether an owned word names a slab.
#[inline(always)]
pub const fn is_owner(owned: usize) -> bool {
    (owned as isize) >= 0
}

/// The current word: the address of the slab the thread allocates from,
/// with [`NO_OWN`] possibly set; 0 before the thread's first allocation.
#[inline]
pub fn current() -> usize {
    tls::load::<{ tls::CURRENT }>()
}

/// The slab where the thread's last search for freed slots succeeded (a
/// slab number; 0 at first): the next search looks there first.
#[inline]
pub fn search_hint() -> usize {
    tls::load::<{ tls::HINT }>() % NUM_SLABS
}

/// Records where a search for freed slots succeeded.
#[inline]
pub fn set_search_hint(slab: usize) {
    tls::store::<{ tls::HINT }>(slab)
}

/// The slab address of a non-zero current word.
#[inline]
pub const fn slab_addr(current: usize) -> usize {
    current & !NO_OWN
}

/// Whether the thread may claim a slab.
#[inline]
pub const fn may_own(current: usize) -> bool {
    current & NO_OWN == 0
}

/// The thread's first allocation: picks its home slab (the one with the
/// fewest live threads), owns it if nobody does, and arranges for its exit
/// to be noticed. `base` is the reservation's base.
#[cold]
#[inline(never)]
pub fn assign(base: usize) {
    let slab = occupancy::take();
    let addr = layout::slab_addr(base, slab);
    let owns = ownership::claim(slab);
    // Set the words before registering anything: registering may allocate,
    // which must find the thread placed.
    tls::store::<{ tls::CURRENT }>(addr);
    if owns {
        hot_path::fill_region_table(addr);
        set_owned(addr);
        counters::count(Event::Claim, addr);
    }
    occupancy::note_used(slab);
    exit::register(slab, owns);
    fork::register_once();
}

/// Makes the calling thread the owner of `slab`, whose claim it just won,
/// giving up the slab it owned before, if any.
#[cold]
pub fn become_owner(base: usize, slab: usize) {
    let old_owned = owned();
    let old_current = current();
    let addr = layout::slab_addr(base, slab);
    debug_assert!(old_current != 0);
    if is_owner(old_owned) {
        // Stop using the old private lists before anyone can claim them.
        set_not_owner();
        ownership::release(layout::slab_of(owned_slab(old_owned)));
    }
    hot_path::fill_region_table(addr);
    set_owned(addr);
    tls::store::<{ tls::CURRENT }>(addr);
    occupancy::moved(layout::slab_of(slab_addr(old_current)), slab);
    occupancy::note_used(slab);
    exit::update(slab, true);
    counters::count(Event::Claim, addr);
}

/// Moves a thread that owns no slab to `slab` for its next allocations.
#[cold]
pub fn move_to(base: usize, slab: usize) {
    debug_assert!(slab < NUM_SLABS && !is_owner(owned()));
    let old = current();
    tls::store::<{ tls::CURRENT }>(layout::slab_addr(base, slab) | (old & NO_OWN));
    occupancy::moved(layout::slab_of(slab_addr(old)), slab);
    occupancy::note_used(slab);
    exit::update(slab, false);
    counters::count(Event::Move, layout::slab_addr(base, slab));
}

/// Pins the calling thread, which has a slab, to `slab` without owning it:
/// it gives up the slab it owns, if any, and never claims one again.
pub fn pin_unowned(base: usize, slab: usize) {
    let w = owned();
    if is_owner(w) {
        set_not_owner();
        ownership::release(layout::slab_of(owned_slab(w)));
    }
    tls::store::<{ tls::CURRENT }>(current() | NO_OWN);
    move_to(base, slab);
}

/// The pthread key kept in `cell`, created on first use with `destructor`.
/// `cell` holds the key plus one, 0 until it is created, `usize::MAX` if the
/// C library refused one (then `None`, for good).
pub(crate) fn key_once(
    cell: &core::sync::atomic::AtomicUsize,
    destructor: Option<unsafe extern "C" fn(*mut core::ffi::c_void)>,
) -> Option<libc::pthread_key_t> {
    use core::sync::atomic::Ordering::{AcqRel, Acquire};
    const REFUSED: usize = usize::MAX;
    // Acquire/AcqRel: the key value is published with the store; nothing
    // else rides on it.
    match cell.load(Acquire) {
        0 => {}
        REFUSED => return None,
        k => return Some((k - 1) as libc::pthread_key_t),
    }
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is a valid out-pointer; the callers' destructors are
    // safe to run at any thread's exit.
    if unsafe { libc::pthread_key_create(&mut key, destructor) } != 0 {
        let _ = cell.compare_exchange(0, REFUSED, AcqRel, Acquire);
        return None;
    }
    match cell.compare_exchange(0, key as usize + 1, AcqRel, Acquire) {
        Ok(_) => Some(key),
        Err(winner) => {
            // SAFETY: we created `key` and nobody else has seen it.
            unsafe { libc::pthread_key_delete(key) };
            (winner != REFUSED).then(|| (winner - 1) as libc::pthread_key_t)
        }
    }
}

/// Noticing a thread's end: a pthread key whose value, while the thread
/// lives, says where it is, and whose destructor gives its place back.
mod exit {
    use core::ffi::c_void;
    use core::sync::atomic::AtomicUsize;

    use super::{NO_OWN, occupancy, set_not_owner, tls};
    use crate::layout::{self, NUM_SLABS};
    use crate::{ownership, reservation};

    /// Added to the key's value when the thread owns its slab.
    const OWNS: usize = 1 << 8;

    /// The key (see [`key_once`](super::key_once)). Without one, exits go
    /// unnoticed: slabs stay owned and counts only grow, so later threads
    /// share slabs without owning them.
    static KEY: AtomicUsize = AtomicUsize::new(0);

    /// First registration of the calling thread, on `slab`.
    pub fn register(slab: usize, owns: bool) {
        update(slab, owns)
    }

    /// Records where the calling thread is now.
    pub fn update(slab: usize, owns: bool) {
        if let Some(key) = key() {
            let value = slab + 1 + if owns { OWNS } else { 0 };
            // SAFETY: a valid key; the value is an integer in pointer form,
            // never dereferenced. glibc stores the values of the first 32
            // keys without allocating; for a later key the first store may
            // call calloc, which reaches this allocator with the thread's
            // words already set.
            unsafe { libc::pthread_setspecific(key, core::ptr::without_provenance(value)) };
        }
    }

    /// The key, created on first use.
    fn key() -> Option<libc::pthread_key_t> {
        // The destructor only touches atomics and this thread's words.
        super::key_once(&KEY, Some(at_exit))
    }

    /// The key's destructor, run by the C library when a thread that
    /// allocated ends. Other destructors may still allocate and free after
    /// it: the thread then uses the shared lists and never owns again.
    extern "C" fn at_exit(value: *mut c_void) {
        let value = value.addr();
        let slab = (value & (OWNS - 1)).wrapping_sub(1);
        if slab >= NUM_SLABS {
            return;
        }
        // Stop using the private lists before anyone can claim them.
        set_not_owner();
        // From the key's value, not the current word: the C library clears
        // every key of an ending thread, so with the pthread-key fallback
        // the current word may read 0 (never placed) here.
        let addr = layout::slab_addr(reservation::base_raw(), slab);
        tls::store::<{ tls::CURRENT }>(addr | NO_OWN);
        if value & OWNS != 0 {
            ownership::release(slab);
        }
        occupancy::left(slab);
    }
}

/// Handing the slabs of threads that do not exist in a `fork` child back.
mod fork {
    use core::sync::atomic::{AtomicBool, Ordering};

    use super::{is_owner, occupancy, owned_slab, slab_addr, tls};
    use crate::{layout, ownership};

    /// Whether the child handler was registered.
    static REGISTERED: AtomicBool = AtomicBool::new(false);

    /// Registers [`child`] with `pthread_atfork`, once per process. Called
    /// by a thread's first allocation, after its words are set, because
    /// registering may allocate.
    pub fn register_once() {
        // Relaxed: only decides who registers; nothing is published.
        if cfg!(miri) || REGISTERED.swap(true, Ordering::Relaxed) {
            return;
        }
        // SAFETY: `child` only stores to atomics and reads this thread's
        // words: async-signal-safe, as a fork child handler must be.
        unsafe { libc::pthread_atfork(None, None, Some(child)) };
    }

    /// Runs in the child after `fork`: the forking thread is the only one,
    /// so it alone may own a slab and live on one. The private lists of the
    /// slabs the parent's other threads owned become claimable.
    extern "C" fn child() {
        let owned = tls::load::<{ tls::OWNED }>();
        let current = tls::load::<{ tls::CURRENT }>();
        ownership::reset_after_fork(is_owner(owned).then(|| layout::slab_of(owned_slab(owned))));
        crate::commit::reset_after_fork();
        occupancy::reset_after_fork((current != 0).then(|| layout::slab_of(slab_addr(current))));
    }
}

#[cfg(all(target_arch = "x86_64", not(smalloc_portable_tls), not(miri)))]
mod tls {
    // The words, in order: alloc (initially the empty block), owned
    // (initially NOT_OWNER), current (initially 0), search hint (0); with
    // the `profile` feature, the profiler's words (0).
    core::arch::global_asm!(
        ".pushsection .tdata,\"awT\",@progbits",
        ".p2align 4",
        ".globl __smalloc_thread_v2",
        ".hidden __smalloc_thread_v2",
        ".type __smalloc_thread_v2,@object",
        ".size __smalloc_thread_v2,{size}",
        "__smalloc_thread_v2:",
        ".quad {empty} - {heads}",
        ".quad 0x8000000000000000",
        ".quad 0",
        ".quad 0",
        ".zero {extra}",
        ".popsection",
        empty = sym crate::hot_path::EMPTY_TABLES,
        heads = const crate::layout::HEADS_OFFSET,
        size = const 8 * WORDS,
        extra = const 8 * (WORDS - 4),
    );
    const _: () = assert!(super::NOT_OWNER == 0x8000_0000_0000_0000);

    /// Number of words.
    const WORDS: usize = 4 + super::PROFILE_WORDS;

    /// Byte offsets of the words.
    pub const ALLOC: usize = 0;
    pub const OWNED: usize = 8;
    pub const CURRENT: usize = 16;
    pub const HINT: usize = 24;
    /// The `profile` feature's words ([`PROFILE_WORDS`](super::PROFILE_WORDS)).
    #[cfg(feature = "profile")]
    pub const PROFILE: usize = 32;
    /// From one word to the next.
    #[cfg(feature = "profile")]
    pub const STRIDE: usize = 8;

    /// The words' offset from the thread pointer: a constant the dynamic
    /// loader wrote into the GOT before any code ran, so the load is `pure`
    /// and `nomem` (the compiler may share one among several accesses).
    #[inline(always)]
    fn offset() -> usize {
        let off: usize;
        // SAFETY: reads the GOT entry of our own .tdata symbol, which is
        // never written after relocation.
        unsafe {
            core::arch::asm!(
                "mov {off}, qword ptr [rip + __smalloc_thread_v2@GOTTPOFF]",
                off = out(reg) off,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        off
    }

    #[inline(always)]
    pub fn load<const WORD: usize>() -> usize {
        let v: usize;
        // SAFETY: initial-exec access to our own .tdata words: `offset` is
        // their offset from the thread pointer, `fs:` is the thread
        // pointer, `word` is one of the offsets above. Reads only that word.
        unsafe {
            core::arch::asm!(
                "mov {v}, qword ptr fs:[{off} + {word}]",
                v = lateout(reg) v,
                off = in(reg) offset(),
                word = const WORD,
                options(nostack, readonly, preserves_flags),
            );
        }
        v
    }

    /// Subtracts `v` from the word; true on a borrow (it was below `v`).
    #[cfg(feature = "profile")]
    #[inline(always)]
    pub fn sub<const WORD: usize>(v: usize) -> bool {
        // SAFETY: as in `load`; writes only our own thread's word.
        unsafe {
            core::arch::asm!(
                "sub qword ptr fs:[{off} + {word}], {v}",
                "jb {borrow}",
                off = in(reg) offset(),
                v = in(reg) v,
                word = const WORD,
                borrow = label { return true; },
                options(nostack),
            );
        }
        false
    }

    #[inline(always)]
    pub fn store<const WORD: usize>(v: usize) {
        // SAFETY: as in `load`; writes only our own thread's word.
        unsafe {
            core::arch::asm!(
                "mov qword ptr fs:[{off} + {word}], {v}",
                off = in(reg) offset(),
                v = in(reg) v,
                word = const WORD,
                options(nostack, preserves_flags),
            );
        }
    }
}

#[cfg(any(not(target_arch = "x86_64"), smalloc_portable_tls, miri))]
mod tls {
    //! Portable fallback: a pthread key per word, created on first use. The
    //! words are stored XOR their initial values, so a key's initial null
    //! reads as the initial value.
    use core::sync::atomic::AtomicUsize;

    /// Number of words.
    const WORDS: usize = 4 + super::PROFILE_WORDS;

    /// Word indexes.
    pub const ALLOC: usize = 0;
    pub const OWNED: usize = 1;
    pub const CURRENT: usize = 2;
    pub const HINT: usize = 3;
    /// The `profile` feature's words ([`PROFILE_WORDS`](super::PROFILE_WORDS)).
    #[cfg(feature = "profile")]
    pub const PROFILE: usize = 4;
    /// From one word to the next.
    #[cfg(feature = "profile")]
    pub const STRIDE: usize = 1;

    /// The keys (see [`key_once`](super::key_once)).
    static KEYS: [AtomicUsize; WORDS] = [const { AtomicUsize::new(0) }; WORDS];

    /// The initial value of `word`.
    fn initial(word: usize) -> usize {
        match word {
            ALLOC => super::empty_block(),
            OWNED => super::NOT_OWNER,
            _ => 0,
        }
    }

    fn key(i: usize) -> libc::pthread_key_t {
        // No key: every access reads null (a thread without a place).
        super::key_once(&KEYS[i], None).unwrap_or(libc::pthread_key_t::MAX)
    }

    pub fn load<const WORD: usize>() -> usize {
        // SAFETY: reading a key's value has no preconditions (an invalid key
        // yields null).
        let v = unsafe { libc::pthread_getspecific(key(WORD)) }.addr();
        v ^ initial(WORD)
    }

    /// Subtracts `v` from the word; true on a borrow (it was below `v`).
    #[cfg(feature = "profile")]
    pub fn sub<const WORD: usize>(v: usize) -> bool {
        let old = load::<WORD>();
        store::<WORD>(old.wrapping_sub(v));
        old < v
    }

    pub fn store<const WORD: usize>(v: usize) {
        let v = v ^ initial(WORD);
        // SAFETY: storing an integer disguised as a pointer; never
        // dereferenced.
        unsafe { libc::pthread_setspecific(key(WORD), core::ptr::without_provenance(v)) };
    }
}
