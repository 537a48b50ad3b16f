//! Without the secure mode, a use-after-free write that corrupts a free
//! slot's link still cannot make the allocator hand out memory outside the
//! slot's region: a link is a slot's 32-bit offset from the start of its
//! (slab, size class) region, plus 4, and a region is 2^32 bytes, so every
//! value a link can hold names an address inside the region (at no cost:
//! there is nothing to mask; the values 1 to 3, which no slot has, name up
//! to 3 bytes before it). What such a write can still do is name a
//! place inside the region that is not a free slot; the secure mode
//! (tests/secure.rs) catches that.
#![cfg(not(any(feature = "secure", miri, smalloc_tsan)))]

use std::alloc::{GlobalAlloc, Layout};

use smalloc::Smalloc;
use smalloc::layout::{REGION_BITS, sc_of, slab_of};

#[global_allocator]
static A: Smalloc = Smalloc::new();

#[test]
fn a_corrupted_link_stays_in_its_region() {
    let l = Layout::from_size_align(64, 8).unwrap();
    // Links of 64-byte slots, up to the last slot's, near the largest a
    // link can hold: far past every slot ever handed out. (A link naming
    // a place inside a slot would be stopped by the hot path's debug
    // assertions in a debug build.)
    let sc = smalloc::layout::size_class(64, 8);
    let n = smalloc::layout::num_slots(sc);
    let links = [n - 1, n / 2, 0x12_3456, 1].map(|k| smalloc::layout::link_of_slot(sc, k));
    assert!(links[0] > 0xffff_0000);
    for bad in links {
        // SAFETY: a non-zero layout.
        let p = unsafe { A.alloc(l) };
        // SAFETY: `p` is ours; it is freed once, then its link overwritten
        // (the use-after-free write under test: the slot stays mapped).
        unsafe {
            A.dealloc(p, l);
            (p as *mut u32).write_volatile(bad);
        }
        // The first allocation takes `p` back; the second follows the
        // corrupted link.
        // SAFETY: a non-zero layout.
        let (q, r) = unsafe { (A.alloc(l), A.alloc(l)) };
        assert_eq!(q, p);
        let region = |x: usize| x >> REGION_BITS;
        assert_eq!(region(r.addr()), region(p.addr()), "link {bad:#x}: {r:?}");
        assert_eq!(
            (sc_of(r.addr()), slab_of(r.addr())),
            (sc_of(p.addr()), slab_of(p.addr()))
        );
        // Leave the corrupted list: start over on a fresh block next round
        // (the blocks are never freed again).
    }
}
