//! rpmalloc as the global allocator, through its C API. Without rpmalloc's
//! preload mode a thread must call `rpmalloc_thread_initialize` before its
//! first allocation; this wrapper does so lazily (a thread-local flag with a
//! constant initializer and no destructor, so checking it never allocates).
//! Threads are not finalized: the workload's threads live to the end.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::Once;

use rpmalloc_sys as ffi;

/// rpmalloc, each thread initialized on its first call.
pub struct RpMalloc;

/// rpmalloc's natural alignment: `rpmalloc` alone suffices up to this.
const NATURAL_ALIGN: usize = 16;

static INIT: Once = Once::new();

thread_local! {
    static THREAD_READY: Cell<bool> = const { Cell::new(false) };
}

/// Makes sure rpmalloc and this thread's heap are initialized.
#[inline]
fn ready() {
    if THREAD_READY.with(Cell::get) {
        return;
    }
    INIT.call_once(|| {
        // SAFETY: called once, before any other rpmalloc call.
        unsafe { ffi::rpmalloc_initialize() };
    });
    // SAFETY: rpmalloc is initialized; idempotent per thread.
    unsafe { ffi::rpmalloc_thread_initialize() };
    THREAD_READY.with(|r| r.set(true));
}

// SAFETY: rpmalloc returns blocks of at least the size and alignment asked
// for (or null), valid until freed; every call first initializes the thread.
unsafe impl GlobalAlloc for RpMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ready();
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
        ready();
        // SAFETY: `p` came from this allocator (caller's contract).
        unsafe { ffi::rpfree(p as *mut c_void) }
    }

    #[inline]
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ready();
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
