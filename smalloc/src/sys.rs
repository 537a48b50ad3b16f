//! Thin wrappers over the operating system calls smalloc makes.

use core::ptr;

/// Maps `len` bytes of fresh, zeroed, private anonymous memory without
/// reserving swap for it. With `fixed`, asks for exactly `addr` (never
/// replacing an existing mapping); otherwise `addr` is only a hint (0: none).
pub fn map(addr: usize, len: usize, fixed: bool) -> Option<*mut u8> {
    let flags = libc::MAP_PRIVATE
        | libc::MAP_ANONYMOUS
        | libc::MAP_NORESERVE
        | if fixed { libc::MAP_FIXED_NOREPLACE } else { 0 };
    // SAFETY: an anonymous mapping without MAP_FIXED never replaces existing
    // memory; the kernel picks a free range (MAP_FIXED_NOREPLACE fails instead
    // of replacing, and kernels before 4.17 treat `addr` as a hint).
    let p = unsafe {
        libc::mmap(
            ptr::with_exposed_provenance_mut(addr),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        None
    } else {
        Some(p.cast())
    }
}

/// Unmaps `[addr, addr + len)`; nothing when `len` is 0.
pub fn unmap(addr: usize, len: usize) {
    if len == 0 {
        return;
    }
    // SAFETY: callers pass only ranges they mapped themselves and no longer
    // hand out.
    let rc = unsafe { libc::munmap(ptr::with_exposed_provenance_mut(addr), len) };
    debug_assert_eq!(rc, 0, "munmap failed");
}

/// Grows or shrinks the mapping `[p, p + old)` to `new` bytes, moving it if
/// needed. `None` if the kernel refuses (the old mapping is then untouched).
pub fn remap(p: *mut u8, old: usize, new: usize) -> Option<*mut u8> {
    // SAFETY: `p..p+old` is a whole mapping of ours (checked by the caller).
    let q = unsafe { libc::mremap(p.cast(), old, new, libc::MREMAP_MAYMOVE) };
    if q == libc::MAP_FAILED {
        None
    } else {
        Some(q.cast())
    }
}

/// The page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as usize } else { 4096 }
}

/// This process's id.
pub fn pid() -> usize {
    // SAFETY: getpid has no preconditions and cannot fail.
    unsafe { libc::getpid() as usize }
}

/// Lets another thread run.
pub fn yield_now() {
    // SAFETY: sched_yield has no preconditions.
    unsafe { libc::sched_yield() };
}

/// Exposes the provenance of `p` so later integer-to-pointer conversions of
/// addresses inside the same mapping are valid; returns its address.
pub fn expose(p: *mut u8) -> usize {
    p.expose_provenance()
}

/// A pointer to `addr`, with the provenance of the mapping it lies in.
#[inline(always)]
pub fn ptr_at<T>(addr: usize) -> *mut T {
    ptr::with_exposed_provenance_mut(addr)
}
