//! *Spans*: runs of whole pages of a small size class's region that start
//! and end on slot boundaries, given back to the kernel by a sweep when
//! every slot in them is free, and handed out again as never-used slots.
//!
//! A free slot's first page holds its link, and slots smaller than a page
//! share pages with their neighbours, so a sweep could give back only the
//! pages past the first of free slots of two pages or more, and the rest
//! when a whole region was free (a reset). A sweep that took a
//! shared list whole now marks its slots in a scratch bitmap, gives back
//! every span whose slots are all on it, takes those slots off the chain
//! (rebuilt in address order, so the lowest slots are reused first) and
//! sets the span's bit in the (slab, size class)'s *span map*. An owner
//! about to claim a step of its never-used tail takes a span instead: its
//! slots read zero, as never-used ones do. A span is `lcm(slot, page)`
//! bytes (with 4 KiB pages: 1, 3, 5 or 7 pages for the slots below two
//! pages, one slot for those of whole pages, two for 10 and 14 KiB), in
//! every small size class (below 64 KiB).
//!
//! A span's bit is set only by the sweep that holds its slots (under the
//! sweep lock) and cleared by the one thread whose `fetch_and` finds it
//! set, so each span's slots have one holder at a time; the loom model
//! checks this with the list (`tests/loom_free_list.rs`).

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::features::config;
use crate::features::links::{SlotLink, follow_link};
use crate::free_list::LinkCell;
use crate::layout::{self, NUM_SCS, NUM_SLABS};
use crate::metadata::shared;
use crate::{sys, zeroed};

/// Where the spans of a size class lie in its region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// The first slot of span 0: the first whose start is on a page.
    pub first: u32,
    /// Slots in each span.
    pub slots: u32,
}

/// The spans of size class `sc`: `None` for large slots (64 KiB and more,
/// which a sweep gives back but their first page, and whose allocations
/// never claim a step), for the classes that hold no slots, and in the
/// secure mode (a double free of a slot of a span, whose check word reads
/// zero, could not be told).
pub fn geometry(sc: u32) -> Option<Geometry> {
    let (size, page) = (layout::slot_size(sc), sys::page_size());
    if config::SECURE || size == 0 || sc >= layout::LARGE_SC {
        return None;
    }
    // The first slot whose start is on a page: one exists, since the first
    // slot's offset is a multiple of the slot's alignment (layout).
    let f = layout::first_slot(sc);
    let mut m = 0;
    while rem(f + m * size, page) != 0 {
        m += 1;
        if m > page {
            return None;
        }
    }
    let span = div(size, gcd(size, page)) * page;
    Some(Geometry {
        first: m as u32,
        slots: div(span, size) as u32,
    })
}

// (Divisions that cannot panic: nothing on an allocation path may.)
const fn div(a: usize, b: usize) -> usize {
    match a.checked_div(b) {
        Some(q) => q,
        None => 0,
    }
}

const fn rem(a: usize, b: usize) -> usize {
    match a.checked_rem(b) {
        Some(r) => r,
        None => 0,
    }
}

const fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, rem(a, b));
    }
    a
}

/// The span map of each (slab, size class): the address of its words (0
/// until a sweep first gives a span of it back), a bit per span.
static MAPS: [[AtomicUsize; NUM_SCS]; NUM_SLABS] =
    [const { [const { AtomicUsize::new(0) }; NUM_SCS] }; NUM_SLABS];

/// Words of the span map of size class `sc` with geometry `g`: a bit for
/// every span of the region.
fn map_words(sc: u32, g: Geometry) -> usize {
    let spans = div(
        layout::num_slots(sc).saturating_sub(g.first) as usize,
        g.slots as usize,
    );
    spans / 64 + 1
}

/// The span map of (slab, size class), made by the first sweep that needs
/// it (under the sweep lock).
fn map(slab: usize, sc: u32, g: Geometry, make: bool) -> Option<&'static [AtomicU64]> {
    let cell = &MAPS[slab % NUM_SLABS][sc as usize % NUM_SCS];
    let words = map_words(sc, g);
    // Acquire: the mapping was made before its address was published.
    let mut addr = cell.load(Ordering::Acquire);
    if addr == 0 {
        if !make {
            return None;
        }
        addr = sys::map(0, words * 8, false)? as usize;
        // Release: publishes the mapping (only sweeps, one at a time, make
        // maps).
        cell.store(addr, Ordering::Release);
    }
    // SAFETY: a zeroed mapping of `words` u64 that is never unmapped, used
    // only atomically.
    Some(unsafe { core::slice::from_raw_parts(sys::ptr_at::<AtomicU64>(addr), words) })
}

/// The count of given-back spans of (slab, size class), on its shared line.
fn count(slab_addr: usize, sc: u32) -> &'static AtomicU32 {
    &shared(slab_addr, sc).spans
}

/// Free slots of (slab, size class) in given-back spans, for the
/// statistics (a span being taken may still be counted).
pub fn slots_given_back(slab_addr: usize, sc: u32) -> u32 {
    match geometry(sc) {
        // Relaxed: statistics.
        Some(g) => count(slab_addr, sc)
            .load(Ordering::Relaxed)
            .saturating_mul(g.slots),
        None => 0,
    }
}

/// A word of a span map (the loom model gives its own).
pub trait SpanWord {
    /// Atomic load.
    fn load(&self, order: Ordering) -> u64;
    /// Atomic store.
    fn store(&self, v: u64, order: Ordering);
    /// Atomic `fetch_or`.
    fn fetch_or(&self, bits: u64, order: Ordering) -> u64;
    /// Atomic `fetch_and`.
    fn fetch_and(&self, bits: u64, order: Ordering) -> u64;
}

impl SpanWord for AtomicU64 {
    #[inline(always)]
    fn load(&self, order: Ordering) -> u64 {
        AtomicU64::load(self, order)
    }
    #[inline(always)]
    fn store(&self, v: u64, order: Ordering) {
        AtomicU64::store(self, v, order)
    }
    #[inline(always)]
    fn fetch_or(&self, bits: u64, order: Ordering) -> u64 {
        AtomicU64::fetch_or(self, bits, order)
    }
    #[inline(always)]
    fn fetch_and(&self, bits: u64, order: Ordering) -> u64 {
        AtomicU64::fetch_and(self, bits, order)
    }
}

/// A sweep that holds the slots of span `i` of `words` (taken off every
/// list, their pages given back) makes them takeable.
#[inline]
pub fn put<W: SpanWord>(words: &[W], i: usize) {
    if let Some(w) = words.get(i / 64) {
        // Release: the pages were given back and the slots taken off the
        // lists before a taker holds them.
        w.fetch_or(1 << (i % 64), Ordering::Release);
    }
}

/// Takes a run of up to `max` (at least 1) adjacent spans of `words`, the
/// lowest first: the first one's index and how many; the caller then holds
/// their slots.
///
/// Built with `--cfg smalloc_blind_span_take` (tests only) a take reads the
/// word and stores it without the bits, so the model checker can show that
/// one read-modify-write is what keeps a span from two takers.
pub fn take_run<W: SpanWord>(words: &[W], max: usize) -> Option<(usize, usize)> {
    for (i, w) in words.iter().enumerate() {
        // Relaxed: a first look; the read-modify-write decides.
        let mut v = w.load(Ordering::Relaxed);
        while v != 0 {
            let low = v.trailing_zeros();
            // The run of set bits from `low`, at most `max` (within the word).
            let len = ((v >> low).trailing_ones() as usize).min(max).min(64) as u32;
            let want = (u64::MAX >> (64 - len)) << low;
            // Acquire: pairs with `put`'s Release.
            let old = if cfg!(smalloc_blind_span_take) {
                let old = w.load(Ordering::Acquire);
                w.store(old & !want, Ordering::Relaxed);
                old
            } else {
                w.fetch_and(!want, Ordering::Acquire)
            };
            let got = old & want;
            // What we got from `low` on without a gap is ours; the rest back.
            let run = (got >> low).trailing_ones();
            let ours = if run == 0 {
                0
            } else {
                (u64::MAX >> (64 - run)) << low
            };
            if got & !ours != 0 {
                w.fetch_or(got & !ours, Ordering::Release);
            }
            if run != 0 {
                return Some((i * 64 + low as usize, run as usize));
            }
            v = old & !want;
        }
    }
    None
}

/// An owner about to claim never-used slots of (slab, size class) takes a
/// given-back span instead, if there is one: the first slot number and the
/// end of its slots, all zero and all the caller's.
pub fn claim(slab_addr: usize, sc: u32) -> Option<(u32, u32)> {
    // Relaxed: a hint (the count rises before the bits are set, and falls
    // after one is taken); the bits decide.
    if count(slab_addr, sc).load(Ordering::Relaxed) == 0 {
        return None;
    }
    let g = geometry(sc)?;
    let words = map(layout::slab_of(slab_addr), sc, g, false)?;
    // Spans lie below the tail: only the words up to it are looked at.
    // Relaxed: slot numbers only.
    let tail = shared(slab_addr, sc).tail.load(Ordering::Relaxed);
    let below = div(tail.saturating_sub(g.first) as usize, g.slots as usize) / 64 + 1;
    // Up to a new-memory step's worth at once, as a claim from the tail.
    let max = div(
        layout::NEW_MEMORY_STEP,
        g.slots as usize * layout::slot_size(sc),
    )
    .max(1);
    let (i, n) = take_run(words.get(..below).unwrap_or(words), max)?;
    // Relaxed: see above.
    count(slab_addr, sc).fetch_sub(n as u32, Ordering::Relaxed);
    let first = g.first + i as u32 * g.slots;
    Some((first, first + n as u32 * g.slots))
}

/// Spans given back by sweeps, ever.
static GIVEN_BACK: AtomicU64 = AtomicU64::new(0);

/// Spans given back by sweeps, ever (the statistics).
pub fn given_back() -> u64 {
    // Relaxed: statistics.
    GIVEN_BACK.load(Ordering::Relaxed)
}

/// What is left of a chain after [`give_back`].
pub struct Left {
    /// The chain's first link, 0 if nothing is left.
    pub first: u32,
    /// Its last slot's address.
    pub last: usize,
    /// Its length.
    pub n: u32,
    /// Resident bytes given back.
    pub released: usize,
}

/// A sweep holds the chain starting at `first` (`n` slots, every one below
/// `tail`) of (slab, size class), taken whole from its shared list: gives
/// back the spans all of whose slots are on it and returns the rest of the
/// chain, in address order; `None` (the chain untouched) when no span is
/// whole or the scratch bitmap cannot be mapped. The caller holds the sweep
/// lock.
pub fn give_back(slab_addr: usize, sc: u32, first: u32, n: u32, tail: u32) -> Option<Left> {
    let g = geometry(sc)?;
    if n < 2 * g.slots {
        return None;
    }
    let region = layout::region_addr(slab_addr, sc);
    let words = tail as usize / 64 + 1;
    let scratch = Scratch::new(words)?;
    let bits = scratch.words();
    let mut link = first;
    for _ in 0..n {
        let slot = layout::slot_of_link(region, link);
        let k = layout::slot_index(slot - region, sc) as usize;
        if let Some(w) = bits.get_mut(k / 64) {
            *w |= 1 << (k % 64);
        }
        // The take's Acquire ordered the pushes before us.
        link = follow_link(slot);
    }
    let (released, given) = give_back_marked(slab_addr, sc, g, bits, tail)?;
    if given == 0 {
        return None;
    }
    let (first, last, left) = relink_marked(region, sc, bits, |_| {});
    Some(Left {
        first,
        last,
        n: left,
        released,
    })
}

/// Gives back every span of (slab, size class) (geometry `g`, below `tail`)
/// all of whose slots are marked in `bits` (slot numbers; the caller holds
/// those slots and keeps holding the rest), unmarking their slots: the
/// resident bytes given back and the spans, `None` if the span map cannot
/// be made. The caller holds the sweep lock.
pub(crate) fn give_back_marked(
    slab_addr: usize,
    sc: u32,
    g: Geometry,
    bits: &mut [u64],
    tail: u32,
) -> Option<(usize, u32)> {
    let region = layout::region_addr(slab_addr, sc);
    let spans = div(tail.saturating_sub(g.first) as usize, g.slots as usize) as u32;
    let whole =
        |bits: &[u64], i: u32| all_set(bits, (g.first + i * g.slots) as usize, g.slots as usize);
    let given = (0..spans).filter(|&i| whole(bits, i)).count() as u32;
    if given == 0 {
        return Some((0, 0));
    }
    let map = map(layout::slab_of(slab_addr), sc, g, true)?;
    // The count first: it never says fewer spans than the bits (`claim`).
    // Relaxed: a hint, and statistics.
    count(slab_addr, sc).fetch_add(given, Ordering::Relaxed);
    GIVEN_BACK.fetch_add(u64::from(given), Ordering::Relaxed);
    let size = layout::slot_size(sc);
    let mut released = 0;
    let mut i = 0;
    while i < spans {
        if !whole(bits, i) {
            i += 1;
            continue;
        }
        // A run of whole spans: one system call.
        let run = i;
        while i < spans && whole(bits, i) {
            i += 1;
        }
        let (from, to) = (g.first + run * g.slots, g.first + i * g.slots);
        let start = region + layout::slots_end(sc, from);
        let len = (to - from) as usize * size;
        let resident = sys::resident(start, len);
        // SAFETY: `[start, start + len)` is page-aligned (spans start and end
        // on pages) and holds only free slots this sweep holds.
        if unsafe { zeroed::release_to_zero(sys::ptr_at(start), len) } {
            released += resident;
        }
        for k in from..to {
            if let Some(w) = bits.get_mut(k as usize / 64) {
                *w &= !(1 << (k % 64));
            }
        }
        for s in run..i {
            put(map, s as usize);
        }
    }
    Some((released, given))
}

/// Links the slots marked in `bits` (of size class `sc`, in `region`, which
/// the caller holds) into a chain in address order: its first link (0 if
/// none), its last slot's address and its length; `each` sees every slot.
pub(crate) fn relink_marked(
    region: usize,
    sc: u32,
    bits: &[u64],
    mut each: impl FnMut(usize),
) -> (u32, usize, u32) {
    // The rest, linked in address order from the highest slot down.
    let (mut next, mut last, mut left) = (0, 0, 0);
    for (w, &v) in bits.iter().enumerate().rev() {
        let mut v = v;
        while v != 0 {
            let b = 63 - v.leading_zeros() as usize;
            v &= !(1 << b);
            let slot = region + layout::slots_end(sc, (w * 64 + b) as u32);
            if last == 0 {
                last = slot;
            }
            // SAFETY: the slot is free and this sweep holds it.
            unsafe { SlotLink::of(slot).store_link(next) };
            each(slot);
            next = layout::link_of(slot);
            left += 1;
        }
    }
    (next, last, left)
}

/// Whether bits `[from, from + len)` of `bits` are all set.
fn all_set(bits: &[u64], from: usize, len: usize) -> bool {
    let mut k = from;
    let end = from + len;
    while k < end {
        let (w, b) = (k / 64, k % 64);
        let take = (64 - b).min(end - k);
        let mask = if take == 64 {
            u64::MAX
        } else {
            ((1 << take) - 1) << b
        };
        if bits.get(w).is_none_or(|&v| v & mask != mask) {
            return false;
        }
        k += take;
    }
    true
}

/// A sweep's bitmap of the free slots of one list: a fresh mapping,
/// unmapped when dropped (a sweep never allocates).
pub(crate) struct Scratch {
    addr: *mut u8,
    words: usize,
}

impl Scratch {
    /// A zeroed bitmap of `words` words.
    pub(crate) fn new(words: usize) -> Option<Scratch> {
        Some(Scratch {
            addr: sys::map(0, words * 8, false)?,
            words,
        })
    }

    /// Its words.
    #[allow(clippy::mut_from_ref)]
    pub(crate) fn words(&self) -> &mut [u64] {
        // SAFETY: a zeroed private mapping of `words` u64, ours alone, used
        // through this one slice.
        unsafe { core::slice::from_raw_parts_mut(self.addr.cast(), self.words) }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        sys::unmap(self.addr, self.words * 8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_start_and_end_on_pages_and_slots() {
        let page = sys::page_size();
        for sc in layout::MIN_SC..layout::LARGE_SC {
            let g = geometry(sc);
            if cfg!(feature = "secure") {
                assert_eq!(g, None);
                continue;
            }
            let g = g.unwrap_or_else(|| panic!("class {sc} has no spans"));
            let start = layout::first_slot(sc) + g.first as usize * layout::slot_size(sc);
            let span = g.slots as usize * layout::slot_size(sc);
            assert_eq!(start % page, 0, "class {sc}");
            assert_eq!(span % page, 0, "class {sc}");
            let size = layout::slot_size(sc);
            assert!(span <= (7 * page).max(size * 5 / 2), "class {sc}: {span}");
        }
    }

    #[test]
    fn all_set_across_words() {
        let bits = [u64::MAX, 0b111, 0];
        assert!(all_set(&bits, 0, 64));
        assert!(all_set(&bits, 60, 7));
        assert!(!all_set(&bits, 60, 8));
        assert!(!all_set(&bits, 190, 4));
        assert!(!all_set(&bits, 200, 1));
    }

    #[test]
    fn take_run_takes_each_bit_once_and_runs_up_to_max() {
        let words = [AtomicU64::new(0), AtomicU64::new(0b1_1101_1010)];
        assert_eq!(take_run(&words, 4), Some((65, 1)));
        assert_eq!(take_run(&words, 2), Some((67, 2)));
        assert_eq!(take_run(&words, 1), Some((70, 1)));
        assert_eq!(take_run(&words, 4), Some((71, 2)));
        assert_eq!(take_run(&words, 1), None);
        let full = [AtomicU64::new(u64::MAX)];
        assert_eq!(take_run(&full, 100), Some((0, 64)));
        assert_eq!(full[0].load(Ordering::Relaxed), 0);
    }
}
