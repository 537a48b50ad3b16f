//! rpmalloc through its C API. The `rpmalloc` crate's `GlobalAlloc` needs
//! rpmalloc's preload mode (which replaces `pthread_create` process-wide)
//! to initialize threads, and has no `realloc`; this wrapper calls the
//! per-thread initialize/finalize from the harness's thread hooks instead
//! and uses `rprealloc`, as a program using rpmalloc directly would.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;
use std::sync::Once;

use rpmalloc_sys as ffi;

use crate::allocators::BenchAlloc;

/// rpmalloc, initialized on first use of a thread through the hooks.
pub struct RpMalloc;

/// rpmalloc's natural alignment: `rpmalloc` alone suffices up to this.
const NATURAL_ALIGN: usize = 16;

static INIT: Once = Once::new();

unsafe extern "C" {
    // rpmalloc-sys declares this without its argument; the C function
    // (rpmalloc 1.4) takes `int release_caches`.
    #[link_name = "rpmalloc_thread_finalize"]
    fn thread_finalize(release_caches: std::ffi::c_int);
}

// SAFETY: rpmalloc returns blocks of at least the size and alignment asked
// for (or null), valid until freed; the bench calls it only on threads the
// harness initialized.
unsafe impl GlobalAlloc for RpMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the harness initialized this thread (`thread_start`).
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
        // SAFETY: `p` came from this allocator (caller's contract).
        unsafe { ffi::rpfree(p as *mut c_void) }
    }

    #[inline]
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
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

impl BenchAlloc for RpMalloc {
    fn thread_start(&self) {
        INIT.call_once(|| {
            // SAFETY: called once, before any other rpmalloc call.
            unsafe { ffi::rpmalloc_initialize() };
        });
        // SAFETY: rpmalloc is initialized; idempotent per thread.
        unsafe { ffi::rpmalloc_thread_initialize() };
    }

    fn thread_end(&self) {
        // SAFETY: this thread was initialized and makes no further calls;
        // 1 = release its caches to the global pool.
        unsafe { thread_finalize(1) };
    }
}
