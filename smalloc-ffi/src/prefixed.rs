//! The prefixed API, `smalloc_*`: the declarations of
//! `include/smalloc.h` (generated from this file by cbindgen). These are
//! the functions to call when the library is linked statically or loaded
//! with `dlopen`; their semantics are those of the unprefixed C functions
//! documented on each.

use core::ffi::{c_char, c_int, c_void};

use crate::{c_alloc, introspect};

/// Allocates `size` bytes aligned to 16. `smalloc_malloc(0)` returns a
/// unique pointer that must be freed. Returns NULL with `errno = ENOMEM` on
/// failure.
#[unsafe(no_mangle)]
pub extern "C" fn smalloc_malloc(size: usize) -> *mut c_void {
    c_alloc::malloc(size)
}

/// Frees `ptr` (NULL is ignored). `ptr` may also come from the allocator
/// that was in place before smalloc (it is handed back to it).
///
/// # Safety
/// `ptr` is NULL or a live allocation, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn smalloc_free(ptr: *mut c_void) {
    // SAFETY: per the contract.
    unsafe { c_alloc::free(ptr) }
}

/// Allocates `n * size` zeroed bytes; NULL with `errno = ENOMEM` if the
/// product overflows or memory is exhausted.
#[unsafe(no_mangle)]
pub extern "C" fn smalloc_calloc(n: usize, size: usize) -> *mut c_void {
    c_alloc::calloc(n, size)
}

/// Resizes `ptr` to `size` bytes, keeping the contents. `ptr == NULL`
/// allocates; `size == 0` frees `ptr` and returns NULL (as glibc does). On
/// failure returns NULL with `errno = ENOMEM` and leaves `ptr` untouched.
///
/// # Safety
/// `ptr` is NULL or a live allocation.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn smalloc_realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: per the contract.
    unsafe { c_alloc::realloc(ptr, size) }
}

/// `smalloc_realloc(ptr, n * size)`, or NULL with `errno = ENOMEM` (and
/// `ptr` untouched) if the product overflows.
///
/// # Safety
/// `ptr` is NULL or a live allocation.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn smalloc_reallocarray(
    ptr: *mut c_void,
    n: usize,
    size: usize,
) -> *mut c_void {
    // SAFETY: per the contract.
    unsafe { c_alloc::reallocarray(ptr, n, size) }
}

/// Allocates `size` bytes aligned to `alignment`, which must be a power of
/// two (else NULL with `errno = EINVAL`).
#[unsafe(no_mangle)]
pub extern "C" fn smalloc_aligned_alloc(alignment: usize, size: usize) -> *mut c_void {
    c_alloc::memalign(alignment, size)
}

/// Same as `smalloc_aligned_alloc`.
#[unsafe(no_mangle)]
pub extern "C" fn smalloc_memalign(alignment: usize, size: usize) -> *mut c_void {
    c_alloc::memalign(alignment, size)
}

/// Stores in `*memptr` a new block of `size` bytes aligned to `alignment`
/// and returns 0; returns `EINVAL` if `alignment` is not a power of two
/// multiple of `sizeof(void *)`, `ENOMEM` if out of memory. Never changes
/// `errno`; `*memptr` is written only on success.
///
/// # Safety
/// `memptr` is valid for writing a pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn smalloc_posix_memalign(
    memptr: *mut *mut c_void,
    alignment: usize,
    size: usize,
) -> c_int {
    // SAFETY: per the contract.
    unsafe { c_alloc::posix_memalign(memptr, alignment, size) }
}

/// Allocates `size` bytes aligned to the page size.
#[unsafe(no_mangle)]
pub extern "C" fn smalloc_valloc(size: usize) -> *mut c_void {
    c_alloc::valloc(size)
}

/// Allocates `size` bytes rounded up to whole pages (at least one), aligned
/// to the page size.
#[unsafe(no_mangle)]
pub extern "C" fn smalloc_pvalloc(size: usize) -> *mut c_void {
    c_alloc::pvalloc(size)
}

/// Number of usable bytes of the block at `ptr` (0 for NULL).
///
/// # Safety
/// `ptr` is NULL or a live allocation.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn smalloc_malloc_usable_size(ptr: *mut c_void) -> usize {
    // SAFETY: per the contract.
    unsafe { c_alloc::usable_size(ptr) }
}

/// Frees `ptr`, which was allocated with `size` bytes (the size is not
/// needed: same as `smalloc_free`).
///
/// # Safety
/// As for `smalloc_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn smalloc_free_sized(ptr: *mut c_void, size: usize) {
    let _ = size;
    // SAFETY: per the contract.
    unsafe { c_alloc::free(ptr) }
}

/// Frees `ptr`, which was allocated with `alignment` and `size` (neither is
/// needed: same as `smalloc_free`).
///
/// # Safety
/// As for `smalloc_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn smalloc_free_aligned_sized(
    ptr: *mut c_void,
    alignment: usize,
    size: usize,
) {
    let _ = (alignment, size);
    // SAFETY: per the contract.
    unsafe { c_alloc::free(ptr) }
}

/// Whether `ptr` was allocated by smalloc (rather than by another
/// allocator). Reads no memory at `ptr`; any value may be passed.
#[unsafe(no_mangle)]
pub extern "C" fn smalloc_owns(ptr: *const c_void) -> bool {
    c_alloc::owns(ptr)
}

/// What `smalloc_mallinfo2` returns: glibc's `struct mallinfo2`, field for
/// field. smalloc's slots are the "arena"; big allocations (above the
/// largest slot, a mapping each) the mmapped blocks.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct smalloc_mallinfo2_t {
    /// Bytes of the slots ever handed out.
    pub arena: usize,
    /// Freed slots waiting on smalloc's lists.
    pub ordblks: usize,
    /// Always 0 (glibc's fastbin blocks).
    pub smblks: usize,
    /// Big allocations.
    pub hblks: usize,
    /// Bytes mapped for big allocations.
    pub hblkhd: usize,
    /// Always 0.
    pub usmblks: usize,
    /// Always 0 (glibc's fastbin bytes).
    pub fsmblks: usize,
    /// Bytes of the slots in use (whole slots).
    pub uordblks: usize,
    /// Bytes of the freed slots on the lists.
    pub fordblks: usize,
    /// Bytes `smalloc_malloc_trim(0)` could give back to the kernel.
    pub keepcost: usize,
}

/// Prints smalloc's statistics report on stderr (what `malloc_stats` does
/// under `LD_PRELOAD`). See docs/c-usage.md for how to read it.
#[unsafe(no_mangle)]
pub extern "C" fn smalloc_malloc_stats() {
    introspect::malloc_stats()
}

/// The heap's statistics in glibc's `mallinfo2` shape.
#[unsafe(no_mangle)]
pub extern "C" fn smalloc_mallinfo2() -> smalloc_mallinfo2_t {
    introspect::mallinfo2()
}

/// Gives the pages of freed slots back to the kernel, keeping about `pad`
/// bytes of them; returns 1 if it released any memory, else 0. Safe while
/// other threads allocate and free.
#[unsafe(no_mangle)]
pub extern "C" fn smalloc_malloc_trim(pad: usize) -> c_int {
    introspect::malloc_trim(pad)
}

/// Writes the heap's statistics as glibc's `malloc_info` XML document to
/// `fp`. `options` must be 0; otherwise returns -1 with `errno = EINVAL`.
///
/// # Safety
/// `fp` is an open stdio stream.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn smalloc_malloc_info(options: c_int, fp: *mut libc::FILE) -> c_int {
    // SAFETY: per the contract.
    unsafe { introspect::malloc_info(options, fp) }
}

/// Writes the heap profile (the sampled blocks still live, and in pprof
/// form also every sample since the start) to `path`: a flame graph SVG if
/// `path` ends in `.svg`, folded stacks if it ends in `.folded`, else
/// pprof's gzipped protobuf. Returns 0, or -1 with `errno` set: `ENOSYS` in
/// a library built without the profiler (the default `libsmalloc.so`; see
/// docs/profiling.md), `EINVAL` for a null or non-UTF-8 path, or the error
/// of creating or writing the file.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn smalloc_prof_dump(path: *const c_char) -> c_int {
    crate::profile::dump(path)
}
