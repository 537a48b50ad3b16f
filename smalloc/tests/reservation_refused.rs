//! When the OS refuses the reservation, slot allocations return null (no
//! panic, no abort), big allocations still get their own mappings, and a
//! later allocation retries the reservation.

use std::alloc::{GlobalAlloc, Layout};

use smalloc::Smalloc;

static A: Smalloc = Smalloc::new();

fn set_address_space_limit(bytes: u64) {
    let lim = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: `lim` is a valid rlimit; lowering our own soft limit.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) }, 0);
}

fn vm_size() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    s.split_whitespace().next().unwrap().parse::<u64>().unwrap() * 4096
}

#[test]
#[cfg_attr(miri, ignore = "Miri has no setrlimit and no /proc")]
fn refused_reservation_gives_null_then_recovers() {
    // Room for 1 GiB more than we use now: far below the 8 TiB reservation.
    set_address_space_limit(vm_size() + (1 << 30));
    let small = Layout::from_size_align(64, 8).unwrap();
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    assert!(unsafe { A.alloc(small) }.is_null());
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    assert!(unsafe { A.alloc_zeroed(small) }.is_null());
    assert!(!A.owns_slot(std::ptr::null()));
    // A big request fails the same way: the OS refuses, we return null.
    let big = Layout::from_size_align(3 << 30, 8).unwrap();
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    assert!(unsafe { A.alloc(big) }.is_null());

    // Lift the limit: the next allocation makes the reservation.
    set_address_space_limit(libc::RLIM_INFINITY);
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let p = unsafe { A.alloc(small) };
    assert!(!p.is_null());
    assert!(A.owns_slot(p));
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { p.write_bytes(0xee, 64) };
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { A.dealloc(p, small) };
}
