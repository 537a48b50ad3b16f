//! Reading and writing the calling thread's `errno`.

use core::ffi::{c_int, c_void};
use core::ptr;

/// The current value of `errno`.
#[inline]
pub fn get() -> c_int {
    // SAFETY: `__errno_location` returns the calling thread's errno cell,
    // valid for the thread's lifetime; it never allocates.
    unsafe { *libc::__errno_location() }
}

/// Sets `errno` to `value`.
#[inline]
pub fn set(value: c_int) {
    // SAFETY: as in `get`.
    unsafe { *libc::__errno_location() = value };
}

/// An allocation failed: sets `errno` to `ENOMEM` and returns null, the
/// value every failing allocation entry point returns.
#[cold]
#[inline(never)]
pub fn enomem() -> *mut c_void {
    set(libc::ENOMEM);
    ptr::null_mut()
}

/// A bad alignment argument: sets `errno` to `EINVAL` and returns null.
#[cold]
#[inline(never)]
pub fn einval() -> *mut c_void {
    set(libc::EINVAL);
    ptr::null_mut()
}
