//! realloc: in place while the slot fits, growers when it does not.

use std::alloc::{GlobalAlloc, Layout};

use devutils::{check, fill};
use smalloc::Smalloc;
use smalloc::layout::sc_of;

static A: Smalloc = Smalloc::new();

fn l(size: usize) -> Layout {
    Layout::from_size_align(size, 1).unwrap()
}

#[test]
fn growth_jumps_to_the_grower_size_classes() {
    let p = unsafe { A.alloc(l(10)) };
    assert_eq!(sc_of(p.addr()), 4);
    unsafe { fill(p, 10, 10) };
    // (new size, size class it must land in)
    let steps: &[(usize, u32)] = &[
        (16, 4),       // still fits: in place
        (40, 6),       // needs 64 B: grower 64 B
        (100, 7),      // grower 128 B
        (200, 12),     // needs 256 B: grower 4 KiB
        (3000, 12),    // fits: in place
        (5000, 14),    // grower 16 KiB
        (20_000, 16),  // grower 64 KiB
        (100_000, 18), // grower 256 KiB
        (300_000, 21), // grower 2 MiB
        (2_000_000, 21),
        (3 << 20, 22), // past the growers: exact size class
        (9 << 20, 24),
    ];
    let mut p = p;
    let mut size = 10;
    for &(new, sc) in steps {
        let q = unsafe { A.realloc(p, l(size), new) };
        assert!(!q.is_null());
        assert_eq!(sc_of(q.addr()), sc, "realloc {size} -> {new}");
        if sc_of(p.addr()) == sc {
            assert_eq!(q, p, "{size} -> {new} fits the slot and must stay");
        }
        assert_eq!(
            unsafe { check(q, size, size as u64) },
            Ok(()),
            "{size} -> {new}"
        );
        unsafe { fill(q, new, new as u64) };
        p = q;
        size = new;
    }
    unsafe { A.dealloc(p, l(size)) };
}

#[test]
fn growth_keeps_contents() {
    let mut p = unsafe { A.alloc(l(1)) };
    let mut size = 1;
    unsafe { fill(p, 1, 1) };
    while size < 5 << 20 {
        let new = size * 3 / 2 + 1;
        let q = unsafe { A.realloc(p, l(size), new) };
        assert!(!q.is_null());
        assert_eq!(
            unsafe { check(q, size, size as u64) },
            Ok(()),
            "{size} -> {new}"
        );
        unsafe { fill(q, new, new as u64) };
        p = q;
        size = new;
    }
    unsafe { A.dealloc(p, l(size)) };
}

#[test]
fn shrink_stays_in_place() {
    let p = unsafe { A.alloc(l(1 << 20)) };
    unsafe { fill(p, 1000, 9) };
    let mut size = 1 << 20;
    for new in [500_000, 4096, 1000, 17, 1] {
        let q = unsafe { A.realloc(p, l(size), new) };
        assert_eq!(q, p);
        assert_eq!(unsafe { check(q, new.min(1000), 9) }, Ok(()));
        size = new;
    }
    // And growing back within the slot stays too.
    let q = unsafe { A.realloc(p, l(size), 1 << 20) };
    assert_eq!(q, p);
    unsafe { A.dealloc(q, l(1 << 20)) };
}
