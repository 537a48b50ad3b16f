//! How a free slot holds the link of the next one: the link codec, chosen
//! once for the build. Plain: the link as a `u32` in the slot's first four
//! bytes. The secure mode: the link encoded with the slot's tag, and a check
//! word after it (`secure`). The `valgrind` build: the plain link, read and
//! written where memcheck does not look (a free slot is no-access to it).
//! The lists (`free_list`, `private_list`) reach slots only through these
//! cells.

use core::sync::atomic::Ordering;

use crate::free_list::{LinkCell, LinkStore};
use crate::layout;
use crate::metadata::link_cell;

/// The link cells of the free slots of one region: each slot's first four
/// bytes.
pub struct RegionLinks {
    /// Address of the region's first slot.
    pub region: usize,
}

impl LinkStore for RegionLinks {
    /// For a private list or a chain the caller took: no stale reads, so in
    /// the secure mode a link that fails its check stops the program here.
    #[inline(always)]
    unsafe fn load_link(&self, link: u32) -> u32 {
        follow_link(layout::slot_of_link(self.region, link))
    }
}

/// The link cells of the free slots of one region, as pops of its shared
/// list read them: in the secure mode a link that fails its check is
/// returned as [`BAD_LINK`](crate::free_list::BAD_LINK) for the pop to tell
/// a stale read from a corrupt list.
pub struct SharedLinks {
    /// Address of the region's first slot.
    pub region: usize,
}

impl LinkStore for SharedLinks {
    const CHECKED: bool = cfg!(feature = "secure");

    #[inline(always)]
    unsafe fn load_link(&self, link: u32) -> u32 {
        read_link(layout::slot_of_link(self.region, link))
    }

    fn corrupt(&self, link: u32) -> ! {
        corrupt_at(layout::slot_of_link(self.region, link))
    }
}

/// The link held by the free slot at `addr` (the secure mode: decoded, or
/// [`BAD_LINK`](crate::free_list::BAD_LINK) if its check fails).
#[inline(always)]
pub fn read_link(addr: usize) -> u32 {
    let word = load_link_word(addr);
    #[cfg(feature = "secure")]
    {
        // Relaxed: as the link.
        let check = super::secure::check_cell(addr).load(Ordering::Relaxed);
        super::secure::decode(addr, word, check)
    }
    #[cfg(not(feature = "secure"))]
    word
}

/// The link held by the free slot at `addr`, which the caller holds (a list
/// it took or owns): in the secure mode, one that fails its check stops the
/// program.
#[inline(always)]
pub fn follow_link(addr: usize) -> u32 {
    let word = load_link_word(addr);
    #[cfg(feature = "secure")]
    {
        // Relaxed: as the link.
        let check = super::secure::check_cell(addr).load(Ordering::Relaxed);
        match super::secure::open(super::secure::tag(addr), word, check) {
            Some(link) => link,
            None => corrupt_at(addr),
        }
    }
    #[cfg(not(feature = "secure"))]
    word
}

/// The link word of the free slot at `addr` as stored (encoded in the
/// secure mode).
#[inline(always)]
fn load_link_word(addr: usize) -> u32 {
    // Relaxed: ordered by the lists' own synchronization (see free_list and
    // private_list); a stale read on the shared list is caught there.
    #[cfg(not(feature = "valgrind"))]
    return link_cell(addr).load(Ordering::Relaxed);
    // Free slots are no-access to memcheck; a stale read may see a live
    // block's undefined bytes (its compare-and-swap then fails).
    #[cfg(feature = "valgrind")]
    super::valgrind::defined_word(super::valgrind::quiet(|| {
        // Relaxed: as above.
        link_cell(addr).load(Ordering::Relaxed)
    }))
}

/// Stops the program: the free slot at `addr` holds a link that fails its
/// check (the secure mode).
#[cold]
fn corrupt_at(addr: usize) -> ! {
    #[cfg(feature = "secure")]
    super::secure::fail("corrupted free list (a write after free?)", addr);
    #[cfg(not(feature = "secure"))]
    unreachable!("unchecked links are never bad: {addr:#x}")
}

/// The link cell of the slot at `addr` as the lists write it: in the secure
/// mode, the encoded link and its check (by the slot's tag).
pub struct SlotLink {
    addr: usize,
    #[cfg(feature = "secure")]
    tag: u64,
}

impl SlotLink {
    /// The link cell of the free slot at `addr`, which the caller holds.
    #[inline(always)]
    pub fn of(addr: usize) -> SlotLink {
        SlotLink {
            addr,
            #[cfg(feature = "secure")]
            tag: super::secure::tag(addr),
        }
    }

    /// The link cell of the slot at `addr`, of size class `sc`, being freed:
    /// in the secure mode, a double free or a pointer that is not the start
    /// of a slot stops the program here.
    #[inline(always)]
    pub fn freed(addr: usize, sc: u32) -> SlotLink {
        let _ = sc;
        SlotLink {
            addr,
            #[cfg(feature = "secure")]
            tag: super::secure::check_free(addr, sc),
        }
    }
}

impl LinkCell for SlotLink {
    #[inline(always)]
    unsafe fn store_link(&self, link: u32) {
        #[cfg(feature = "secure")]
        {
            let (word, check) = super::secure::seal(self.tag, link);
            // Relaxed: published as the link is (below).
            super::secure::check_cell(self.addr).store(check, Ordering::Relaxed);
            // SAFETY: the caller owns the slot.
            unsafe { link_cell(self.addr).store_link(word) };
        }
        #[cfg(all(not(feature = "secure"), not(feature = "valgrind")))]
        // SAFETY: the caller owns the slot.
        unsafe {
            link_cell(self.addr).store_link(link)
        };
        // A free slot is no-access to memcheck.
        #[cfg(feature = "valgrind")]
        super::valgrind::quiet(|| {
            // SAFETY: the caller owns the slot.
            unsafe { link_cell(self.addr).store_link(link) }
        });
    }
}

/// The slot at `addr` is handed out: in the secure mode its check word is
/// cleared, so that the program's data can never pass for a free slot's
/// words.
#[inline(always)]
pub fn handed_out(addr: usize) {
    #[cfg(feature = "secure")]
    super::secure::handed_out(addr);
    let _ = addr;
}

/// The second four bytes of the free slot at `addr` (of 8 bytes or more),
/// which the caller holds: where a sweep leaves its idle stamp on a shared
/// list's slots (`idle`) and an owner the depth of a capped private list's
/// slots (`capped`); not in the secure mode, whose check word lies there.
#[inline]
pub fn second_word(addr: usize) -> u32 {
    // Relaxed: the caller holds the slot.
    #[cfg(not(feature = "valgrind"))]
    return link_cell(addr + 4).load(Ordering::Relaxed);
    // A free slot is no-access to memcheck; the word may be undefined.
    #[cfg(feature = "valgrind")]
    super::valgrind::defined_word(super::valgrind::quiet(|| {
        // Relaxed: as above.
        link_cell(addr + 4).load(Ordering::Relaxed)
    }))
}

/// Writes the second word of the free slot at `addr` (see [`second_word`]).
#[inline]
pub fn set_second_word(addr: usize, word: u32) {
    // Relaxed: the caller holds the slot; the push that puts it on a list
    // publishes it.
    #[cfg(not(feature = "valgrind"))]
    link_cell(addr + 4).store(word, Ordering::Relaxed);
    #[cfg(feature = "valgrind")]
    super::valgrind::quiet(|| link_cell(addr + 4).store(word, Ordering::Relaxed));
}
