//! Held slots: an owner that frees a small slot of another slab keeps it
//! (one per size class) instead of sending it home, and hands it out again
//! when its own supply of that class runs dry; the slot it held before goes
//! home in its place. A thread that frees what other threads allocated and
//! allocates as much (a server's workers) then reuses the blocks it just
//! read, still in its core's cache, without a compare-and-swap on either
//! side, while each slab keeps getting its slots back, one free late.

use core::sync::atomic::Ordering;

use crate::home_slab::{self, is_owner};
use crate::layout::{self, Slot};
use crate::metadata::{self, tables};
use crate::{features, sys};

/// Slots of size classes below this one are held: up to 1 KiB, where
/// blocks are many and a held slot is little memory.
pub const HELD_SC: u32 = layout::class_of_mask((1 << 10) - 1) + 1;

/// The thread frees the slot at `addr`, of small size class `sc`, which its
/// slab's hot path did not take. If the thread owns a slab, it holds the
/// slot and returns the slot it held before (0: none); otherwise returns
/// `addr`. The caller sends what is returned home.
#[inline]
pub fn hold(addr: usize, sc: u32) -> usize {
    if config_off() || sc >= HELD_SC {
        return addr;
    }
    let owned = home_slab::owned();
    if !is_owner(owned) {
        return addr;
    }
    let slab_addr = home_slab::owned_slab(owned);
    if layout::slab_addr_of(addr) == slab_addr {
        return addr;
    }
    let cell = tables(metadata::private_block(slab_addr)).held(sc);
    // Relaxed: only the owner touches its tables (see private_list).
    let old = cell.load(Ordering::Relaxed) as usize;
    if old == 0 || old == addr | WANTED {
        return addr;
    }
    cell.store(addr as u64, Ordering::Relaxed);
    if old & WANTED != 0 { 0 } else { old }
}

/// Set in a held cell that holds nothing while the owner's supply of its
/// class ran dry since the last hand-over, with the address of the slot it
/// last handed out (a cell of 0: the supply did not run dry; freed slots
/// go home). A slot handed out from the cell and freed again at once goes
/// home: a thread that cycles on one slot of another slab must not keep
/// it, whose cache line that slab's other slots share.
const WANTED: usize = 1;

/// The held slot of size class `sc` of the slab at `slab_addr`, which the
/// caller owns and whose supply of `sc` ran dry, taken. Only once the owner
/// has claimed never-used slots of `sc`: a thread that just started and
/// frees a block another thread handed it must not take that block's
/// cache line, which the other thread's blocks share, as its own.
#[inline]
pub fn take(slab_addr: usize, sc: u32) -> Option<Slot> {
    if config_off() || sc >= HELD_SC {
        return None;
    }
    let t = tables(metadata::private_block(slab_addr));
    let cell = t.held(sc);
    // Relaxed: the owner's cells.
    let held = cell.load(Ordering::Relaxed) as usize;
    if held & WANTED != 0 || held == 0 {
        cell.store(WANTED as u64, Ordering::Relaxed);
        return None;
    }
    cell.store((held | WANTED) as u64, Ordering::Relaxed);
    Some(Slot {
        ptr: sys::ptr_at(held),
        fresh: false,
    })
}

/// Sends every slot held in the private block of the slab at `slab_addr`,
/// which the caller owns (or has claimed), home.
pub fn send_home(slab_addr: usize) {
    if config_off() {
        return;
    }
    let t = tables(metadata::private_block(slab_addr));
    for sc in layout::MIN_SC..HELD_SC {
        let cell = t.held(sc);
        // Relaxed: the owner's cells.
        let held = cell.load(Ordering::Relaxed) as usize;
        cell.store(0, Ordering::Relaxed);
        if held & WANTED == 0 && held != 0 {
            // SAFETY: a held slot is free and on no list; we hold it.
            unsafe { crate::cold_path::push_home(held, sc) };
        }
    }
}

/// Whether holding is off: in the secure mode (its double-free check needs
/// every freed slot on a list) and while a feature sends frees to the cold
/// path.
#[inline(always)]
fn config_off() -> bool {
    features::config::SECURE || features::frees_cold()
}
