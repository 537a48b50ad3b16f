//! Many threads racing the very first allocation get one reservation.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::{Arc, Barrier};
use std::thread;

use smalloc::Smalloc;
use smalloc::layout::{TOTAL_SIZE, base_of};

static A: Smalloc = Smalloc::new();

/// The process's address space in bytes (Miri has no /proc: there the
/// addresses alone must show one reservation).
#[cfg(not(miri))]
fn vm() -> usize {
    devutils::process::vm_bytes() as usize
}

#[test]
fn racing_first_allocations_share_one_reservation() {
    #[cfg(not(miri))]
    let before = vm();
    let n = 32;
    let barrier = Arc::new(Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let barrier = barrier.clone();
            thread::spawn(move || {
                let l = Layout::from_size_align(8 + i, 8).unwrap();
                barrier.wait();
                // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
                let p = unsafe { A.alloc(l) };
                assert!(!p.is_null());
                // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
                unsafe { p.write_bytes(i as u8, l.size()) };
                p.addr()
            })
        })
        .collect();
    let addrs: Vec<usize> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let base = base_of(addrs[0]);
    assert_eq!(base % TOTAL_SIZE, 0);
    assert!(
        addrs.iter().all(|&a| base_of(a) == base),
        "two reservations"
    );
    // One reservation of the layout, not one per racing thread (unless the
    // regions are mapped on demand, SMALLOC_RESERVE=0: then one window).
    #[cfg(not(miri))]
    if smalloc::stats::snapshot().geometry == smalloc::stats::Geometry::Reserved {
        let grown = vm() - before;
        assert!(
            (TOTAL_SIZE..2 * TOTAL_SIZE).contains(&grown),
            "{grown} bytes"
        );
    }
    let mut sorted = addrs.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), n);
}
