//! Giving the pages of freed slots back to the kernel on request
//! (`malloc_trim`): a sweep of every shared list, quiet or not
//! ([`purge::sweep`]), after the calling thread hands its own private lists
//! over. Regions whose every slot is free are reset; freed slots of at
//! least two pages give back their pages past the first (which keep their
//! links). The private lists of slabs other live threads own are left
//! alone: only their owner touches them (it hands them over after the
//! background thread's next sweep, [`purge::owner_tick`]).
//!
//! A trim never gives back a page of a slot someone is handed meanwhile: it
//! takes each shared list whole (allocating threads then find it empty and
//! look elsewhere) and puts it back after.

use crate::purge;

/// Gives back the pages of freed slots, largest size classes first, until
/// about `budget` bytes of them were resident. Returns the bytes given back
/// that were resident. Safe while other threads allocate and free.
pub fn release(budget: usize) -> usize {
    purge::lock();
    let out = purge::sweep(true, budget);
    purge::unlock();
    out.released
}
