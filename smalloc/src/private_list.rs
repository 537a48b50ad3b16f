//! The private list of one (slab, size class): the free list that only the
//! slab's owner touches, with plain loads and stores.
//!
//! A thread that owns its slab ([`ownership`](crate::ownership)) frees the
//! small slots of that slab onto their private list and allocates from it:
//! no atomic read-modify-write on either path. The list is a chain of links
//! ([`layout::link_of`](crate::layout::link_of)) in the same format as the
//! shared list, so the owner can take the shared list whole and make it its
//! private list without touching the slots.
//!
//! The heads live in the reservation, in the slab's private block, not in
//! thread-local storage: when the owner ends, the next owner of the slab
//! inherits them as they are. Ownership passes with a Release / Acquire pair
//! on the owned set, which orders the old owner's writes to the heads and
//! links before the new owner's reads.
//!
//! The cells are atomics accessed with Relaxed loads and stores (plain
//! `mov`s on x86-64), so that a thread looking for freed slots may peek at
//! the head of a slab nobody owns without a data race.

use core::sync::atomic::{AtomicU32, Ordering};

use crate::free_list::{LinkCell, LinkStore};

/// A private list head: a 32-bit cell only its slab's owner writes.
pub trait HeadCell {
    /// Reads the head link (0: the list is empty).
    fn get(&self) -> u32;
    /// Sets the head link.
    fn set(&self, link: u32);
}

impl HeadCell for AtomicU32 {
    #[inline(always)]
    fn get(&self) -> u32 {
        // Relaxed: only the owner writes it; ownership changes hands with
        // a Release / Acquire pair on the owned set.
        self.load(Ordering::Relaxed)
    }
    #[inline(always)]
    fn set(&self, link: u32) {
        // Relaxed: as in `get`.
        self.store(link, Ordering::Relaxed)
    }
}

/// Takes the first slot of the private list, if any, and returns its link.
///
/// # Safety
/// The caller owns the list's slab, and `links` reads the links of the
/// list's region.
#[inline(always)]
pub unsafe fn pop<H: HeadCell + ?Sized, L: LinkStore + ?Sized>(head: &H, links: &L) -> Option<u32> {
    let first = head.get();
    if first == 0 {
        return None;
    }
    // SAFETY: the slot is on our private list, so it is free and its link
    // was written by a push that happens-before this (ours, or a shared
    // push whose list we took with an Acquire, or the previous owner's).
    let next = unsafe { links.load_link(first) };
    head.set(next);
    Some(first)
}

/// Puts the slot named by `link`, whose link cell is `cell`, at the head of
/// the private list.
///
/// # Safety
/// The caller owns the list's slab and the slot, which belongs to the
/// list's region; `cell` is that slot's link cell.
#[inline(always)]
pub unsafe fn push<H: HeadCell + ?Sized, C: LinkCell + ?Sized>(head: &H, cell: &C, link: u32) {
    debug_assert!(link != 0);
    // SAFETY: the caller owns the slot.
    unsafe { cell.store_link(head.get()) };
    // The link is in the slot before the head names the slot, also for a
    // `fork` child that sees this thread's memory as it is at any
    // instruction (the compiler may not swap the two stores).
    core::sync::atomic::compiler_fence(Ordering::Release);
    head.set(link);
}

#[cfg(test)]
mod tests {
    use core::sync::atomic::{AtomicU32, Ordering};
    use std::vec::Vec;

    use crate::free_list::array_links::ArrayLinks;
    use crate::private_list;

    #[test]
    fn private_push_then_pop_is_lifo() {
        let head = AtomicU32::new(0);
        let links = ArrayLinks::new(4);
        for l in [2, 4, 1] {
            // SAFETY: the test owns the list and the slots.
            unsafe { private_list::push(&head, links.cell(l), l) };
        }
        // SAFETY: the test owns the list.
        let order: Vec<u32> =
            std::iter::from_fn(|| unsafe { private_list::pop(&head, &links) }).collect();
        assert_eq!(order, [1, 4, 2]);
        assert_eq!(head.load(Ordering::Relaxed), 0);
    }
}
