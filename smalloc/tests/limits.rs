//! The layout's address space under limits: when the kernel refuses the
//! reservation (an address-space or data limit), or the environment asks
//! (`SMALLOC_RESERVE=0`), the regions are mapped on demand and smalloc
//! still serves every allocation from its slots; under a limit that leaves
//! room for nothing, allocations return null and a later one recovers.
//! Each test makes the first allocation of its process (the allocator here
//! is not the global one), after setting its limit.

use std::alloc::{GlobalAlloc, Layout};

use devutils::process::{set_limit, status_bytes, vm_bytes, vmas};
use devutils::{Rng, check, check_sparse, fill, fill_sparse};
use smalloc::Smalloc;
use smalloc::layout::TOTAL_SIZE;
use smalloc::stats::{self, Geometry, Why};

static A: Smalloc = Smalloc::new();

const MIB: usize = 1 << 20;

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

fn alloc(size: usize) -> *mut u8 {
    // SAFETY: a non-zero size.
    unsafe { A.alloc(layout(size)) }
}

/// Frees `p`, allocated with `size`.
fn free(p: *mut u8, size: usize) {
    // SAFETY: `p` is a live block of `size` bytes from `A`.
    unsafe { A.dealloc(p, layout(size)) }
}

/// Allocates blocks of random sizes (16 B to 256 KiB) until `total` bytes
/// are live, each filled with its pattern; checks them all and frees them.
/// Returns how many blocks it made.
fn mixed_blocks(seed: u64, total: usize) -> usize {
    let live = live_blocks(seed, total, 0);
    let n = live.len();
    check_and_free(live);
    n
}

/// What every test here checks of an on-demand geometry: the layout is
/// where the statistics say, aligned, and holds only smalloc's mappings,
/// of which none is larger than what it committed plus the metadata.
fn check_on_demand(why: Why) {
    let s = stats::snapshot();
    assert_eq!(s.geometry, Geometry::OnDemand(why));
    assert_eq!(s.reservation_size, 0);
    let base = s.reservation_base;
    assert_eq!(base % TOTAL_SIZE, 0, "the window is aligned");
    let mapped: usize = vmas("self")
        .iter()
        .filter(|v| v.start >= base && v.end <= base + TOTAL_SIZE)
        .map(|v| v.len())
        .sum();
    // 16 slabs, two metadata ranges each of at most three pages.
    let metadata = 16 * 2 * 3 * devutils::process::page_size();
    assert!(s.committed_bytes > 0);
    assert!(
        mapped as u64 <= s.committed_bytes + metadata as u64,
        "mapped {mapped} bytes in the window, committed {}",
        s.committed_bytes
    );
    assert!(s.committed_bytes >= s.handed_out_bytes());
}

#[test]
fn a_limit_that_fits_nothing_gives_null_then_recovers() {
    // Room for 64 KiB more than we use now: not even the slabs' metadata
    // (three pages each of 16 slabs).
    assert!(set_limit(libc::RLIMIT_AS, vm_bytes() + (64 << 10)));
    let small = layout(64);
    // SAFETY: non-zero layouts.
    assert!(unsafe { A.alloc(small) }.is_null());
    // SAFETY: as above.
    assert!(unsafe { A.alloc_zeroed(small) }.is_null());
    assert!(!A.owns_slot(std::ptr::null()));
    assert_eq!(stats::snapshot().geometry, Geometry::None);
    // A big request fails the same way: the OS refuses, we return null.
    // SAFETY: as above.
    assert!(unsafe { A.alloc(layout(3 << 30)) }.is_null());

    // Lift the limit: the next allocation makes the reservation.
    assert!(set_limit(libc::RLIMIT_AS, libc::RLIM_INFINITY));
    let p = alloc(64);
    assert!(!p.is_null() && A.owns_slot(p));
    assert_eq!(stats::snapshot().geometry, Geometry::Reserved);
    // SAFETY: a live 64-byte block.
    unsafe { fill(p, 64, 7) };
    // SAFETY: as above.
    assert_eq!(unsafe { check(p, 64, 7) }, Ok(()));
    free(p, 64);
}

#[test]
fn an_address_space_limit_maps_on_demand() {
    let limit = vm_bytes() + (1 << 30);
    assert!(set_limit(libc::RLIMIT_AS, limit));
    assert!(mixed_blocks(1, 200 * MIB) > 1000);
    check_on_demand(Why::AddressSpaceLimit(limit));

    // Up to the limit: 1 MiB blocks until the kernel refuses, then null
    // (never a crash).
    let mut blocks = Vec::new();
    loop {
        let p = alloc(MIB);
        if p.is_null() {
            break;
        }
        // SAFETY: a live block of 1 MiB.
        unsafe { fill_sparse(p, MIB, blocks.len() as u64) };
        blocks.push(p);
        assert!(blocks.len() < 1024, "1 GiB of blocks under a 1 GiB limit");
    }
    eprintln!("{} MiB of 1 MiB blocks under the limit", blocks.len());
    // Most of the limit serves blocks: commits run at most a quarter ahead.
    assert!(blocks.len() >= 600, "only {} MiB of blocks", blocks.len());
    for (tag, &p) in blocks.iter().enumerate() {
        // SAFETY: a live block of 1 MiB.
        assert_eq!(unsafe { check_sparse(p, MIB, tag as u64) }, Ok(()));
        free(p, MIB);
    }
    // The memory is reused: as many blocks again, with no new mapping.
    let committed = stats::snapshot().committed_bytes;
    let again: Vec<_> = (0..blocks.len()).map(|_| alloc(MIB)).collect();
    assert!(again.iter().all(|p| !p.is_null()));
    assert_eq!(stats::snapshot().committed_bytes, committed);
    again.into_iter().for_each(|p| free(p, MIB));
    check_on_demand(Why::AddressSpaceLimit(limit));
}

#[test]
fn a_data_limit_maps_on_demand() {
    let limit = status_bytes("VmData") + (512 << 20);
    assert!(set_limit(libc::RLIMIT_DATA, limit));
    assert!(mixed_blocks(2, 100 * MIB) > 500);
    check_on_demand(Why::DataLimit(limit));
}

/// Sets `SMALLOC_RESERVE=0`, read by the first allocation.
fn ask_on_demand() {
    // SAFETY: the test's only thread sets it before any other reads it.
    unsafe { std::env::set_var("SMALLOC_RESERVE", "0") };
}

#[test]
fn smalloc_reserve_0_maps_on_demand() {
    ask_on_demand();
    assert!(mixed_blocks(3, 50 * MIB) > 200);
    check_on_demand(Why::Asked);
    let s = stats::snapshot();
    // Below everything but the program: the lowest free window.
    let base = s.reservation_base;
    let below = vmas("self")
        .iter()
        .filter(|v| v.end > TOTAL_SIZE && v.start < base)
        .count();
    assert_eq!(below, 0, "a lower window was free");
}

#[test]
fn big_blocks_get_a_mapping_each_on_demand() {
    ask_on_demand();
    let mid = 20 * MIB;
    let big = 40 * MIB;
    let p = alloc(mid);
    assert!(A.owns_slot(p), "a 20 MiB block is a slot");
    let q = alloc(big);
    assert!(
        !q.is_null() && !A.owns_slot(q),
        "a 40 MiB block is a mapping"
    );
    // SAFETY: live blocks of these sizes.
    unsafe {
        fill(p, mid, 1);
        fill(q, big, 2);
        // A slot grows into a mapping and a mapping shrinks into a slot,
        // keeping the contents.
        let p2 = A.realloc(p, layout(mid), big);
        assert!(!A.owns_slot(p2));
        assert_eq!(check(p2, mid, 1), Ok(()));
        let q2 = A.realloc(q, layout(big), mid);
        assert!(A.owns_slot(q2));
        assert_eq!(check(q2, mid, 2), Ok(()));
        assert_eq!(A.usable_size(q2, layout(mid)), 32 * MIB, "its class");
        assert_eq!(A.usable_size(p2, layout(big)), big);
        free(p2, big);
        free(q2, mid);
        let z = A.alloc_zeroed(layout(big));
        assert!(!A.owns_slot(z) && devutils::is_zero(z, big));
        free(z, big);
    }
    assert_eq!(stats::snapshot().big_count, 0);
}

#[test]
fn the_reservation_leaves_untouched_memory_out_of_core_dumps() {
    assert!(mixed_blocks(4, 20 * MIB) > 100);
    let s = stats::snapshot();
    assert_eq!(s.geometry, Geometry::Reserved);
    let base = s.reservation_base;
    let inside: Vec<_> = vmas("self")
        .into_iter()
        .filter(|v| v.start >= base && v.end <= base + TOTAL_SIZE)
        .collect();
    let dumped: usize = inside
        .iter()
        .filter(|v| !v.dont_dump)
        .map(|v| v.len())
        .sum();
    let metadata = 16 * 2 * 2 * devutils::process::page_size();
    assert!(
        dumped as u64 <= s.committed_bytes + metadata as u64,
        "{dumped} bytes dumped, {} committed",
        s.committed_bytes
    );
    assert!(
        dumped as u64 >= s.handed_out_bytes(),
        "every slot handed out is dumped"
    );
    assert_eq!(
        inside.iter().map(|v| v.len()).sum::<usize>(),
        TOTAL_SIZE,
        "the reservation is whole"
    );
    // A mapping per committed region and per metadata range, and the gaps
    // between them: far below the kernel's cap of 65530.
    let most = 2 * (s.committed_regions as usize + 32) + 1;
    assert!(inside.len() <= most, "{} mappings", inside.len());
}

#[test]
fn threads_commit_one_region_at_once_on_demand() {
    ask_on_demand();
    // Large slots are claimed one at a time from the shared path: threads
    // race to commit the same regions.
    let handles: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                let mut rng = Rng::new(10 + t);
                let mut live = Vec::new();
                for i in 0..300u64 {
                    let size = rng.log_size(64 << 10, 2 * MIB);
                    let p = alloc(size);
                    assert!(!p.is_null());
                    // SAFETY: a live block of `size` bytes.
                    unsafe { fill_sparse(p, size, t << 32 | i) };
                    live.push((p, size, t << 32 | i));
                }
                live.into_iter()
                    .map(|(p, size, tag)| (p.addr(), size, tag))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut all: Vec<_> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    all.sort();
    for w in all.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "blocks overlap: {w:?}");
    }
    for (addr, size, tag) in all {
        let p = std::ptr::with_exposed_provenance_mut::<u8>(addr);
        // SAFETY: a live block of `size` bytes.
        assert_eq!(unsafe { check_sparse(p, size, tag) }, Ok(()));
        free(p, size);
    }
    check_on_demand(Why::Asked);
}

#[test]
fn a_fork_child_commits_on_its_own() {
    ask_on_demand();
    let p = alloc(100);
    // SAFETY: a live block.
    unsafe { fill(p, 100, 5) };
    // The child only allocates (our allocator; this test has one thread).
    devutils::fork::in_child(|| {
        // New memory in the child: new commits of its own.
        assert!(mixed_blocks(6, 30 * MIB) > 100);
        // SAFETY: inherited from the parent, live.
        assert_eq!(unsafe { check(p, 100, 5) }, Ok(()));
    });
    assert!(mixed_blocks(7, 10 * MIB) > 50);
    free(p, 100);
}

/// Allocates blocks of random sizes (16 B to 256 KiB) until `total` bytes
/// are live, each filled with its pattern (tagged from `tag`).
fn live_blocks(seed: u64, total: usize, tag: u64) -> Vec<(*mut u8, usize, u64)> {
    let mut rng = Rng::new(seed);
    let mut live = Vec::new();
    let mut bytes = 0;
    while bytes < total {
        let size = rng.log_size(16, 256 << 10);
        let p = alloc(size);
        assert!(!p.is_null(), "a {size}-byte block under the limit");
        assert!(A.owns_slot(p), "served from a slot");
        let t = tag + live.len() as u64;
        // SAFETY: a fresh block of `size` bytes.
        unsafe { fill(p, size, t) };
        live.push((p, size, t));
        bytes += size;
    }
    live
}

/// Checks and frees blocks from [`live_blocks`].
fn check_and_free(live: Vec<(*mut u8, usize, u64)>) {
    for (p, size, t) in live {
        // SAFETY: a live block of `size` bytes filled with `t`.
        assert_eq!(unsafe { check(p, size, t) }, Ok(()), "block {t}");
        free(p, size);
    }
}

#[test]
fn a_reservation_given_up_keeps_its_blocks_and_maps_on_demand() {
    let live = live_blocks(5, 64 * MIB, 0);
    assert_eq!(stats::snapshot().geometry, Geometry::Reserved);
    assert!(vm_bytes() > TOTAL_SIZE as u64);
    assert!(smalloc::map_on_demand());
    assert!(smalloc::map_on_demand(), "a second call changes nothing");
    check_on_demand(Why::GivenUp);
    assert!(
        vm_bytes() < 16 << 30,
        "{} bytes of address space",
        vm_bytes()
    );
    // A limit of a few hundred MiB above what the process uses now leaves
    // room for a thread's stack and for new blocks, on demand.
    assert!(set_limit(libc::RLIMIT_AS, vm_bytes() + (512 << 20)));
    let more = std::thread::spawn(|| {
        let more = live_blocks(6, 100 * MIB, 1 << 32);
        let addrs: Vec<usize> = more.iter().map(|&(p, ..)| p.addr()).collect();
        check_and_free(more);
        addrs
    })
    .join()
    .unwrap();
    assert!(more.len() > 500);
    check_and_free(live);
    check_on_demand(Why::GivenUp);
}

#[test]
fn giving_the_reservation_up_while_threads_allocate_loses_no_block() {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut rounds = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || rounds < 3 {
                    // New regions and new commits in every round: sizes
                    // spread over many classes, growing.
                    let total = (4 + rounds as usize % 16) * MIB;
                    check_and_free(live_blocks(t * 1000 + rounds, total, rounds << 40));
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    let live = live_blocks(7, 16 * MIB, 1 << 50);
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(smalloc::map_on_demand());
    std::thread::sleep(std::time::Duration::from_millis(100));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in workers {
        assert!(w.join().unwrap() >= 3);
    }
    check_and_free(live);
    check_on_demand(Why::GivenUp);
}

#[test]
fn a_block_in_a_slot_above_the_on_demand_ones_shrinks_into_a_mapping() {
    // A 300 MiB block takes a 512 MiB slot; once the reservation is given
    // up, new blocks above 32 MiB get mappings. Shrunk to 40 MiB (an
    // eighth of its slot or less: it moves), it gets one, holding its
    // first 40 MiB.
    let (old, new) = (300 * MIB, 40 * MIB);
    let p = alloc(old);
    assert!(A.owns_slot(p));
    // SAFETY: a live block of `old` bytes.
    unsafe { fill(p, new, 3) };
    assert!(smalloc::map_on_demand());
    // SAFETY: `p` is live with `layout(old)`; a non-zero new size.
    let q = unsafe { A.realloc(p, layout(old), new) };
    assert!(!q.is_null() && !A.owns_slot(q));
    // SAFETY: a live block of `new` bytes.
    assert_eq!(unsafe { check(q, new, 3) }, Ok(()));
    free(q, new);
}
