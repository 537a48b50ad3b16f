//! The next allocator in the chain, for foreign pointers.
//!
//! A pointer that is neither a slot nor a big allocation of ours was made
//! by someone else: the allocator that was in place before the preload
//! took effect (glibc, for memory glibc allocated internally through its
//! private `__libc_malloc`), or a program's own fallback. `free`, `realloc`
//! and `malloc_usable_size` hand such pointers to the same-named function of
//! the next object in the lookup order, found with `dlsym(RTLD_NEXT, ...)`.
//!
//! # dlsym may allocate
//!
//! `dlsym` may call `malloc`, `calloc` and `free` (for its error state).
//! Those land in this library, and only `free` (or `realloc`) of a
//! *foreign* pointer needs a lookup, so the only possible recursion is
//! `dlsym` freeing a foreign pointer while resolving. A single resolver
//! lock, owned by one thread at a time and tagged with its `pthread_self`,
//! tells the cases apart: another thread waits for the lookup to finish,
//! the resolving thread itself gets "not available" (the foreign block is
//! leaked rather than deadlocking). The usual symbols are resolved once by
//! the library constructor, before `main`, so the lock is normally never
//! contended. A `fork` child resets the lock (the thread that held it does
//! not exist there).

use core::ffi::{CStr, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};

/// A function of the next object, resolved on first use.
pub struct NextSym {
    /// Its name.
    name: &'static CStr,
    /// [`UNRESOLVED`], [`ABSENT`] or the function's address.
    addr: AtomicUsize,
}

/// Not looked up yet.
const UNRESOLVED: usize = 0;
/// Looked up: the next objects do not define it.
const ABSENT: usize = 1;

/// 0, or the `pthread_self` of the thread running `dlsym`.
static RESOLVER: AtomicUsize = AtomicUsize::new(0);

impl NextSym {
    /// A symbol named `name`, not resolved yet.
    pub const fn new(name: &'static CStr) -> NextSym {
        NextSym {
            name,
            addr: AtomicUsize::new(UNRESOLVED),
        }
    }

    /// The function's address, or `None` if the next objects lack it or
    /// the calling thread is inside `dlsym` already.
    #[inline]
    pub fn get(&self) -> Option<usize> {
        // Acquire: pairs with the Release store in `resolve` (the address
        // is all we read, but the pairing keeps the loader's writes that
        // made the function callable ordered before our call).
        match self.addr.load(Ordering::Acquire) {
            UNRESOLVED => self.resolve(),
            ABSENT => None,
            a => Some(a),
        }
    }

    /// Looks the symbol up under the resolver lock.
    #[cold]
    #[inline(never)]
    fn resolve(&self) -> Option<usize> {
        // SAFETY: pthread_self has no preconditions and never allocates.
        let me = unsafe { libc::pthread_self() } as usize;
        loop {
            // Acquire: see the symbols stored by the previous holder.
            match RESOLVER.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => break,
                // Re-entered from our own dlsym: do not wait for ourselves.
                Err(owner) if owner == me => return None,
                // SAFETY: sched_yield has no preconditions.
                Err(_) => unsafe {
                    libc::sched_yield();
                },
            }
        }
        // Acquire: as in `get`; another holder may have resolved it.
        let mut a = self.addr.load(Ordering::Acquire);
        if a == UNRESOLVED {
            // SAFETY: `name` is NUL-terminated; RTLD_NEXT searches the
            // objects after the one containing this code.
            let f = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) };
            // RTLD_NEXT never finds this object's own definitions, so a
            // found function is safe to call without recursing into us.
            a = if f.is_null() { ABSENT } else { f.addr() };
            // Release: pairs with the Acquire loads in `get`.
            self.addr.store(a, Ordering::Release);
        }
        // Release: hands the lock (and what we stored) to the next holder.
        RESOLVER.store(0, Ordering::Release);
        if a == ABSENT { None } else { Some(a) }
    }
}

/// After `fork`, in the child: the thread that may have held the resolver
/// lock is gone.
pub fn reset_after_fork() {
    // Relaxed: the child has a single thread.
    RESOLVER.store(0, Ordering::Relaxed);
}

/// The next `free`.
pub static FREE: NextSym = NextSym::new(c"free");
/// The next `realloc`.
pub static REALLOC: NextSym = NextSym::new(c"realloc");
/// The next `malloc_usable_size`.
pub static USABLE_SIZE: NextSym = NextSym::new(c"malloc_usable_size");

/// Resolves the symbols `free`, `realloc` and `malloc_usable_size` need, so
/// that later foreign pointers find them ready.
pub fn resolve_common() {
    FREE.get();
    REALLOC.get();
    USABLE_SIZE.get();
}

/// Frees the foreign pointer `p` with the next allocator; leaks it if there
/// is none.
///
/// # Safety
/// `p` is a live allocation of the next allocator.
pub unsafe fn free(p: *mut c_void) {
    if let Some(a) = FREE.get() {
        // SAFETY: `a` is the address of the next object's `free`.
        let f: unsafe extern "C" fn(*mut c_void) = unsafe { core::mem::transmute(a) };
        // SAFETY: per the contract.
        unsafe { f(p) }
    }
}

/// Reallocates the foreign pointer `p` (`size > 0`) with the next
/// allocator. Null with `ENOMEM` if there is none.
///
/// # Safety
/// `p` is a live allocation of the next allocator.
pub unsafe fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    match REALLOC.get() {
        Some(a) => {
            // SAFETY: `a` is the address of the next object's `realloc`.
            let f: unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void =
                unsafe { core::mem::transmute(a) };
            // SAFETY: per the contract.
            unsafe { f(p, size) }
        }
        None => crate::errno::enomem(),
    }
}

/// Usable size of the foreign pointer `p`; 0 if there is no next allocator.
///
/// # Safety
/// `p` is a live allocation of the next allocator.
pub unsafe fn usable_size(p: *mut c_void) -> usize {
    match USABLE_SIZE.get() {
        Some(a) => {
            // SAFETY: `a` is the address of the next object's
            // `malloc_usable_size`.
            let f: unsafe extern "C" fn(*mut c_void) -> usize = unsafe { core::mem::transmute(a) };
            // SAFETY: per the contract.
            unsafe { f(p) }
        }
        None => 0,
    }
}
