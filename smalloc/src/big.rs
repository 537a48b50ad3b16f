//! Allocations too big (or too aligned) for any slot: one mapping each.
//!
//! The caller knows the layout on free and realloc (Rust's `GlobalAlloc`
//! contract), so no header is stored: the mapping is
//! `round_up(size, page)` bytes at an address aligned to `max(align, page)`.

use core::ptr;
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::{features, hot_path, sys};

/// Big mappings live now, and their bytes (for statistics; cold paths
/// only). Relaxed: counts, read by statistics only.
static COUNT: AtomicUsize = AtomicUsize::new(0);
static BYTES: AtomicUsize = AtomicUsize::new(0);

/// Big mappings live now and their bytes.
pub fn usage() -> (u64, u64) {
    let n = COUNT.load(Ordering::Relaxed) as u64;
    (n, BYTES.load(Ordering::Relaxed) as u64)
}

/// Counts a mapping of `len` bytes made (`made`) or unmapped.
fn note(len: usize, made: bool) {
    if made {
        COUNT.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(len, Ordering::Relaxed);
    } else {
        COUNT.fetch_sub(1, Ordering::Relaxed);
        BYTES.fetch_sub(len, Ordering::Relaxed);
    }
}

/// Unmaps a whole big mapping `[p, p + len)` made by [`map_block`] (or
/// resized by [`remap_block`]).
pub fn unmap_block(p: *mut u8, len: usize) {
    features::big_unmapped(p);
    sys::unmap(p, len);
    note(len, false);
}

/// Shrinks the big mapping `[p, p + old)` to its first `new` bytes (both
/// page multiples) in place, unmapping the rest.
pub fn shrink_block(p: *mut u8, old: usize, new: usize) {
    sys::unmap(p.wrapping_add(new), old - new);
    BYTES.fetch_sub(old - new, Ordering::Relaxed);
}

/// Resizes the big mapping `[p, p + old)` to `new` bytes, moving it if
/// needed and `may_move`; `None` (and the mapping untouched) if the kernel
/// refuses.
pub fn remap_block(p: *mut u8, old: usize, new: usize, may_move: bool) -> Option<*mut u8> {
    let q = sys::remap(p, old, new, may_move)?;
    BYTES.fetch_add(new.wrapping_sub(old), Ordering::Relaxed);
    features::big_remapped(p, q);
    Some(q)
}

/// Length of the mapping for a request of `size` bytes; `None` on overflow.
#[inline]
fn map_len(size: usize) -> Option<usize> {
    let page = sys::page_size();
    Some(size.checked_add(page - 1)? & !(page - 1))
}

/// Maps a new big allocation. Null when the OS refuses or the size overflows.
#[cold]
pub fn alloc(size: usize, align: usize) -> *mut u8 {
    map_block(size, align, 0).map_or(ptr::null_mut(), |m| {
        features::big_allocated(m.start, m.len, m.block, size);
        m.block
    })
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
/// overflows. The heap profiler (the `profile` feature) counts the request.
pub fn map_block(size: usize, align: usize, below: usize) -> Option<Mapped> {
    let m = map_new(size, align, below)?;
    features::big_mapped(m.start, size);
    Some(m)
}

/// A new mapping of `len` bytes anywhere but in the layout's window. The
/// kernel places one there only when the address space above is full, and
/// only on demand (a reservation holds its window); it would then pass for
/// slots, so it is refused.
fn map_outside(len: usize) -> Option<*mut u8> {
    let p = sys::map(0, len, false)?;
    if hot_path::contains(p) || hot_path::contains(p.wrapping_add(len - 1)) {
        sys::unmap(p, len);
        return None;
    }
    Some(p)
}

/// The mapping of [`map_block`].
fn map_new(size: usize, align: usize, below: usize) -> Option<Mapped> {
    let page = sys::page_size();
    if align <= page {
        let offset = below.checked_add(align - 1)? & !(align - 1);
        let len = map_len(size.checked_add(offset)?)?;
        let start = map_outside(len)?;
        note(len, true);
        return Some(Mapped {
            start,
            len,
            block: start.wrapping_add(offset),
        });
    }
    // Map enough to find an aligned block with room below it, then trim
    // both ends.
    let total = map_len(size.checked_add(below)?)?.checked_add(align)?;
    let p = map_outside(total)?;
    let start = p.addr();
    let block = start.checked_add(below)?.checked_add(align - 1)? & !(align - 1);
    let map_start = (block - below) & !(page - 1);
    let map_end = block.checked_add(map_len(size)?)?;
    sys::unmap(p, map_start - start);
    sys::unmap(p.wrapping_add(map_end - start), start + total - map_end);
    note(map_end - map_start, true);
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
    features::big_freed(p);
    if let Some(len) = map_len(size) {
        unmap_block(p, len);
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
        features::big_resized(p, p, old_size, new_size);
        return p;
    }
    if align <= sys::page_size() {
        // The kernel moves page tables instead of copying bytes.
        let q = remap_block(p, old_len, new_len, true).unwrap_or(ptr::null_mut());
        features::big_resized(p, q, old_size, new_size);
        return q;
    }
    if new_len < old_len {
        // Shrinking keeps the aligned start: drop the tail.
        shrink_block(p, old_len, new_len);
        features::big_resized(p, p, old_size, new_size);
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
