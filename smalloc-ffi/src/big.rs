//! Allocations larger than the largest slot (or aligned beyond it): one
//! private anonymous mapping each, with a header below the user pointer.
//!
//! ```text
//!  map_start                       user = map_start + offset
//!  |                               |
//!  v                               v
//!  +----------------------+--------+--------------------------------+----+
//!  | (unused, untouched)  | header |  user data (size bytes)        |pad |
//!  +----------------------+--------+--------------------------------+----+
//!  |<------------------ map_len (a multiple of the page size) ---------->|
//! ```
//!
//! The header records where the mapping starts, how long it is and the
//! alignment asked for, so `free`, `realloc` and `malloc_usable_size` work
//! from the pointer alone. Whether a pointer *is* a big allocation is
//! decided by the [registry](crate::big_registry), never by reading below
//! the pointer.
//!
//! The mapping itself (placement, alignment, trimming) is the core's
//! ([`raw::map_block`]), asked for [`HEADER_SPACE`] bytes below the block.
//! `realloc` resizes the mapping with `mremap` (the kernel moves page
//! tables, nothing is copied); a big allocation stays a mapping even when
//! shrunk below the largest slot, since that shrinks in place.

use core::ffi::c_void;
use core::ptr;

use smalloc_core::raw;

use crate::big_registry;

/// Bytes reserved below the user pointer for the header; keeps a big
/// allocation aligned to a cache line at least.
pub const HEADER_SPACE: usize = 64;

/// What a big allocation records about itself.
#[repr(C)]
#[derive(Clone, Copy)]
struct Header {
    /// Start of the mapping.
    map_start: usize,
    /// Length of the mapping in bytes.
    map_len: usize,
    /// Alignment of the user pointer that was asked for.
    align: usize,
}

const _: () = assert!(size_of::<Header>() <= HEADER_SPACE);

/// `x` rounded up to a multiple of the power of two `to`; `None` on
/// overflow.
fn round_up(x: usize, to: usize) -> Option<usize> {
    Some(x.checked_add(to - 1)? & !(to - 1))
}

/// Unmaps `[addr, addr + len)` of a mapping of ours (nothing if `len` is 0).
fn unmap(addr: usize, len: usize) {
    raw::unmap_block(ptr::with_exposed_provenance_mut(addr), len);
}

/// The header of the big allocation at `user`.
///
/// # Safety
/// `user` is a live big allocation (the registry knows it).
unsafe fn header(user: usize) -> *mut Header {
    ptr::with_exposed_provenance_mut(user - size_of::<Header>())
}

/// Maps a big allocation of `size` bytes whose address is a multiple of
/// `align` (a power of two). Null with `errno = ENOMEM` on failure.
#[cold]
#[inline(never)]
pub fn alloc(size: usize, align: usize) -> *mut c_void {
    debug_assert!(align.is_power_of_two());
    let Some(m) = raw::map_block(size, align, HEADER_SPACE) else {
        return crate::errno::enomem();
    };
    let (map_start, user) = (m.start.expose_provenance(), m.block.expose_provenance());
    let h = Header {
        map_start,
        map_len: m.len,
        align,
    };
    // SAFETY: the header space lies inside the fresh mapping, below `user`,
    // and `user` is at least 16-byte aligned so the header is aligned.
    unsafe { header(user).write(h) };
    if !big_registry::insert(user) {
        unmap(map_start, m.len);
        return crate::errno::enomem();
    }
    #[cfg(feature = "valgrind")]
    smalloc_core::valgrind::big_mapped(
        m.start.addr(),
        m.len,
        m.block.addr(),
        size,
        size_of::<Header>(),
    );
    ptr::with_exposed_provenance_mut(user)
}

/// Whether `p` is a live big allocation.
#[inline]
pub fn owns(p: *const c_void) -> bool {
    big_registry::contains(p.addr())
}

/// Frees `p` if it is a big allocation; false (and nothing done) if not.
///
/// # Safety
/// If `p` is a big allocation, the caller owns it and never uses it again.
#[cold]
pub unsafe fn free(p: *mut c_void) -> bool {
    let user = p.addr();
    if !big_registry::remove(user) {
        return false;
    }
    // SAFETY: the registry just confirmed (and forgot) our allocation.
    let h = unsafe { header(user).read() };
    #[cfg(feature = "valgrind")]
    smalloc_core::valgrind::big_freed(p.cast());
    unmap(h.map_start, h.map_len);
    true
}

/// Usable bytes of the big allocation `p` (from `p` to the mapping's end).
///
/// # Safety
/// `p` is a live big allocation ([`owns`]).
pub unsafe fn usable_size(p: *const c_void) -> usize {
    let user = p.addr();
    // SAFETY: per the contract.
    let h = unsafe { header(user).read() };
    let room = h.map_start + h.map_len - user;
    // Under memcheck, the block as it knows it: the rest is no-access.
    #[cfg(feature = "valgrind")]
    if let Some(n) = smalloc_core::valgrind::block_size_within(p.cast(), room) {
        return n;
    }
    room
}

/// Resizes the big allocation `p` to `size` bytes (`size > 0`), keeping
/// the contents. Null with `errno = ENOMEM` (and `p` untouched) on failure.
///
/// # Safety
/// `p` is a live big allocation owned by the caller.
#[cold]
pub unsafe fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    let user = p.addr();
    // SAFETY: per the contract.
    let h = unsafe { header(user).read() };
    let page = raw::page_size();
    let offset = user - h.map_start;
    let Some(new_len) = size.checked_add(offset).and_then(|n| round_up(n, page)) else {
        return crate::errno::enomem();
    };
    if new_len <= h.map_len {
        #[cfg(feature = "valgrind")]
        smalloc_core::valgrind::resized_within(
            p.cast(),
            None,
            size,
            h.map_start + h.map_len - user,
        );
        // Shrinking (or staying): drop the tail pages in place.
        raw::shrink_block(
            ptr::with_exposed_provenance_mut(h.map_start),
            h.map_len,
            new_len,
        );
        // SAFETY: the header lies in the part we kept.
        unsafe { (*header(user)).map_len = new_len };
        return p;
    }
    // Growing. Moving the mapping keeps the offset within its first page,
    // which keeps alignments up to the page size; larger ones may only grow
    // in place.
    let may_move = h.align <= page;
    #[cfg(feature = "valgrind")]
    let block = smalloc_core::valgrind::block_size_within(p.cast(), h.map_start + h.map_len - user);
    let old: *mut u8 = ptr::with_exposed_provenance_mut(h.map_start);
    if let Some(q) = raw::remap_block(old, h.map_len, new_len, may_move) {
        let new_start = q.expose_provenance();
        let new_user = new_start + offset;
        // SAFETY: the header moved with the mapping; we own it.
        unsafe {
            let nh = header(new_user);
            (*nh).map_start = new_start;
            (*nh).map_len = new_len;
        }
        big_registry::replace(user, new_user);
        #[cfg(feature = "valgrind")]
        smalloc_core::valgrind::big_moved(
            p.cast(),
            ptr::with_exposed_provenance_mut(new_user),
            block.unwrap_or(0),
            size,
        );
        return ptr::with_exposed_provenance_mut(new_user);
    }
    if may_move {
        return crate::errno::enomem();
    }
    // Over-aligned and no room to grow in place: allocate, copy, free.
    let q = alloc(size, h.align);
    if !q.is_null() {
        // SAFETY: distinct live allocations; the old one holds
        // `usable_size(p)` bytes and the new one more than that.
        unsafe {
            ptr::copy_nonoverlapping(p.cast::<u8>(), q.cast::<u8>(), usable_size(p));
            free(p);
        }
    }
    q
}
