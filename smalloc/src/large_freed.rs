//! The large hints: which slabs' lists may hold freed large slots, per
//! large size class, so that a search for freed slots skips the slabs that
//! hold none (each one looked at is a cache miss or two; after many threads
//! ended, a large request that found its class empty read them all).
//!
//! A bit per (size class, slab), set by a push that finds the slab's shared
//! list of the class empty, and by an owner that gives the slab up with its
//! private list of the class not empty (the lists a search borrows from).
//! A search that finds both lists empty clears the bit, then looks again.
//! Each mark is a Release read-modify-write of the word and the clear an
//! Acquire one, so the two are ordered: a mark after the clear leaves the
//! bit set, one before it is seen by the second look. So a list that holds
//! a slot never stays without its bit, and a set bit without a slot costs
//! one look. Only cold paths touch this module; its protocol is model
//! checked in `smalloc/tests/loom_free_list.rs` (generic over the word).

use core::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use crate::free_list::FlhCell;
use crate::layout::{self, LARGE_SC, MAX_SC, NUM_SCS};
use crate::metadata::{self, shared, tables};
use crate::ownership::{self, SetCell};

/// Sets the hint `bit` in `word`: after the push or the release it stands
/// for.
#[inline]
pub fn mark_in<W: SetCell + ?Sized>(word: &W, bit: usize) {
    // Release: a search whose clear reads this sees the list as it is now.
    word.fetch_or(bit, Ordering::Release);
}

/// A search found no freed slot where hint `bit` of `word` points: clears
/// the bit, then looks again at the shared list `flh` and, through
/// `private_holds`, at what else it may borrow there; sets the bit again if
/// either holds a slot.
///
/// Built with `--cfg smalloc_blind_hint_clear` (tests only) it clears
/// without the second look, so the model checker can show that the second
/// look is what keeps a list's bit.
pub fn found_none_in<W, F>(word: &W, bit: usize, flh: &F, private_holds: impl FnOnce() -> bool)
where
    W: SetCell + ?Sized,
    F: FlhCell + ?Sized,
{
    // Acquire: every setting before this clear happens-before the second
    // look, with the push or release it followed.
    if word.fetch_and(!bit, Ordering::Acquire) & bit == 0 || cfg!(smalloc_blind_hint_clear) {
        return;
    }
    // Relaxed: ordered after the clear's Acquire, which is all it needs.
    if flh.load(Ordering::Relaxed) as u32 != 0 || private_holds() {
        // Relaxed: a hint the list itself justifies; takers synchronize on
        // the list.
        word.fetch_or(bit, Ordering::Relaxed);
    }
}

/// By size class: bit `s` set when slab `s`'s lists of the class may hold
/// a freed slot.
static MAY_HOLD: [AtomicUsize; NUM_SCS] = [const { AtomicUsize::new(0) }; NUM_SCS];

/// The word of size class `sc`.
fn word(sc: u32) -> &'static AtomicUsize {
    // The mask keeps the index in range (it already is): no check.
    &MAY_HOLD[sc as usize % NUM_SCS]
}

/// A push of size class `sc` onto a shared list of slab `slab` just found
/// it empty if `onto_empty` ([`Pushed`](crate::free_list::Pushed); small
/// classes are not tracked).
#[inline]
pub fn pushed(slab: usize, sc: u32, onto_empty: bool) {
    if sc >= LARGE_SC && onto_empty {
        mark_in(word(sc), 1 << slab);
    }
}

/// The caller, which owned the slab at `slab_addr` until its release just
/// now, may have left slots on its private list of large size class `sc`
/// (read before the release: `head`).
#[inline]
pub fn released_with(slab_addr: usize, sc: u32, head: u32) {
    if head != 0 {
        mark_in(word(sc), 1 << layout::slab_of(slab_addr));
    }
}

/// The heads of the private lists of large slots of the slab at
/// `slab_addr`, which the caller owns: read before it gives the slab up.
pub fn private_heads(slab_addr: usize) -> [u32; (MAX_SC + 1 - LARGE_SC) as usize] {
    let t = tables(metadata::private_block(slab_addr));
    // Relaxed: the caller's lists.
    core::array::from_fn(|i| t.large_head(LARGE_SC + i as u32).load(Ordering::Relaxed))
}

/// The owner of the slab at `slab_addr` gave it up (after
/// `ownership::release`), its private lists' heads as `heads` read before:
/// their slots become borrowable.
pub fn left(slab_addr: usize, heads: &[u32; (MAX_SC + 1 - LARGE_SC) as usize]) {
    for (i, &head) in heads.iter().enumerate() {
        released_with(slab_addr, LARGE_SC + i as u32, head);
    }
}

/// The slabs whose lists of large size class `sc` may hold freed slots.
#[inline]
pub fn candidates(sc: u32) -> usize {
    // Relaxed: a hint; a taker synchronizes on the list.
    word(sc).load(Ordering::Relaxed)
}

/// A search found no freed slot of large size class `sc` on slab `s`:
/// neither on its shared list nor, if nobody owned it, on its private list.
pub fn found_none(base: usize, s: usize, sc: u32) {
    let addr = layout::slab_addr(base, s);
    let head: &AtomicU32 = tables(metadata::private_block(addr)).large_head(sc);
    found_none_in(word(sc), 1 << s, &shared(addr, sc).flh, || {
        // Relaxed: both ordered after the clear's Acquire; an owner that
        // gave the slab up set the bit after its release.
        ownership::unowned() & (1 << s) != 0 && head.load(Ordering::Relaxed) != 0
    });
}

/// In a `fork` child: every slab may hold anything (the parent's other
/// threads' slabs are nobody's now).
pub fn reset_after_fork() {
    for c in &MAY_HOLD {
        // Relaxed: the child has a single thread.
        c.store(usize::MAX, Ordering::Relaxed);
    }
}
