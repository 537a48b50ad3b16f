//! Which slab the current thread allocates from.
//!
//! Each thread holds one thread-local word: 0 until its first allocation,
//! then the address of its slab (`base | slab << SLAB_SHIFT`, never 0). The
//! first allocation picks the thread's home slab: the one with the fewest
//! live threads ([`slab_occupancy`](crate::slab_occupancy)), so slabs of
//! finished threads are reused; failover later moves the thread to another
//! slab by storing a new value. Holding the slab's address, not its
//! number, lets the hot path skip loading the reservation base: a thread
//! with a slab has a reservation.
//!
//! # How the thread-local word is reached
//!
//! Stable Rust has no `#[thread_local]` and `no_std` has no `thread_local!`,
//! so on x86-64 the word is declared in `.tbss` with `global_asm!` and read
//! with the *initial-exec* TLS model: one load of its offset from the GOT
//! (a constant the dynamic loader fills in once) and one `fs:`-relative load.
//! In an executable the linker relaxes the first load to an immediate. A
//! library using initial-exec TLS works under `LD_PRELOAD` and, within
//! glibc's static TLS surplus, when dlopen'ed; it never calls
//! `__tls_get_addr`. Other architectures, and Miri (which cannot run inline
//! assembly), fall back to a pthread key.
//!
//! Measured on this machine (callgrind instructions per read beyond a plain
//! global load; median time ratio to this scheme; in a dlopen'ed library):
//! initial-exec via asm +1, 1.00x; std `thread_local!` +16, 2.55x (it calls
//! `__tls_get_addr`); C TLS descriptors +6, 1.8x; pthread_getspecific +14 to
//! +18, 1.7-1.9x; hashing the thread pointer +3, 1.02x (but it cannot
//! remember a failover). Method and full table: `docs/tls.md`.

use crate::layout::{NUM_SLABS, SLAB_SHIFT};

/// The address of the current thread's slab, or `None` before its first
/// allocation.
#[inline(always)]
pub fn current_if_assigned() -> Option<usize> {
    match tls::load() {
        0 => None,
        slab_addr => Some(slab_addr),
    }
}

/// The current thread's slab number, picking its home slab on first use.
/// `base` is the reservation's base.
#[inline]
pub fn current(base: usize) -> usize {
    match tls::load() {
        0 => assign(base),
        slab_addr => crate::layout::slab_of(slab_addr),
    }
}

/// Moves the current thread to `slab` for its next allocations.
#[inline]
pub fn set(base: usize, slab: usize) {
    debug_assert!(slab < NUM_SLABS);
    crate::slab_occupancy::note_used(slab);
    crate::diag::count(crate::diag::Event::Move);
    tls::store(base | (slab << SLAB_SHIFT));
}

/// First allocation of this thread: pick its home slab.
#[cold]
#[inline(never)]
fn assign(base: usize) -> usize {
    // Store the slab before registering the exit hook: registering may
    // allocate (see slab_occupancy::leave_at_exit), which must find it set.
    let slab = crate::slab_occupancy::take();
    set(base, slab);
    crate::slab_occupancy::leave_at_exit(slab);
    slab
}

#[cfg(all(target_arch = "x86_64", not(smalloc_portable_tls), not(miri)))]
mod tls {
    core::arch::global_asm!(
        ".pushsection .tbss,\"awT\",@nobits",
        ".p2align 3",
        ".globl __smalloc_thread_slab_v1",
        ".hidden __smalloc_thread_slab_v1",
        ".type __smalloc_thread_slab_v1,@object",
        ".size __smalloc_thread_slab_v1,8",
        "__smalloc_thread_slab_v1:",
        ".zero 8",
        ".popsection",
    );

    #[inline(always)]
    pub fn load() -> usize {
        let v: usize;
        // SAFETY: initial-exec access to our own 8-byte .tbss word: the GOT
        // entry holds its offset from the thread pointer, `fs:` is the thread
        // pointer. Reads only that word.
        unsafe {
            core::arch::asm!(
                "mov {v}, qword ptr [rip + __smalloc_thread_slab_v1@GOTTPOFF]",
                "mov {v}, qword ptr fs:[{v}]",
                v = out(reg) v,
                options(nostack, readonly, preserves_flags),
            );
        }
        v
    }

    #[inline(always)]
    pub fn store(v: usize) {
        // SAFETY: as in `load`; writes only our own thread's word.
        unsafe {
            core::arch::asm!(
                "mov {off}, qword ptr [rip + __smalloc_thread_slab_v1@GOTTPOFF]",
                "mov qword ptr fs:[{off}], {v}",
                off = out(reg) _,
                v = in(reg) v,
                options(nostack, preserves_flags),
            );
        }
    }
}

#[cfg(any(not(target_arch = "x86_64"), smalloc_portable_tls, miri))]
mod tls {
    //! Portable fallback: a pthread key, created on first use.
    use core::sync::atomic::{AtomicUsize, Ordering};

    /// The key plus one; 0 while not created.
    static KEY: AtomicUsize = AtomicUsize::new(0);

    fn key() -> libc::pthread_key_t {
        // Acquire/Release: the key value is the only data; they keep the
        // creating thread's pthread state ordered before its use elsewhere.
        let k = KEY.load(Ordering::Acquire);
        if k != 0 {
            return (k - 1) as libc::pthread_key_t;
        }
        let mut new: libc::pthread_key_t = 0;
        // SAFETY: `new` is a valid out-pointer; no destructor.
        let rc = unsafe { libc::pthread_key_create(&mut new, None) };
        if rc != 0 {
            // No key: every thread is treated as new (slab by thread number).
            return libc::pthread_key_t::MAX;
        }
        match KEY.compare_exchange(0, new as usize + 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => new,
            Err(winner) => {
                // SAFETY: we created `new` and nobody else saw it.
                unsafe { libc::pthread_key_delete(new) };
                (winner - 1) as libc::pthread_key_t
            }
        }
    }

    pub fn load() -> usize {
        // SAFETY: reading a key's value has no preconditions (an invalid key
        // yields null).
        unsafe { libc::pthread_getspecific(key()) }.addr()
    }

    pub fn store(v: usize) {
        // SAFETY: storing an integer disguised as a pointer; never
        // dereferenced.
        unsafe { libc::pthread_setspecific(key(), core::ptr::without_provenance(v)) };
    }
}
