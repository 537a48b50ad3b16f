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
    map_block(size, align, 0).map_or(ptr::null_mut(), |m| m.block)
}

/// A mapping made by [`map_block`].
#[derive(Clone, Copy, Debug)]
pub struct Mapped {
    /// Start of the mapping (page-aligned).
    pub start: *mut u8,
    /// Length of the mapping in bytes.
    pub len: usize,
    /// The block: a multiple of the alignment, with the room asked for
    /// below it inside the mapping, and `size` bytes above it.
    pub block: *mut u8,
}

/// Maps room for a block of `size` bytes at a multiple of `align` (a power
/// of two) with at least `below` bytes of the mapping before it (a front
/// end's header; 0 for none). `None` when the OS refuses or a size
/// overflows.
pub fn map_block(size: usize, align: usize, below: usize) -> Option<Mapped> {
    let page = sys::page_size();
    if align <= page {
        let offset = below.checked_add(align - 1)? & !(align - 1);
        let len = map_len(size.checked_add(offset)?)?;
        let start = sys::map(0, len, false)?;
        return Some(Mapped {
            start,
            len,
            block: start.wrapping_add(offset),
        });
    }
    // Map enough to find an aligned block with room below it, then trim
    // both ends.
    let total = map_len(size.checked_add(below)?)?.checked_add(align)?;
    let p = sys::map(0, total, false)?;
    let start = p.addr();
    let block = start.checked_add(below)?.checked_add(align - 1)? & !(align - 1);
    let map_start = (block - below) & !(page - 1);
    let map_end = block.checked_add(map_len(size)?)?;
    sys::unmap(p, map_start - start);
    sys::unmap(p.wrapping_add(map_end - start), start + total - map_end);
    Some(Mapped {
        start: p.wrapping_add(map_start - start),
        len: map_end - map_start,
        block: p.wrapping_add(block - start),
    })
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
        return sys::remap(p, old_len, new_len, true).unwrap_or(ptr::null_mut());
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
