//! The calling thread's words: the allocator's four (which slab it owns and
//! allocates from: [`home_slab`](crate::home_slab)) and, with the `profile`
//! feature, the heap profiler's five, read and written by index.
//!
//! Stable Rust has no `#[thread_local]` and `no_std` has no `thread_local!`,
//! so on x86-64 and aarch64 the words are declared in `.tdata` with
//! `global_asm!` and read with the *initial-exec* TLS model: one load of
//! their offset from the GOT (a constant the dynamic loader fills in once)
//! and one load relative to the thread pointer (`fs:` on x86-64,
//! `tpidr_el0` on aarch64). In an executable the linker relaxes the first
//! load to an immediate.
//! A library using initial-exec TLS works under `LD_PRELOAD` and, within
//! glibc's static TLS surplus, when dlopen'ed; it never calls
//! `__tls_get_addr`. The alloc word's initial value is the empty block's
//! address, a relocation in the TLS image, which the dynamic loader applies
//! before it copies the image for any thread. Other architectures, and Miri
//! (which cannot run inline assembly), fall back to pthread keys.
//! Alternatives measured: `docs/tls.md`.

#[cfg(feature = "profile")]
pub use tls::sub;
pub use tls::{ALLOC, CURRENT, HINT, OWNED, address, load, store};

/// The owned word of a thread that owns no slab (its initial value).
pub const NOT_OWNER: usize = 1 << 63;

/// Thread-local words of the `profile` feature (none without it): the bytes
/// left before the next sample, the random state, the re-entrancy flag, the
/// top of the thread's stack, the thread's record.
pub const PROFILE_WORDS: usize = if crate::features::config::PROFILE {
    5
} else {
    0
};

/// The heap profiler's words, by index for [`load`], [`store`] and `sub`.
#[cfg(feature = "profile")]
pub mod profile {
    use super::tls::{PROFILE, STRIDE};
    /// Bytes left before the next sample.
    pub const LEFT: usize = PROFILE;
    /// Random state.
    pub const RNG: usize = PROFILE + STRIDE;
    /// Flags (inside the profiler).
    pub const FLAGS: usize = PROFILE + 2 * STRIDE;
    /// Top of the thread's stack.
    pub const STACK_TOP: usize = PROFILE + 3 * STRIDE;
    /// The thread's record.
    pub const RECORD: usize = PROFILE + 4 * STRIDE;
}

/// The pthread key kept in `cell`, created on first use with `destructor`.
/// `cell` holds the key plus one, 0 until it is created, `usize::MAX` if the
/// C library refused one (then `None`, for good).
pub fn key_once(
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

#[cfg(all(
    any(target_arch = "x86_64", target_arch = "aarch64"),
    not(smalloc_portable_tls),
    not(miri)
))]
mod tls {
    // The words, in order: alloc (initially the empty block), owned
    // (initially NOT_OWNER), current (initially 0), search hint (0); with
    // the `profile` feature, the profiler's words (0).
    core::arch::global_asm!(
        ".pushsection .tdata,\"awT\",%progbits",
        ".p2align 4",
        ".globl __smalloc_thread_v2",
        ".hidden __smalloc_thread_v2",
        ".type __smalloc_thread_v2,%object",
        ".size __smalloc_thread_v2,{size}",
        "__smalloc_thread_v2:",
        ".quad {empty} - {heads}",
        ".quad 0x8000000000000000",
        ".quad 0",
        ".quad 0",
        ".zero {extra}",
        ".popsection",
        empty = sym crate::metadata::EMPTY_TABLES,
        heads = const crate::metadata::TABLES_OFFSET,
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

    #[cfg(all(target_arch = "aarch64", feature = "profile"))]
    pub use aarch64::sub;
    #[cfg(target_arch = "aarch64")]
    pub use aarch64::{address, load, store};
    #[cfg(all(target_arch = "x86_64", feature = "profile"))]
    pub use x86_64::sub;
    #[cfg(target_arch = "x86_64")]
    pub use x86_64::{address, load, store};

    #[cfg(target_arch = "x86_64")]
    mod x86_64 {
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

        /// The address of the calling thread's words (the thread pointer,
        /// which the C library keeps at `fs:0`, plus their offset).
        pub fn address() -> Option<usize> {
            let tp: usize;
            // SAFETY: reads the thread control block's pointer to itself.
            unsafe {
                core::arch::asm!(
                    "mov {tp}, qword ptr fs:0",
                    tp = out(reg) tp,
                    options(nostack, readonly, preserves_flags),
                );
            }
            Some(tp.wrapping_add(offset()))
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

    #[cfg(target_arch = "aarch64")]
    mod aarch64 {
        /// The words' address: the thread pointer plus their offset, a
        /// constant the dynamic loader wrote into the GOT before any code
        /// ran. `pure` and `nomem`: the same within a thread, so the
        /// compiler may share one among several accesses.
        #[inline(always)]
        fn words() -> usize {
            let at: usize;
            // SAFETY: reads the GOT entry of our own .tdata symbol, which is
            // never written after relocation, and the thread pointer.
            unsafe {
                core::arch::asm!(
                    "adrp {at}, :gottprel:__smalloc_thread_v2",
                    "ldr {at}, [{at}, :gottprel_lo12:__smalloc_thread_v2]",
                    "mrs {tp}, tpidr_el0",
                    "add {at}, {at}, {tp}",
                    at = out(reg) at,
                    tp = out(reg) _,
                    options(pure, nomem, nostack, preserves_flags),
                );
            }
            at
        }

        /// The address of the calling thread's words.
        pub fn address() -> Option<usize> {
            Some(words())
        }

        #[inline(always)]
        pub fn load<const WORD: usize>() -> usize {
            let v: usize;
            // SAFETY: initial-exec access to our own .tdata words: `words`
            // is their address in this thread, `WORD` one of the offsets
            // above. Reads only that word.
            unsafe {
                core::arch::asm!(
                    "ldr {v}, [{at}, #{word}]",
                    v = lateout(reg) v,
                    at = in(reg) words(),
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
                    "ldr {t}, [{at}, #{word}]",
                    "subs {t}, {t}, {v}",
                    "str {t}, [{at}, #{word}]",
                    "b.lo {borrow}",
                    at = in(reg) words(),
                    v = in(reg) v,
                    t = out(reg) _,
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
                    "str {v}, [{at}, #{word}]",
                    at = in(reg) words(),
                    v = in(reg) v,
                    word = const WORD,
                    options(nostack, preserves_flags),
                );
            }
        }
    }
}

#[cfg(any(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    smalloc_portable_tls,
    miri
))]
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
            ALLOC => crate::metadata::empty_block(),
            OWNED => super::NOT_OWNER,
            _ => 0,
        }
    }

    fn key(i: usize) -> libc::pthread_key_t {
        // No key: every access reads null (a thread without a place).
        super::key_once(&KEYS[i], None).unwrap_or(libc::pthread_key_t::MAX)
    }

    /// The words have no address of their own here (each is a key's value).
    pub fn address() -> Option<usize> {
        None
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
