//! Held slots: an owner that frees a small slot of another slab keeps it
//! (one per size class) instead of sending it home, and hands it out again
//! when its private list of that class runs dry. A thread that frees what
//! other threads allocated and allocates as much (a server's workers) then
//! reuses a block it just read, still in its core's cache, without a
//! compare-and-swap on either side.

use core::sync::atomic::Ordering;

use crate::home_slab::{self, is_owner};
use crate::layout::{self, Slot};
use crate::metadata::{self, tables};
use crate::{features, sys};

/// Slots of size classes below this one are held: up to 1 KiB, where
/// blocks are many and a held slot is little memory.
pub const HELD_SC: u32 = layout::class_of_mask((1 << 10) - 1) + 1;

const _: () = assert!(HELD_SC <= home_slab::HELD_CREDIT_BITS);

/// The thread frees the slot at `addr`, of small size class `sc`, which its
/// slab's hot path did not take: true if it holds it now (it owns a slab
/// and has a credit for `sc`, or owns none and has cells:
/// [`guest`](crate::guest)); the caller sends the slot home otherwise.
#[inline]
pub fn hold(addr: usize, sc: u32) -> bool {
    if config_off() || sc >= HELD_SC {
        return false;
    }
    // An owner's credits, or a guest's set plus one: none, nothing held
    // (and a pinned thread, which has neither, stops here).
    let credits = home_slab::held_credits();
    if credits == 0 {
        return false;
    }
    let owned = home_slab::owned();
    if !is_owner(owned) {
        return crate::guest::hold(credits - 1, addr, sc);
    }
    if (credits >> sc) & 1 == 0 {
        return false;
    }
    let cell = tables(metadata::private_block(home_slab::owned_slab(owned))).held(sc);
    // Relaxed: only the owner touches its tables (see private_list).
    if cell.load(Ordering::Relaxed) as usize == addr | TAKEN {
        return false;
    }
    cell.store(addr as u64, Ordering::Relaxed);
    home_slab::set_held_credits(credits & !(1 << sc));
    true
}

/// A held cell is a slot's address (slots are at least 4-byte aligned): the
/// slot held, or, with `TAKEN`, none, the address naming the slot last
/// handed out from the cell, which goes home if it is freed again before
/// the next allocation of its class: a thread that cycles on one slot of
/// another slab must not keep it, whose cache line that slab's other slots
/// share (`cache-scratch`). A cell holds a slot only after a credit: the
/// owner's private list of the class ran dry since it last held one (a bit
/// per class in the thread's hint word, [`home_slab::held_credits`]). So an
/// owner holds at most one slot per class between two of its allocations
/// of it, and a thread that only frees (a consumer) holds at most one.
pub const TAKEN: usize = 1;

/// The held slot of size class `sc` of the slab at `slab_addr`, which the
/// caller owns and whose private list of `sc` ran dry, taken; the thread
/// gets its credit for `sc` either way.
#[inline]
pub fn take(slab_addr: usize, sc: u32) -> Option<Slot> {
    if config_off() || sc >= HELD_SC {
        return None;
    }
    let credits = home_slab::held_credits();
    if credits & 1 << sc == 0 {
        home_slab::set_held_credits(credits | 1 << sc);
    }
    let cell = tables(metadata::private_block(slab_addr)).held(sc);
    // Relaxed: the owner's cells.
    let c = cell.load(Ordering::Relaxed) as usize;
    if c == 0 || c & TAKEN != 0 {
        return None;
    }
    cell.store((c | TAKEN) as u64, Ordering::Relaxed);
    Some(Slot {
        ptr: sys::ptr_at(c),
        fresh: false,
    })
}

/// Sends every slot held in the private block of the slab at `slab_addr`,
/// which the caller owns (or has claimed), home, and empties its cells.
pub fn send_home(slab_addr: usize) {
    if features::config::SECURE {
        return;
    }
    let t = tables(metadata::private_block(slab_addr));
    for sc in layout::MIN_SC..HELD_SC {
        let cell = t.held(sc);
        // Relaxed: the owner's cells.
        let held = cell.load(Ordering::Relaxed) as usize;
        cell.store(0, Ordering::Relaxed);
        if held != 0 && held & TAKEN == 0 {
            // SAFETY: a held slot is free and on no list; we hold it.
            unsafe { crate::cold_path::push_home(held, sc) };
        }
    }
}

/// Whether holding is off: in the secure mode (its double-free check needs
/// every freed slot on a list) and while a feature sends frees to the cold
/// path.
#[inline(always)]
pub fn config_off() -> bool {
    features::config::SECURE || features::frees_cold()
}

/// The slot held in the private block at `block` for size class `sc`, if
/// any (a snapshot's read: the owner may change it meanwhile).
pub fn held_in(block: usize, sc: u32) -> Option<usize> {
    if features::config::SECURE || sc >= HELD_SC {
        return None;
    }
    // Relaxed: a snapshot reads; nothing is read through the value.
    let held = tables(block).held(sc).load(Ordering::Relaxed) as usize;
    (held != 0 && held & TAKEN == 0).then_some(held)
}
