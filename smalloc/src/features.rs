//! The one seam between the allocator and its optional features: the event
//! counters (`counters`), the heap profiler (`profile`), the secure mode
//! (`secure`) and memcheck's view of the blocks (`valgrind`).
//!
//! The core calls the hooks here where a feature acts (a slot handed out or
//! freed, a block resized, a big mapping made, moved or unmapped, the
//! layout made or committed) and reads and writes free-list links through
//! [`links`], the link codec chosen for the build. A feature that is off
//! leaves its hooks empty `#[inline(always)]` functions, so the default
//! build is the machine code of a core without features; nothing outside
//! this file and [`links`] names a feature. The features build on the lower
//! floors only (`layout`, `metadata`, `free_list`, `thread_words`, `base`,
//! `sys`); what the profiler needs of the allocator itself (its slots)
//! comes in as [`Core`], so no feature imports the core above them.

pub mod config;
pub mod counters;
pub mod links;
#[cfg(feature = "profile")]
pub mod profile;
#[cfg(feature = "secure")]
mod secure;
#[cfg(feature = "valgrind")]
pub mod valgrind;

/// The standard library, for the profiler (which writes profiles with it);
/// the core is `no_std`.
#[cfg(feature = "profile")]
extern crate std;

#[cfg(all(feature = "valgrind", any(feature = "secure", feature = "profile")))]
compile_error!("the valgrind feature is not combined with secure or profile");
#[cfg(all(
    feature = "valgrind",
    not(any(target_arch = "x86_64", target_arch = "aarch64"))
))]
compile_error!("the valgrind feature's client requests exist for x86-64 and aarch64 only");

use crate::layout::Slot;

pub use counters::{Counts, Event, NUM_EVENTS, count, count_n, owner_alloc, owner_free, ticks};
pub(crate) use counters::{read as counts, read_events};

/// The features' public modules, re-exported at the crate root.
pub mod public {
    pub use super::counters;
    #[cfg(feature = "profile")]
    pub use super::profile;
    #[cfg(feature = "valgrind")]
    #[doc(hidden)]
    pub use super::valgrind;
}

/// The size in bytes of the request a slot is taken for, carried down the
/// allocation paths to the profiler's countdown and to memcheck's block.
/// Zero-sized without those features: no path carries anything.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    #[cfg(any(feature = "profile", feature = "valgrind"))]
    size: usize,
}

impl Request {
    /// A request of `size` bytes.
    #[inline(always)]
    pub fn new(size: usize) -> Request {
        #[cfg(not(any(feature = "profile", feature = "valgrind")))]
        let _ = size;
        Request {
            #[cfg(any(feature = "profile", feature = "valgrind"))]
            size,
        }
    }
}

/// What the profiler needs of the allocator, which it cannot import (the
/// allocator imports it): handed to the hooks by their callers.
#[cfg_attr(not(feature = "profile"), allow(dead_code))]
pub struct Core {
    /// A slot of size class `sc` from the profile's slab: from its shared
    /// list or never used (nobody owns that slab); `None` when none is left.
    pub profile_slot: fn(u32) -> Option<Slot>,
    /// Frees a slot handed out and not freed since.
    pub free: unsafe fn(*mut u8),
}

/// The layout's address space was just made at `base` (`on_demand`: mapped
/// as used, no reservation), before it is published.
#[inline(always)]
pub fn made(base: usize, on_demand: bool) {
    #[cfg(feature = "valgrind")]
    if !on_demand {
        valgrind::reserved(base);
    }
    #[cfg(feature = "secure")]
    secure::init();
    let _ = (base, on_demand);
}

/// `[addr, addr + len)` of the layout was just mapped on demand, for
/// never-used slots.
#[inline(always)]
pub fn mapped_on_demand(addr: usize, len: usize) {
    // A new mapping is defined memory to memcheck; never-used slots are not.
    #[cfg(feature = "valgrind")]
    valgrind::no_access(addr, len);
    let _ = (addr, len);
}

/// The hot path of allocation took `p`, a reused slot of the calling
/// thread's own slab (its link cell at `p`), for `req`: what to hand out,
/// `p` or, when the profiler samples this request, a slot of its own (and
/// `p` goes back).
#[inline(always)]
pub fn hot_alloc(p: *mut u8, req: Request, core: &'static Core) -> *mut u8 {
    links::handed_out(p.addr());
    #[cfg(feature = "profile")]
    if profile::due(req.size) {
        return profile::sample_hot(p, req.size, core);
    }
    #[cfg(feature = "valgrind")]
    valgrind::allocated(p, req.size);
    let _ = (req, core);
    p
}

/// Whether every free must take the cold path (memcheck's bookkeeping and
/// quarantine; the secure mode's fill of freed blocks).
#[inline(always)]
pub fn frees_cold() -> bool {
    #[cfg(feature = "valgrind")]
    if valgrind::active() {
        return true;
    }
    #[cfg(feature = "secure")]
    if secure::filling() {
        return true;
    }
    false
}

/// Before the cold path takes a slot of size class `sc` for `req`: if the
/// profiler samples this request, the slot it hands out instead (counted
/// and handed out already). Counted once the thread has a slab (the first
/// allocation counts on its second pass).
#[inline(always)]
pub fn cold_sample(sc: u32, req: Request, core: &'static Core) -> Option<Slot> {
    #[cfg(feature = "profile")]
    if crate::thread_words::load::<{ crate::thread_words::CURRENT }>() != 0
        && profile::due(req.size)
    {
        return sampled(sc, req, core);
    }
    let _ = (sc, req, core);
    None
}

/// The countdown ran out (see [`cold_sample`]).
#[cfg(feature = "profile")]
#[cold]
#[inline(never)]
fn sampled(sc: u32, req: Request, core: &'static Core) -> Option<Slot> {
    let got = profile::sample_new(sc, req.size, core)?;
    counters::alloc(got.ptr);
    #[cfg(feature = "valgrind")]
    valgrind::allocated(got.ptr, req.size);
    Some(got)
}

/// The cold path hands out `got` (null: nothing) for `req`.
#[inline(always)]
pub fn cold_alloc(got: Slot, req: Request) {
    counters::alloc(got.ptr);
    #[cfg(feature = "valgrind")]
    valgrind::allocated(got.ptr, req.size);
    if !got.fresh && !got.ptr.is_null() {
        links::handed_out(got.ptr.addr());
    }
    let _ = req;
}

/// The slot at `p` is being freed by the cold path: the slot to free now
/// (memcheck holds `p` in its quarantine and gives back the one that
/// leaves it, or none).
#[inline(always)]
pub fn freeing(p: *mut u8) -> Option<*mut u8> {
    #[cfg(feature = "valgrind")]
    return valgrind::freed(p);
    #[cfg(not(feature = "valgrind"))]
    Some(p)
}

/// The slot at `addr`, of size class `sc`, is being freed (its link cell
/// checked): true if a feature keeps it (the profiler, a sampled block's
/// slot), and the caller pushes it nowhere.
#[inline(always)]
pub fn freed(addr: usize, sc: u32) -> bool {
    #[cfg(feature = "secure")]
    secure::fill(addr, sc);
    counters::free(addr);
    #[cfg(feature = "profile")]
    if crate::layout::slab_of(addr) == crate::layout::PROFILE_SLAB && profile::freed(addr, sc) {
        return true;
    }
    let _ = (addr, sc);
    false
}

/// The slot at `p` now holds `new` bytes in place (`old` if the front end
/// knows it).
#[inline(always)]
pub fn resized(p: *mut u8, old: Option<usize>, new: usize) {
    #[cfg(feature = "valgrind")]
    valgrind::resized(p, old, new);
    let _ = (p, old, new);
}

/// How many bytes of the block at `p` a move keeps: `keep`, or less when
/// the front end did not know the block's size (`old`) and memcheck does.
#[inline(always)]
pub fn copy_len(p: *const u8, old: Option<usize>, keep: usize) -> usize {
    #[cfg(feature = "valgrind")]
    return valgrind::copy_len(p, old, keep);
    #[cfg(not(feature = "valgrind"))]
    {
        let _ = (p, old);
        keep
    }
}

/// The first `size` bytes at `p` were just cleared (or are still zero).
#[inline(always)]
pub fn zeroed(p: *mut u8, size: usize) {
    #[cfg(feature = "valgrind")]
    valgrind::defined(p, size);
    let _ = (p, size);
}

/// A big mapping at `start` was made for a request of `size` bytes (by
/// Rust's allocations or a front end's).
#[inline(always)]
pub fn big_mapped(start: *mut u8, size: usize) {
    #[cfg(feature = "profile")]
    profile::big_mapped(start, size);
    let _ = (start, size);
}

/// A big block of Rust's allocations, `size` bytes at `block` in the
/// mapping `[start, start + len)`, is handed out (a front end with headers
/// describes its own blocks to memcheck).
#[inline(always)]
pub fn big_allocated(start: *mut u8, len: usize, block: *mut u8, size: usize) {
    #[cfg(feature = "valgrind")]
    valgrind::big_mapped(start.addr(), len, block.addr(), size, 0);
    let _ = (start, len, block, size);
}

/// The big mapping at `start` is being unmapped.
#[inline(always)]
pub fn big_unmapped(start: *mut u8) {
    #[cfg(feature = "profile")]
    profile::big_unmapped(start);
    let _ = start;
}

/// The big mapping at `from` moved to `to`.
#[inline(always)]
pub fn big_remapped(from: *mut u8, to: *mut u8) {
    #[cfg(feature = "profile")]
    profile::big_moved(from, to);
    let _ = (from, to);
}

/// The big block at `p` (of Rust's allocations) is being freed.
#[inline(always)]
pub fn big_freed(p: *mut u8) {
    #[cfg(feature = "valgrind")]
    valgrind::big_freed(p);
    let _ = p;
}

/// The big block at `p` of `old` bytes (of Rust's allocations) is now at
/// `q` (null: the move failed, `p` is unchanged) with `new` bytes.
#[inline(always)]
pub fn big_resized(p: *mut u8, q: *mut u8, old: usize, new: usize) {
    #[cfg(feature = "valgrind")]
    valgrind::big_moved(p, q, old, new);
    let _ = (p, q, old, new);
}

/// Free slots of size class `sc` of the profile's slab that the sampling
/// threads keep (on no list).
#[inline(always)]
pub fn kept(sc: u32) -> u64 {
    #[cfg(feature = "profile")]
    return profile::kept(sc);
    #[cfg(not(feature = "profile"))]
    {
        let _ = sc;
        0
    }
}

/// A slot of size class `sc` of the profile's slab kept by the record of
/// a thread that ended, if any.
#[inline(always)]
pub fn idle_slot(sc: u32) -> Option<*mut u8> {
    #[cfg(feature = "profile")]
    return profile::idle_slot(sc);
    #[cfg(not(feature = "profile"))]
    {
        let _ = sc;
        None
    }
}

/// Before a trim: the slots kept by the profiler's records go to the
/// shared lists, where the trim reaches them.
#[inline(always)]
pub fn before_trim() {
    #[cfg(feature = "profile")]
    profile::flush_idle();
}
