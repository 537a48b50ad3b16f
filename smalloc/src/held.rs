//! Held slots: an owner that frees a small slot of another slab keeps it
//! (up to [`DEPTH`] per size class) instead of sending it home, and hands
//! it out again when its private list of that class runs dry. A thread that
//! frees what other threads allocated and allocates as much (a server's
//! workers) then reuses a block it just read, still in its core's cache,
//! without a compare-and-swap on either side.

use core::sync::atomic::{AtomicU64, Ordering};

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
    let c = cell.load(Ordering::Relaxed) as usize;
    if c == addr | TAKEN {
        return false;
    }
    // User space ends below 2^56 (x86-64 with five-level paging; aarch64
    // at 2^52): the top byte is free.
    debug_assert_eq!(addr & !ADDR_MASK, 0);
    let before = if c & TAKEN != 0 { 0 } else { c };
    if before != 0 && !chained(sc) {
        return false;
    }
    let depth = before >> DEPTH_SHIFT;
    if chained(sc) {
        // Relaxed: held slots are the owner's.
        chain_word(addr).store(before as u64, Ordering::Relaxed);
    }
    cell.store(
        (addr | (depth + 1) << DEPTH_SHIFT) as u64,
        Ordering::Relaxed,
    );
    if depth + 1 >= DEPTH || !chained(sc) {
        home_slab::set_held_credits(credits & !(1 << sc));
    }
    true
}

/// Slots of one size class an owner holds at most: measured against 1, 4,
/// 16 and 32 (docs/decisions.md, "Held slots: how many").
pub const DEPTH: usize = 8;

/// A chain's word (the cell, and each held slot's first word, naming the
/// slot held before it): a held slot's address, with the number of slots
/// from it to the chain's end in the top byte; 0 for none.
pub(crate) const DEPTH_SHIFT: u32 = 56;

/// The address in a chain's word.
pub(crate) const ADDR_MASK: usize = (1 << DEPTH_SHIFT) - 1;

const _: () = assert!(DEPTH < 1 << (usize::BITS - DEPTH_SHIFT));

/// Whether slots of class `sc` have room for the chain's word (all but the
/// 4-byte class, which holds one).
#[inline(always)]
pub(crate) fn chained(sc: u32) -> bool {
    layout::slot_size(sc) >= size_of::<u64>()
}

/// The chain's word of the held slot at `addr`.
#[inline(always)]
pub(crate) fn chain_word(addr: usize) -> &'static AtomicU64 {
    // SAFETY: a slot of at least 8 bytes, 8-aligned (every class from 8
    // bytes is), in the reservation for as long as the process lives.
    unsafe { &*sys::ptr_at::<AtomicU64>(addr) }
}

/// The chain's word in the held slot at `addr` of class `sc`: the rest of
/// the chain.
#[inline(always)]
fn rest(addr: usize, sc: u32) -> usize {
    if !chained(sc) {
        return 0;
    }
    // Relaxed: held slots are the owner's.
    chain_word(addr).load(Ordering::Relaxed) as usize
}

/// A held cell is a chain's word (slots are at least 4-byte aligned), or,
/// with `TAKEN`, none held, the address naming the slot last
/// handed out from the cell, which goes home if it is freed again before
/// the next allocation of its class: a thread that cycles on one slot of
/// another slab must not keep it, whose cache line that slab's other slots
/// share (`cache-scratch`). A cell holds a slot only after a credit: the
/// owner's private list of the class ran dry since it last held one (a bit
/// per class in the thread's hint word, [`home_slab::held_credits`]), and
/// lets it hold up to [`DEPTH`]. So an owner holds at most that many slots
/// per class, and a thread that only frees (a consumer) holds them only of
/// a class whose private list once ran dry. Only the last slot of a chain
/// leaves the mark when it is handed out.
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
    let addr = c & ADDR_MASK;
    let rest = rest(addr, sc);
    let left = if rest == 0 { addr | TAKEN } else { rest };
    cell.store(left as u64, Ordering::Relaxed);
    Some(Slot {
        ptr: sys::ptr_at(addr),
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
        let mut held = cell.load(Ordering::Relaxed) as usize;
        cell.store(0, Ordering::Relaxed);
        while held != 0 && held & TAKEN == 0 {
            let addr = held & ADDR_MASK;
            held = rest(addr, sc);
            // SAFETY: a held slot is free and on no list; we hold it.
            unsafe { crate::cold_path::push_home(addr, sc) };
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

/// Calls `f` with each slot held in the private block at `block` for size
/// class `sc`. A snapshot's read: the owner may change the chain
/// meanwhile (see [`for_each_in_snapshot`]).
pub fn for_each_held_in(
    block: usize,
    sc: u32,
    valid: impl Fn(usize) -> bool,
    f: impl FnMut(usize),
) {
    if features::config::SECURE || sc >= HELD_SC {
        return;
    }
    // Relaxed: a snapshot reads; addresses are checked before they are
    // followed.
    let held = tables(block).held(sc).load(Ordering::Relaxed) as usize;
    for_each_in_snapshot(held, valid, f);
}

/// Calls `f` with each slot of the chain whose word is `held`, read while
/// its thread may change it: it follows only addresses `valid` accepts
/// (slots of the chain's class that are memory), at most as many as the
/// word says and never more than [`DEPTH`].
pub(crate) fn for_each_in_snapshot(
    mut held: usize,
    valid: impl Fn(usize) -> bool,
    mut f: impl FnMut(usize),
) {
    let len = (held >> DEPTH_SHIFT).min(DEPTH);
    for left in (1..=len).rev() {
        let addr = held & ADDR_MASK;
        if held & TAKEN != 0 || !valid(addr) {
            return;
        }
        f(addr);
        if left > 1 {
            // Relaxed: a snapshot; the next address is checked in turn.
            held = chain_word(addr).load(Ordering::Relaxed) as usize;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chained_slot_has_room_for_the_word_and_its_alignment() {
        for sc in layout::MIN_SC..HELD_SC {
            if chained(sc) {
                assert_eq!(layout::slot_size(sc) % 8, 0, "class {sc}");
                assert_eq!(layout::first_slot(sc) % 8, 0, "class {sc}");
            }
        }
        assert!(!chained(layout::MIN_SC) || layout::slot_size(layout::MIN_SC) >= 8);
    }
}
