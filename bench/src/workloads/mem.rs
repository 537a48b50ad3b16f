//! Allocation helpers every workload uses: layouts, and touching the
//! memory an allocator hands out (first and last byte at least, with
//! volatile writes so the compiler keeps them).

use std::alloc::{Layout, handle_alloc_error};
use std::ptr;

use crate::allocators::BenchAlloc;

/// The layout the workloads use for `size` bytes: 8-aligned like most
/// Rust objects, byte-aligned below 8 bytes like small strings.
#[inline]
pub fn layout(size: usize) -> Layout {
    let align = if size >= 8 { 8 } else { 1 };
    // Sizes are far below isize::MAX and align is a power of two.
    Layout::from_size_align(size.max(1), align).unwrap()
}

/// Writes `v` to the first and the last byte of `p..p+size`.
///
/// # Safety
/// `p..p+size` is writable and `size > 0`.
#[inline]
pub unsafe fn touch(p: *mut u8, size: usize, v: u8) {
    // SAFETY: both offsets are inside the block (caller's contract).
    unsafe {
        ptr::write_volatile(p, v);
        ptr::write_volatile(p.add(size - 1), v);
    }
}

/// Allocates `size` bytes from `a` and touches them; aborts on failure.
#[inline]
pub fn alloc_touched<A: BenchAlloc>(a: &A, size: usize, v: u8) -> *mut u8 {
    let l = layout(size);
    // SAFETY: `l` has a non-zero size.
    let p = unsafe { a.alloc(l) };
    if p.is_null() {
        handle_alloc_error(l);
    }
    // SAFETY: `p` is a fresh block of `l.size()` bytes.
    unsafe { touch(p, l.size(), v) };
    p
}

/// Frees a block made by [`alloc_touched`] (or grown by [`realloc_touched`]).
///
/// # Safety
/// `p` is a live block of `a` of `size` bytes made through this module.
#[inline]
pub unsafe fn free<A: BenchAlloc>(a: &A, p: *mut u8, size: usize) {
    // SAFETY: per the contract, `layout(size)` is the block's layout.
    unsafe { a.dealloc(p, layout(size)) }
}

/// Reallocates `p` (of `old` bytes) to `new` bytes and touches the result.
///
/// # Safety
/// As for [`free`].
#[inline]
pub unsafe fn realloc_touched<A: BenchAlloc>(
    a: &A,
    p: *mut u8,
    old: usize,
    new: usize,
    v: u8,
) -> *mut u8 {
    let new = new.max(1);
    // SAFETY: `p` is live with `layout(old)`; both layouts share the
    // alignment exactly when the sizes sit on the same side of 8, which
    // `realloc` requires, so cross-8 changes go through alloc+copy+free.
    unsafe {
        if (old >= 8) == (new >= 8) {
            let q = a.realloc(p, layout(old), new);
            if q.is_null() {
                handle_alloc_error(layout(new));
            }
            touch(q, new, v);
            q
        } else {
            let q = alloc_touched(a, new, v);
            ptr::copy_nonoverlapping(p, q, old.min(new));
            touch(q, new, v);
            free(a, p, old);
            q
        }
    }
}

/// A live block and its size.
#[derive(Clone, Copy)]
pub struct Blk {
    pub p: *mut u8,
    pub size: usize,
}

impl Blk {
    /// No block.
    pub const NONE: Blk = Blk {
        p: ptr::null_mut(),
        size: 0,
    };
}
