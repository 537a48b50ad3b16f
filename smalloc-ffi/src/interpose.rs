//! The standard C names and glibc's `__libc_*` aliases. Exported from the
//! shared library they take the place of the C library's allocator in the
//! whole process (`LD_PRELOAD`); a program linking the static library gets
//! them too. Each one inlines the shared implementation in
//! [`c_alloc`](crate::c_alloc), so the fast path has no extra call.

use core::ffi::{c_int, c_void};

use crate::prefixed::smalloc_mallinfo2_t;
use crate::{c_alloc, introspect};

/// C `malloc`.
#[unsafe(no_mangle)]
pub extern "C" fn malloc(size: usize) -> *mut c_void {
    c_alloc::malloc(size)
}

/// C `free`.
///
/// # Safety
/// `p` is null or a live allocation, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn free(p: *mut c_void) {
    // SAFETY: per the contract.
    unsafe { c_alloc::free(p) }
}

/// C `calloc`.
#[unsafe(no_mangle)]
pub extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    c_alloc::calloc(n, size)
}

/// C `realloc`.
///
/// # Safety
/// `p` is null or a live allocation.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: per the contract.
    unsafe { c_alloc::realloc(p, size) }
}

/// glibc/BSD `reallocarray`.
///
/// # Safety
/// `p` is null or a live allocation.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    // SAFETY: per the contract.
    unsafe { c_alloc::reallocarray(p, n, size) }
}

/// C11 `aligned_alloc`.
#[unsafe(no_mangle)]
pub extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    c_alloc::memalign(align, size)
}

/// POSIX `posix_memalign`.
///
/// # Safety
/// `out` is valid for writing a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    // SAFETY: per the contract.
    unsafe { c_alloc::posix_memalign(out, align, size) }
}

/// Obsolete `memalign`.
#[unsafe(no_mangle)]
pub extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    c_alloc::memalign(align, size)
}

/// Obsolete `valloc`.
#[unsafe(no_mangle)]
pub extern "C" fn valloc(size: usize) -> *mut c_void {
    c_alloc::valloc(size)
}

/// Obsolete `pvalloc`.
#[unsafe(no_mangle)]
pub extern "C" fn pvalloc(size: usize) -> *mut c_void {
    c_alloc::pvalloc(size)
}

/// glibc `malloc_usable_size`.
///
/// # Safety
/// `p` is null or a live allocation.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> usize {
    // SAFETY: per the contract.
    unsafe { c_alloc::usable_size(p) }
}

/// C23 `free_sized` (the size is not needed).
///
/// # Safety
/// As for [`free`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn free_sized(p: *mut c_void, _size: usize) {
    // SAFETY: per the contract.
    unsafe { c_alloc::free(p) }
}

/// C23 `free_aligned_sized` (alignment and size are not needed).
///
/// # Safety
/// As for [`free`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn free_aligned_sized(p: *mut c_void, _align: usize, _size: usize) {
    // SAFETY: per the contract.
    unsafe { c_alloc::free(p) }
}

/// glibc's alias of `malloc`.
#[unsafe(no_mangle)]
pub extern "C" fn __libc_malloc(size: usize) -> *mut c_void {
    c_alloc::malloc(size)
}

/// glibc's alias of `free`.
///
/// # Safety
/// As for [`free`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __libc_free(p: *mut c_void) {
    // SAFETY: per the contract.
    unsafe { c_alloc::free(p) }
}

/// glibc's alias of `calloc`.
#[unsafe(no_mangle)]
pub extern "C" fn __libc_calloc(n: usize, size: usize) -> *mut c_void {
    c_alloc::calloc(n, size)
}

/// glibc's alias of `realloc`.
///
/// # Safety
/// As for [`realloc`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __libc_realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: per the contract.
    unsafe { c_alloc::realloc(p, size) }
}

/// glibc's alias of `memalign`.
#[unsafe(no_mangle)]
pub extern "C" fn __libc_memalign(align: usize, size: usize) -> *mut c_void {
    c_alloc::memalign(align, size)
}

/// glibc's alias of `valloc`.
#[unsafe(no_mangle)]
pub extern "C" fn __libc_valloc(size: usize) -> *mut c_void {
    c_alloc::valloc(size)
}

/// glibc's alias of `pvalloc`.
#[unsafe(no_mangle)]
pub extern "C" fn __libc_pvalloc(size: usize) -> *mut c_void {
    c_alloc::pvalloc(size)
}

/// glibc `malloc_stats`: smalloc's statistics report on stderr.
#[unsafe(no_mangle)]
pub extern "C" fn malloc_stats() {
    introspect::malloc_stats()
}

/// glibc `mallinfo2`, filled from smalloc's statistics.
#[unsafe(no_mangle)]
pub extern "C" fn mallinfo2() -> smalloc_mallinfo2_t {
    introspect::mallinfo2()
}

/// glibc `mallinfo` (the `int` fields, saturated).
#[unsafe(no_mangle)]
pub extern "C" fn mallinfo() -> introspect::Mallinfo {
    introspect::mallinfo()
}

/// glibc `malloc_trim`: gives back the pages of freed slots beyond `pad`.
#[unsafe(no_mangle)]
pub extern "C" fn malloc_trim(pad: usize) -> c_int {
    introspect::malloc_trim(pad)
}

/// glibc `malloc_info`: the XML statistics document on `fp`.
///
/// # Safety
/// `fp` is an open stdio stream.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc_info(options: c_int, fp: *mut libc::FILE) -> c_int {
    // SAFETY: per the contract.
    unsafe { introspect::malloc_info(options, fp) }
}
