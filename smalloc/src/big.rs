//! Allocations too big (or too aligned) for any slot: one mapping each.
//!
//! The caller knows the layout on free and realloc (Rust's `GlobalAlloc`
//! contract), so no header is stored: the mapping is
//! `round_up(size, page)` bytes at an address aligned to `max(align, page)`.

use core::ptr;

use crate::sys;

/// Length of the mapping for a request of `size` bytes; `None` on overflow.
#[inline]
fn map_len(size: usize) -> Option<usize> {
    let page = sys::page_size();
    Some(size.checked_add(page - 1)? & !(page - 1))
}

/// Maps a new big allocation. Null when the OS refuses or the size overflows.
#[cold]
pub fn alloc(size: usize, align: usize) -> *mut u8 {
    let page = sys::page_size();
    let Some(len) = map_len(size) else {
        return ptr::null_mut();
    };
    if align <= page {
        return sys::map(0, len, false).unwrap_or(ptr::null_mut());
    }
    // Map enough to find an aligned start, then trim both ends.
    let Some(total) = len.checked_add(align - page) else {
        return ptr::null_mut();
    };
    let Some(p) = sys::map(0, total, false) else {
        return ptr::null_mut();
    };
    let start = p.addr();
    let aligned = (start + align - 1) & !(align - 1);
    sys::unmap(p, aligned - start);
    sys::unmap(
        p.wrapping_add(aligned + len - start),
        start + total - (aligned + len),
    );
    p.wrapping_add(aligned - start)
}

/// Unmaps a big allocation of `size` bytes.
///
/// # Safety
/// `p` came from [`alloc`] (or [`realloc`]) with this `size`.
#[cold]
pub unsafe fn dealloc(p: *mut u8, size: usize) {
    if let Some(len) = map_len(size) {
        sys::unmap(p, len);
    }
}

/// Resizes a big allocation to `new_size` bytes that still needs a big
/// allocation, keeping the contents. Null (and `p` untouched) on failure.
///
/// # Safety
/// `p` came from [`alloc`] with `old_size` and `align`.
#[cold]
pub unsafe fn realloc(p: *mut u8, old_size: usize, align: usize, new_size: usize) -> *mut u8 {
    let (Some(old_len), Some(new_len)) = (map_len(old_size), map_len(new_size)) else {
        return ptr::null_mut();
    };
    if old_len == new_len {
        return p;
    }
    if align <= sys::page_size() {
        // The kernel moves page tables instead of copying bytes.
        return sys::remap(p, old_len, new_len).unwrap_or(ptr::null_mut());
    }
    if new_len < old_len {
        // Shrinking keeps the aligned start: drop the tail.
        sys::unmap(p.wrapping_add(new_len), old_len - new_len);
        return p;
    }
    let q = alloc(new_size, align);
    if !q.is_null() {
        // SAFETY: both mappings are ours, distinct, and at least
        // `old_size` bytes long.
        unsafe {
            ptr::copy_nonoverlapping(p, q, old_size);
            dealloc(p, old_size);
        }
    }
    q
}
