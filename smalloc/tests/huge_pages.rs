//! Transparent huge pages stay out of the layout: every mapping of it is
//! `MADV_NOHUGEPAGE` (`nh` in `/proc/self/smaps`), in the reservation and
//! on demand, so that on a system whose setting is `always` a slot in use
//! costs its own pages, not the 2 MiB around them. Each test makes the
//! first allocation of its process (the allocator here is not the global
//! one).

use std::alloc::{GlobalAlloc, Layout};

use devutils::process::vmas;
use devutils::{check, fill};
use smalloc::Smalloc;
use smalloc::layout::TOTAL_SIZE;
use smalloc::stats::{self, Geometry, Why};

static A: Smalloc = Smalloc::new();

/// Whether this kernel has transparent huge pages at all; without them
/// there is no advice to give and no flag to read.
fn kernel_has_huge_pages() -> bool {
    std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists()
}

/// Allocates and fills a block of each of a range of sizes (16 B to
/// 4 MiB, several of the small ones), checks every VMA of the layout, then
/// checks and frees the blocks.
fn every_mapping_of_the_layout_has_no_huge_pages() {
    let sizes = [
        16,
        48,
        100,
        1000,
        4104,
        20 << 10,
        100 << 10,
        1 << 20,
        4 << 20,
    ];
    let blocks: Vec<(*mut u8, Layout)> = sizes
        .iter()
        .cycle()
        .take(4 * sizes.len())
        .enumerate()
        .map(|(tag, &size)| {
            let l = Layout::from_size_align(size, 16).unwrap();
            // SAFETY: a non-zero size.
            let p = unsafe { A.alloc(l) };
            assert!(A.owns_slot(p), "a {size}-byte block is a slot");
            // SAFETY: a fresh block of `size` bytes.
            unsafe { fill(p, size, tag as u64) };
            (p, l)
        })
        .collect();
    let base = stats::snapshot().reservation_base;
    let layout: Vec<_> = vmas("self")
        .into_iter()
        .filter(|v| v.start >= base && v.end <= base + TOTAL_SIZE)
        .collect();
    for &(p, _) in &blocks {
        assert!(
            layout
                .iter()
                .any(|v| v.start <= p.addr() && p.addr() < v.end),
            "the block at {p:?} is in a mapping of the layout"
        );
    }
    let huge: Vec<_> = layout.iter().filter(|v| !v.no_huge).collect();
    assert!(
        huge.is_empty(),
        "{} of {} mappings of the layout may take huge pages, the first at {:#x}",
        huge.len(),
        layout.len(),
        huge[0].start
    );
    for (tag, (p, l)) in blocks.into_iter().enumerate() {
        // SAFETY: a live block of `l.size()` bytes from `A`, filled above.
        unsafe {
            assert_eq!(check(p, l.size(), tag as u64), Ok(()), "block {tag}");
            A.dealloc(p, l);
        }
    }
}

#[test]
fn the_reservation_takes_no_huge_pages() {
    if !kernel_has_huge_pages() {
        eprintln!("skipped: this kernel has no transparent huge pages");
        return;
    }
    every_mapping_of_the_layout_has_no_huge_pages();
    assert_eq!(stats::snapshot().geometry, Geometry::Reserved);
}

#[test]
fn mappings_on_demand_take_no_huge_pages() {
    if !kernel_has_huge_pages() {
        eprintln!("skipped: this kernel has no transparent huge pages");
        return;
    }
    // SAFETY: the test's only thread sets it before the first allocation
    // reads it.
    unsafe { std::env::set_var("SMALLOC_RESERVE", "0") };
    every_mapping_of_the_layout_has_no_huge_pages();
    assert_eq!(stats::snapshot().geometry, Geometry::OnDemand(Why::Asked));
}
