//! rpmalloc through its C API (the `rpmalloc` crate's `GlobalAlloc` needs
//! rpmalloc's preload mode, which replaces `pthread_create` process-wide,
//! and has no `realloc`). A thread must be initialized before its first
//! call: `RpMalloc<false>` leaves that to [`thread_start`] (the bench
//! harness's thread hook, so the timed calls carry no check), and
//! `RpMalloc<true>`, for `#[global_allocator]`, does it lazily on each
//! thread's first call. simd-json-bench's `rpmalloc` build uses it too.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::Once;

use rpmalloc_sys as ffi;

/// rpmalloc; `LAZY`: each thread initializes itself on its first call.
pub struct RpMalloc<const LAZY: bool>;

/// rpmalloc's natural alignment: `rpmalloc` alone suffices up to this.
const NATURAL_ALIGN: usize = 16;

static INIT: Once = Once::new();

thread_local! {
    // A constant initializer and no destructor: reading it never allocates.
    static THREAD_READY: Cell<bool> = const { Cell::new(false) };
}

unsafe extern "C" {
    // rpmalloc-sys declares this without its argument; the C function
    // (rpmalloc 1.4) takes `int release_caches`.
    #[link_name = "rpmalloc_thread_finalize"]
    fn thread_finalize(release_caches: std::ffi::c_int);
}

/// Initializes rpmalloc (once) and the calling thread's heap.
pub fn thread_start() {
    INIT.call_once(|| {
        // SAFETY: called once, before any other rpmalloc call.
        unsafe { ffi::rpmalloc_initialize() };
    });
    // SAFETY: rpmalloc is initialized; idempotent per thread.
    unsafe { ffi::rpmalloc_thread_initialize() };
    THREAD_READY.with(|r| r.set(true));
}

/// Finalizes the calling thread's heap (it must make no further calls),
/// releasing its caches to the global pool.
#[allow(dead_code)] // simd-json-bench's threads live to the end
pub fn thread_end() {
    THREAD_READY.with(|r| r.set(false));
    // SAFETY: this thread was initialized and makes no further calls.
    unsafe { thread_finalize(1) };
}

impl<const LAZY: bool> RpMalloc<LAZY> {
    /// With `LAZY`, initializes this thread on its first call.
    #[inline(always)]
    fn ready(&self) {
        if LAZY && !THREAD_READY.with(Cell::get) {
            thread_start();
        }
    }
}

// SAFETY: rpmalloc returns blocks of at least the size and alignment asked
// for (or null), valid until freed; every call is made on an initialized
// thread (`ready`, or the harness's hook for `RpMalloc<false>`).
unsafe impl<const LAZY: bool> GlobalAlloc for RpMalloc<LAZY> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.ready();
        // SAFETY: this thread is initialized.
        unsafe {
            if layout.align() <= NATURAL_ALIGN {
                ffi::rpmalloc(layout.size()) as *mut u8
            } else {
                ffi::rpaligned_alloc(layout.align(), layout.size()) as *mut u8
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, p: *mut u8, _layout: Layout) {
        self.ready();
        // SAFETY: `p` came from this allocator (caller's contract).
        unsafe { ffi::rpfree(p as *mut c_void) }
    }

    #[inline]
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.ready();
        // SAFETY: `p` is a live block of `layout` from this allocator.
        unsafe {
            if layout.align() <= NATURAL_ALIGN {
                ffi::rprealloc(p as *mut c_void, new_size) as *mut u8
            } else {
                ffi::rpaligned_realloc(p as *mut c_void, layout.align(), new_size, layout.size(), 0)
                    as *mut u8
            }
        }
    }
}
