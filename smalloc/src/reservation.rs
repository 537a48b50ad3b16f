//! Where the layout's address space comes from, made lazily by the first
//! allocation: one reservation of the whole layout, or, when the kernel
//! refuses that (an address-space or data limit, strict overcommit) or the
//! environment asks (`SMALLOC_RESERVE=0`), a window of the address space
//! whose regions are mapped as they are used ([`commit`]).
//!
//! Either way the layout is the same: a base aligned to its size, the
//! regions at the same offsets, so the hot paths are the same code. On
//! demand, nothing holds the window's unused parts: the kernel never places
//! a mapping there by itself (it takes free space from the top down, and
//! the window is chosen below everything but the program's own image), but
//! a mapping made there at a fixed address by someone else stops the region
//! it lands in from growing (its allocations go to other slabs).
//! How each is chosen and what it costs: docs/design.md ("The reservation
//! and its fallback").

use core::sync::atomic::Ordering;

use crate::geometry::{
    self, AS_LIMIT, ASKED, BASE, DATA_LIMIT, GIVEN_UP, REFUSED, RESERVED, STRICT, UNINIT,
    on_demand, set_geometry,
};
use crate::layout::{TOTAL_BITS, TOTAL_SIZE};
use crate::{commit, features, sys};

// The base address ([`base::BASE`]) is [`UNINIT`], the base, or a
// "reserving" mark: `pid << 1 | 1`, set while one thread of process `pid`
// makes the layout and the others wait. The pid in the mark makes `fork`
// safe: a child forked while its parent was reserving inherits a mark with
// the parent's pid, which no thread of the child will ever clear; the child
// sees a pid not its own, knows the mark is stale and starts over.

/// This process's "reserving" mark.
fn reserving_mark() -> usize {
    (sys::pid() << 1) | 1
}

/// The base address, reserving on the first call. `None` when the operating
/// system refuses both the reservation and a window mapped on demand
/// (every later call tries again).
#[cold]
#[inline(never)]
pub fn init() -> Option<usize> {
    let mark = reserving_mark();
    loop {
        // Acquire on both outcomes: a thread that sees a finished base must
        // see the reservation (as in `base::raw`).
        match BASE.compare_exchange(UNINIT, mark, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => {
                let base = reserve();
                if let Some(base) = base {
                    features::made(base, on_demand());
                }
                // Release: publishes the reservation with its address.
                BASE.store(base.unwrap_or(UNINIT), Ordering::Release);
                return base;
            }
            Err(cur) if cur == mark => sys::yield_now(),
            Err(cur) if cur & 1 == 1 => {
                // A mark of another process: inherited through fork from a
                // parent that was reserving. Nobody here will finish it.
                // Relaxed: nothing is published by clearing it.
                let _ = BASE.compare_exchange(cur, UNINIT, Ordering::Relaxed, Ordering::Relaxed);
            }
            Err(base) => return Some(base),
        }
    }
}

/// Gives the reservation up (see [`crate::map_on_demand`]): the layout is
/// mapped on demand from now on. True when it is (also if it was already).
pub fn give_up() -> bool {
    let Some(base) = geometry::base().or_else(init) else {
        return false;
    };
    commit::keep_committed(base, GIVEN_UP, 0)
}

/// The base of the layout: the whole reservation if the kernel grants it
/// (and the environment does not ask otherwise), else a window mapped on
/// demand. `None` when neither can be had.
fn reserve() -> Option<usize> {
    let (code, value) = if asked_on_demand() {
        (ASKED, 0)
    } else {
        match reserve_whole() {
            Ok(base) => {
                // Out of core dumps but for what is committed.
                sys::set_dumped(base, TOTAL_SIZE, false);
                // Small pages only: a huge page would make one used slot
                // cost 2 MiB and undo what the purge gives back.
                sys::no_huge_pages(base, TOTAL_SIZE);
                set_geometry(RESERVED, 0);
                return Some(base);
            }
            Err(errno) => why_refused(errno),
        }
    };
    let base = on_demand_window()?;
    set_geometry(code, value);
    Some(base)
}

/// Whether the environment asks for no reservation: `SMALLOC_RESERVE=0`.
fn asked_on_demand() -> bool {
    !cfg!(miri) && sys::env(c"SMALLOC_RESERVE") == Some(b"0")
}

/// Maps `TOTAL_SIZE` bytes aligned to `TOTAL_SIZE`; `Err` holds the
/// `errno` of the first refusal.
fn reserve_whole() -> Result<usize, i32> {
    // First choice: map twice the size anywhere and trim both ends to the
    // aligned middle. Costs nothing but address space, which is free.
    if let Some(p) = sys::map(0, 2 * TOTAL_SIZE, false) {
        let start = p.addr();
        let aligned = (start + TOTAL_SIZE - 1) & !(TOTAL_SIZE - 1);
        let end = start + 2 * TOTAL_SIZE;
        sys::unmap(p, aligned - start);
        sys::unmap(
            p.wrapping_add(aligned + TOTAL_SIZE - start),
            end - (aligned + TOTAL_SIZE),
        );
        return Ok(sys::expose(p.wrapping_add(aligned - start)));
    }
    let errno = sys::errno();
    // Second choice, when the address space is too fragmented for the
    // double mapping: ask for aligned addresses directly.
    for k in 1..(1usize << (ADDRESS_BITS - TOTAL_BITS)) {
        let want = k << TOTAL_BITS;
        if let Some(p) = sys::map(want, TOTAL_SIZE, true) {
            if p.addr() == want {
                return Ok(sys::expose(p));
            }
            sys::unmap(p, TOTAL_SIZE);
        }
    }
    Err(errno)
}

/// The user address space smalloc places the layout in: the lower 2^47
/// bytes, which every x86-64 and aarch64 kernel with 4-level page tables
/// gives a process.
const ADDRESS_BITS: u32 = 47;

/// Why the kernel refused the reservation with `errno`, from the limits it
/// applies: a code of [`GEOMETRY`] and its value.
fn why_refused(errno: i32) -> (u64, u64) {
    let mut mode = 0;
    sys::read_file(c"/proc/sys/vm/overcommit_memory", |b| {
        mode = b.first().copied().unwrap_or(0)
    });
    classify(
        sys::limit(libc::RLIMIT_AS),
        sys::limit(libc::RLIMIT_DATA),
        mode == b'2',
        errno,
    )
}

/// [`why_refused`] given the address-space and data limits, whether
/// overcommit is strict, and the `errno`.
fn classify(space: Option<u64>, data: Option<u64>, strict: bool, errno: i32) -> (u64, u64) {
    // The first choice asks for twice the layout: a larger limit is not
    // why.
    let refuses = |limit: &u64| *limit < 2 * TOTAL_SIZE as u64;
    if let Some(limit) = space.filter(refuses) {
        (AS_LIMIT, limit)
    } else if let Some(limit) = data.filter(refuses) {
        (DATA_LIMIT, limit)
    } else if strict {
        (STRICT, 0)
    } else {
        (REFUSED, errno as u64)
    }
}

/// Chooses a window for the layout mapped on demand and maps every slab's
/// metadata there: the lowest aligned window that no mapping touches (from
/// `/proc/self/maps`; if that cannot be read, the lowest windows one after
/// another). `None` if none can be had (the kernel refuses even the
/// metadata, or every window is taken).
fn on_demand_window() -> Option<usize> {
    let end = 1usize << ADDRESS_BITS;
    // Not the first window: it holds address 0 and, often, the program.
    let mut from = TOTAL_SIZE;
    while from < end {
        let window = free_window(from).unwrap_or(from);
        if window >= end {
            return None;
        }
        match commit::map_metadata(window) {
            Ok(()) => return Some(window),
            // Something is mapped there after all: the next one.
            Err(libc::EEXIST) => from = window + TOTAL_SIZE,
            Err(_) => return None,
        }
    }
    None
}

/// The lowest window (aligned to its size, [`TOTAL_SIZE`]) at or above
/// `from` that no mapping of the process touches; `None` if the mappings
/// cannot be read.
fn free_window(from: usize) -> Option<usize> {
    let mut window = from;
    let mut maps = MapsParser::default();
    let read = sys::read_file(c"/proc/self/maps", |bytes| {
        for &b in bytes {
            if let Some(range) = maps.byte(b) {
                window = past(window, range);
            }
        }
    });
    read.then_some(window)
}

/// The window to try after `window` given a mapping `[start, end)`, the
/// mappings coming in address order: one that reaches into the window
/// pushes it past its end.
fn past(window: usize, (start, end): (usize, usize)) -> usize {
    if end > window && start < window.saturating_add(TOTAL_SIZE) {
        end.next_multiple_of(TOTAL_SIZE)
    } else {
        window
    }
}

/// Reads the address ranges of `/proc/self/maps` a byte at a time (lines
/// `start-end perms ...`, hexadecimal), without allocating.
#[derive(Default)]
struct MapsParser {
    /// 0: in the start, 1: in the end, 2: skipping to the line's end.
    field: u8,
    start: usize,
    end: usize,
}

impl MapsParser {
    /// Takes the next byte; returns a range when its line's addresses are
    /// complete.
    fn byte(&mut self, b: u8) -> Option<(usize, usize)> {
        match (self.field, b) {
            (_, b'\n') => *self = MapsParser::default(),
            (0, b'-') => self.field = 1,
            (1, b' ') => {
                self.field = 2;
                return Some((self.start, self.end));
            }
            (0, _) => self.start = self.start << 4 | hex(b),
            (1, _) => self.end = self.end << 4 | hex(b),
            _ => {}
        }
        None
    }
}

/// The value of a hexadecimal digit (lower case, as the kernel writes).
fn hex(b: u8) -> usize {
    (b as char).to_digit(16).unwrap_or(0) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::{self, is_ready};

    #[test]
    fn a_refusal_is_put_down_to_the_limit_that_caused_it() {
        let limit = TOTAL_SIZE as u64;
        let (small, huge) = (Some(limit), Some(4 * limit));
        assert_eq!(classify(small, None, false, 12), (AS_LIMIT, limit));
        assert_eq!(classify(small, small, true, 12), (AS_LIMIT, limit));
        assert_eq!(classify(huge, small, true, 12), (DATA_LIMIT, limit));
        assert_eq!(classify(huge, huge, true, 12), (STRICT, 0));
        assert_eq!(classify(None, None, false, 12), (REFUSED, 12));
    }

    #[test]
    fn the_window_is_the_lowest_that_no_mapping_touches() {
        let t = TOTAL_SIZE;
        let lowest = |from, maps: &[(usize, usize)]| maps.iter().fold(from, |w, &r| past(w, r));
        // A program at the bottom, libraries and the stack at the top.
        let maps = [(0x40_0000, 0x60_0000), (15 * t + 5, 15 * t + 9)];
        assert_eq!(lowest(t, &maps), t);
        // Something in the first window, ending in the second.
        let maps = [(t + 4096, 2 * t + 4096), (3 * t, 3 * t + 1)];
        assert_eq!(lowest(t, &maps), 4 * t);
        // A mapping ending exactly at a window's start leaves it free.
        assert_eq!(lowest(t, &[(0, t)]), t);
        // The vsyscall page, far above, changes nothing.
        assert_eq!(lowest(t, &[(usize::MAX - 0xfff, usize::MAX)]), t);
    }

    #[test]
    fn the_maps_parser_reads_each_range() {
        let text = b"55d4c3a00000-55d4c3a02000 r--p 00000000 08:01 123 /bin/x\n\
                     7ffd1a2b3000-7ffd1a2d4000 rw-p 00000000 00:00 0 [stack]\n";
        let mut p = MapsParser::default();
        let got: std::vec::Vec<_> = text.iter().filter_map(|&b| p.byte(b)).collect();
        assert_eq!(
            got,
            [
                (0x55d4_c3a0_0000, 0x55d4_c3a0_2000),
                (0x7ffd_1a2b_3000, 0x7ffd_1a2d_4000)
            ]
        );
    }

    #[test]
    fn a_reserving_mark_inherited_through_fork_is_cleared() {
        // What a child forked mid-reservation sees: its parent's mark.
        let parent_mark = ((sys::pid() + 1) << 1) | 1;
        BASE.store(parent_mark, Ordering::Relaxed);
        assert!(!is_ready(geometry::base_raw()));
        let base = init().expect("reservation");
        assert!(is_ready(base));
        assert_eq!(geometry::base_raw(), base);
        assert_eq!(base % TOTAL_SIZE, 0);
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot fork")]
    fn a_fork_child_of_a_reserving_parent_can_allocate() {
        // The real thing: fork while the mark is set (as if another thread
        // were reserving), then allocate in the child.
        BASE.store(reserving_mark(), Ordering::Relaxed);
        // SAFETY: the child only calls async-signal-safe code plus our
        // allocator (no locks), then _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let ok = init().is_some();
            // SAFETY: _exit never returns.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        BASE.store(UNINIT, Ordering::Relaxed);
    }
}
