//! find_max_vm_addresses_reservable: how much virtual address space will the
//! operating system hand out in one `mmap`, and does smalloc's reservation fit?
//!
//! Binary-searches, at page granularity, the largest length for which
//! `mmap(NULL, len, PROT_READ | PROT_WRITE,
//! MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)` succeeds, unmapping
//! every success at once. smalloc is deliberately *not* the global allocator
//! here: the program measures the raw operating system.
//!
//! Usage: `find_max_vm_addresses_reservable [--quiet]`. With `--quiet` only
//! the number of bytes is printed.

use std::process::ExitCode;
use std::ptr;

use smalloc::layout::TOTAL_SIZE;

/// Upper end of the search: more than any x86-64 or AArch64 user address
/// space reachable without an address hint (47 or 48 bits).
const SEARCH_LIMIT: usize = 1 << 48;

const TIB: f64 = (1u64 << 40) as f64;
const GIB: f64 = (1u64 << 30) as f64;

/// Whether the kernel grants one anonymous, no-reserve mapping of `len`
/// bytes; the mapping is released before returning.
fn can_map(len: usize) -> bool {
    // SAFETY: an anonymous mapping at a kernel-chosen address (no MAP_FIXED)
    // never touches existing memory; nothing is read or written through it.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return false;
    }
    // SAFETY: `p..p + len` is exactly the mapping just made, used by no one.
    let rc = unsafe { libc::munmap(p, len) };
    assert_eq!(rc, 0, "munmap of a fresh {len}-byte mapping failed");
    true
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// The largest multiple of `page` up to `limit` that [`can_map`] accepts, or
/// `None` if not even one page can be mapped. Assumes that if a length maps,
/// every smaller one does too.
fn largest_mappable(page: usize, limit: usize) -> Option<usize> {
    let mut hi = limit / page; // in pages
    if can_map(hi * page) {
        return Some(hi * page);
    }
    let mut lo = 1; // in pages
    if !can_map(lo * page) {
        return None;
    }
    // Invariant: `lo` pages map, `hi` pages do not.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if can_map(mid * page) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo * page)
}

/// vm.overcommit_memory, explained.
fn overcommit_memory() -> String {
    match std::fs::read_to_string("/proc/sys/vm/overcommit_memory") {
        Ok(s) => {
            let v = s.trim();
            let meaning = match v {
                "0" => "heuristic overcommit",
                "1" => "always overcommit",
                "2" => "strict accounting; MAP_NORESERVE is ignored",
                _ => "unknown mode",
            };
            format!("{v} ({meaning})")
        }
        Err(e) => format!("unavailable ({e})"),
    }
}

/// The soft and hard RLIMIT_AS (what `ulimit -v` shows, there in KiB).
fn address_space_limit() -> String {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is a valid, writable rlimit for the kernel to fill.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut rl) };
    if rc != 0 {
        return "unavailable".to_string();
    }
    let show = |v: libc::rlim_t| {
        if v == libc::RLIM_INFINITY {
            "unlimited".to_string()
        } else {
            format!("{v} bytes ({} KiB)", v / 1024)
        }
    };
    format!("soft {}, hard {}", show(rl.rlim_cur), show(rl.rlim_max))
}

fn tib(bytes: usize) -> f64 {
    bytes as f64 / TIB
}

fn main() -> ExitCode {
    let mut quiet = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--quiet" | "-q" => quiet = true,
            "--help" | "-h" => {
                println!("usage: find_max_vm_addresses_reservable [--quiet]");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!(
                    "unknown argument {other:?}; usage: find_max_vm_addresses_reservable [--quiet]"
                );
                return ExitCode::from(2);
            }
        }
    }

    let page = page_size();
    let Some(max) = largest_mappable(page, SEARCH_LIMIT) else {
        eprintln!("error: not even one {page}-byte page could be mapped");
        return ExitCode::FAILURE;
    };
    if quiet {
        println!("{max}");
        return ExitCode::SUCCESS;
    }

    let doubled = 2 * TOTAL_SIZE;
    let at_limit = if max == SEARCH_LIMIT {
        " (the search limit; the true maximum may be larger)"
    } else {
        ""
    };
    println!("page size: {page} bytes");
    println!("vm.overcommit_memory: {}", overcommit_memory());
    println!("RLIMIT_AS (ulimit -v): {}", address_space_limit());
    println!(
        "largest mmap granted: {max} bytes ({:.3} TiB, {:.1} GiB){at_limit}",
        tib(max),
        max as f64 / GIB
    );
    println!("  (the largest free contiguous range: it varies a little from run to run with ASLR)");
    println!(
        "smalloc reservation: {TOTAL_SIZE} bytes ({:.3} TiB), aligned to its size",
        tib(TOTAL_SIZE)
    );
    println!(
        "smalloc transient mapping for alignment: {doubled} bytes ({:.3} TiB)",
        tib(doubled)
    );
    if max >= doubled {
        println!("verdict: smalloc fits (its double-size mapping for alignment fits too)");
    } else if max >= TOTAL_SIZE {
        println!(
            "verdict: smalloc may fit, via its fallback: the double-size mapping is refused, \
             so it needs a free {:.0} TiB range at a {:.0} TiB-aligned address",
            tib(TOTAL_SIZE),
            tib(TOTAL_SIZE)
        );
    } else {
        println!(
            "verdict: smalloc does NOT fit: it needs {TOTAL_SIZE} bytes, only {max} can be mapped"
        );
    }
    ExitCode::SUCCESS
}
