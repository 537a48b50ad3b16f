//! The C allocation functions' semantics, shared by every exported name.
//!
//! Each function is `#[inline(always)]` so that every exported symbol
//! (`malloc`, `__libc_malloc`, `smalloc_malloc`, ...) carries the core's
//! fast path inline; the rare cases live in `#[cold]` functions.
//!
//! Pointers are classified on `free`/`realloc`/`malloc_usable_size` by
//! address only: inside smalloc's reservation (a slot, `raw::owns`), a live
//! big allocation ([`big`], found in its registry), or foreign (handed to
//! the next allocator, [`next`]).

use core::ffi::{c_int, c_void};
use core::ptr;

use smalloc_core::{grow, raw};

use crate::{big, errno, next};

/// The alignment `malloc` guarantees: `alignof(max_align_t)` on x86-64, as
/// glibc does.
pub const MIN_ALIGN: usize = 16;

/// `malloc`: at least `size` bytes aligned to [`MIN_ALIGN`]; `malloc(0)`
/// returns a unique pointer to a minimal slot.
#[inline(always)]
pub fn malloc(size: usize) -> *mut c_void {
    aligned(size, MIN_ALIGN)
}

/// `size` bytes aligned to `align`, a power of two (any size, any
/// alignment); null with `ENOMEM` on failure.
#[inline(always)]
pub fn aligned(size: usize, align: usize) -> *mut c_void {
    debug_assert!(align.is_power_of_two());
    let align = align.max(MIN_ALIGN);
    // Size 0 is not small: the hot path misses it.
    raw::alloc_or(size, align, aligned_cold).cast()
}

/// [`aligned`] when the hot path found nothing: `size == 0`, a small slot
/// the longer way, a large slot, or a big allocation.
#[cold]
#[inline(never)]
fn aligned_cold(size: usize, align: usize) -> *mut u8 {
    if size == 0 {
        return aligned(1, align).cast();
    }
    let sc = raw::size_class_16(size, align);
    // Small requests skip the look at the largest slot (a load).
    if sc < raw::LARGE_SC || sc <= raw::largest_sc() {
        let p = raw::alloc_slot_cold(sc, size).ptr;
        if !p.is_null() {
            return p;
        }
        // Every slab of the class and of the larger ones is used up (or the
        // system refuses more): a mapping of its own, if it can be had.
        if !raw::slots_used_up() {
            return errno::enomem().cast();
        }
    }
    big::alloc(size, align).cast()
}

/// `calloc`: `n * size` zeroed bytes; null with `ENOMEM` when the product
/// overflows. Never writes to a slot that was never handed out before (the
/// kernel's zero pages stay untouched, so a fresh huge `calloc` does not
/// raise the resident set).
#[inline(always)]
pub fn calloc(n: usize, size: usize) -> *mut c_void {
    let Some(total) = n.checked_mul(size) else {
        return errno::enomem();
    };
    let sc = raw::size_class_16(total, MIN_ALIGN);
    // Small requests skip the look at the largest slot (a load).
    if sc < raw::LARGE_SC || sc <= raw::largest_sc() {
        let p = raw::alloc_zeroed_slot(sc, total);
        if !p.is_null() {
            return p.cast();
        }
        // No slot left: a mapping of its own, as `aligned_cold` does.
        if !raw::slots_used_up() {
            return errno::enomem();
        }
    }
    // Size 0 (a fresh or cleared minimal slot) or a fresh mapping, which
    // the kernel zeroed.
    calloc_slow(total)
}

/// [`calloc`] of 0 bytes, of a big allocation, or of a block no slot is
/// left for.
#[cold]
#[inline(never)]
fn calloc_slow(total: usize) -> *mut c_void {
    if total == 0 {
        return calloc(1, 1);
    }
    big::alloc(total, MIN_ALIGN)
}

/// `free`: slots go back to their free list, big allocations are unmapped,
/// foreign pointers go to the next allocator; null is ignored.
///
/// # Safety
/// `p` is null or a live allocation (of this or the next allocator) that
/// the caller never uses again.
#[inline(always)]
pub unsafe fn free(p: *mut c_void) {
    // SAFETY: per the contract: null, foreign and big pointers are outside
    // the reservation, and a slot is given up.
    if !unsafe { raw::free_slot_hot(p.cast()) } {
        // SAFETY: per the contract.
        unsafe { free_cold(p) }
    }
}

/// [`free`] of anything but a small slot of the thread's own slab.
#[cold]
#[inline(never)]
unsafe fn free_cold(p: *mut c_void) {
    if raw::owns(p.cast()) {
        // SAFETY: a pointer inside the reservation is a slot we handed out
        // (every pointer we return is the start of its slot), and `free`'s
        // hot path just left it.
        unsafe { raw::free_slot_cold(p.cast()) }
    } else if !p.is_null() {
        // SAFETY: per the contract.
        unsafe { free_other(p) }
    }
}

/// [`free`] of a big allocation or a foreign pointer.
#[cold]
#[inline(never)]
unsafe fn free_other(p: *mut c_void) {
    // SAFETY: per the contract of `free`.
    unsafe {
        if !big::free(p) {
            next::free(p);
        }
    }
}

/// `realloc`, with glibc's edge cases: `realloc(NULL, n)` is `malloc(n)`;
/// `realloc(p, 0)` frees `p` and returns null. A slot that still holds
/// `size` bytes is kept (growing or shrinking); otherwise the contents move
/// to a slot chosen by the core's growth policy (`smalloc_core::grow`: the
/// "growers", and 2 MiB for a block doubling past 64 KiB) or a big
/// allocation.
/// On failure: null, `ENOMEM`, `p` untouched.
///
/// # Safety
/// `p` is null or a live allocation (of this or the next allocator).
#[inline(always)]
pub unsafe fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if raw::owns(p.cast()) {
        // `size - 1 < slot` is `0 < size <= slot`: size 0 wraps around and
        // takes the slow path. A block that shrinks to an eighth of a slot
        // of 1 MiB or more moves to a smaller slot.
        let slot = raw::slot_size(p.cast());
        if size.wrapping_sub(1) < slot && !raw::shrink_leaves_slot(slot, size) {
            #[cfg(feature = "valgrind")]
            smalloc_core::valgrind::resized(p.cast(), None, size);
            return p;
        }
        // SAFETY: `p` is a live slot of ours.
        return unsafe { realloc_move_slot(p, size) };
    }
    // SAFETY: per the contract.
    unsafe { realloc_slow(p, size) }
}

/// [`realloc`] of a slot that does not hold `size` bytes (or `size == 0`),
/// or that the block shrinks out of.
///
/// # Safety
/// `p` is a live slot owned by the caller.
#[cold]
#[inline(never)]
unsafe fn realloc_move_slot(p: *mut c_void, size: usize) -> *mut c_void {
    if size == 0 {
        // SAFETY: per the contract.
        unsafe { raw::free_slot(p.cast()) };
        return ptr::null_mut();
    }
    // SAFETY: `p` is a live slot the caller owns; `size` is not zero.
    let q = unsafe {
        grow::realloc_slot(p.cast(), None, size, MIN_ALIGN, |n, a| {
            big::alloc(n, a).cast()
        })
    };
    if q.is_null() {
        return errno::enomem();
    }
    q.cast()
}

#[cold]
#[inline(never)]
unsafe fn realloc_slow(p: *mut c_void, size: usize) -> *mut c_void {
    if p.is_null() {
        return malloc(size);
    }
    if size == 0 {
        // SAFETY: per the contract.
        unsafe { free_other(p) };
        return ptr::null_mut();
    }
    // SAFETY: per the contract; `big::owns` tells which allocator made `p`.
    unsafe {
        if big::owns(p) {
            big::realloc(p, size)
        } else {
            next::realloc(p, size)
        }
    }
}

/// `reallocarray`: `realloc(p, n * size)`, null with `ENOMEM` (and `p`
/// untouched) when the product overflows.
///
/// # Safety
/// As for [`realloc`].
#[inline(always)]
pub unsafe fn reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    match n.checked_mul(size) {
        // SAFETY: per the contract.
        Some(total) => unsafe { realloc(p, total) },
        None => errno::enomem(),
    }
}

/// `malloc_usable_size`: the bytes usable at `p` (the whole slot, the rest
/// of a big mapping, or what the next allocator says); 0 for null.
///
/// # Safety
/// `p` is null or a live allocation (of this or the next allocator).
#[inline(always)]
pub unsafe fn usable_size(p: *mut c_void) -> usize {
    if raw::owns(p.cast()) {
        // Under memcheck, the block as it knows it (as its own
        // malloc_usable_size says): the rest of the slot is no-access.
        #[cfg(feature = "valgrind")]
        if let Some(n) = smalloc_core::valgrind::block_size(p.cast()) {
            return n;
        }
        return raw::slot_size(p.cast());
    }
    // SAFETY: per the contract.
    unsafe { usable_size_slow(p) }
}

/// [`usable_size`] of null, a big allocation or a foreign pointer.
///
/// # Safety
/// As for [`usable_size`].
#[cold]
#[inline(never)]
unsafe fn usable_size_slow(p: *mut c_void) -> usize {
    if p.is_null() {
        return 0;
    }
    // SAFETY: per the contract; `big::owns` tells which allocator made `p`.
    unsafe {
        if big::owns(p) {
            big::usable_size(p)
        } else {
            next::usable_size(p)
        }
    }
}

/// Whether `p` was allocated by smalloc (a slot or a big allocation).
#[inline]
pub fn owns(p: *const c_void) -> bool {
    raw::owns(p.cast()) || big::owns(p)
}

/// `aligned_alloc` and `memalign`: `align` must be a power of two (else
/// null with `EINVAL`).
#[inline(always)]
pub fn memalign(align: usize, size: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        return errno::einval();
    }
    aligned(size, align)
}

/// `posix_memalign`: `align` must be a power of two multiple of
/// `sizeof(void *)` (else `EINVAL`); `ENOMEM` when out of memory; `errno`
/// is left alone and `*out` is written only on success.
///
/// # Safety
/// `out` is valid for a pointer-sized write.
#[inline(always)]
pub unsafe fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int {
    if !align.is_power_of_two() || align < size_of::<*mut c_void>() {
        return libc::EINVAL;
    }
    let saved = errno::get();
    let p = aligned(size, align);
    if p.is_null() {
        errno::set(saved);
        return libc::ENOMEM;
    }
    // SAFETY: per the contract.
    unsafe { out.write(p) };
    0
}

/// `valloc`: `size` bytes aligned to the page size.
#[inline]
pub fn valloc(size: usize) -> *mut c_void {
    aligned(size, raw::page_size())
}

/// `pvalloc`: like `valloc` with `size` rounded up to a whole number of
/// pages (`pvalloc(0)` is one page); `ENOMEM` if the rounding overflows.
#[inline]
pub fn pvalloc(size: usize) -> *mut c_void {
    let page = raw::page_size();
    let Some(rounded) = size.max(1).checked_add(page - 1) else {
        return errno::enomem();
    };
    aligned(rounded & !(page - 1), page)
}
