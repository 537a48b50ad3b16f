//! The one virtual-memory reservation, made lazily by the first allocation.

use core::sync::atomic::{AtomicUsize, Ordering};

use crate::layout::{TOTAL_BITS, TOTAL_SIZE};
use crate::sys;

/// The reservation's base address (aligned, so even), [`UNINIT`], or a
/// "reserving" mark: `pid << 1 | 1`, set while one thread of process `pid`
/// makes the reservation and the others wait.
///
/// The pid in the mark makes `fork` safe: a child forked while its parent
/// was reserving inherits a mark with the parent's pid, which no thread of
/// the child will ever clear; the child sees a pid not its own, knows the
/// mark is stale and starts over.
static BASE: AtomicUsize = AtomicUsize::new(UNINIT);
/// No reservation yet.
const UNINIT: usize = 0;

/// This process's "reserving" mark.
fn reserving_mark() -> usize {
    (sys::pid() << 1) | 1
}

/// The base address if the reservation exists; [`UNINIT`] or a reserving
/// mark otherwise.
#[inline(always)]
pub fn base_raw() -> usize {
    // Acquire: pairs with the Release store in `init`, so a thread that
    // sees the base also sees the mapping as made by the reserving thread.
    BASE.load(Ordering::Acquire)
}

/// Whether `raw` (from [`base_raw`]) is a real base.
#[inline(always)]
pub fn is_ready(raw: usize) -> bool {
    raw != UNINIT && raw & 1 == 0
}

/// The base address, reserving on the first call. `None` when the operating
/// system refuses the reservation (every later call tries again).
#[cold]
#[inline(never)]
pub fn init() -> Option<usize> {
    let mark = reserving_mark();
    loop {
        // Acquire on both outcomes: a thread that sees a finished base must
        // see the reservation (as in `base_raw`).
        match BASE.compare_exchange(UNINIT, mark, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => {
                let base = reserve();
                #[cfg(feature = "valgrind")]
                if let Some(base) = base {
                    crate::valgrind::reserved(base);
                }
                #[cfg(feature = "secure")]
                crate::secure::init();
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

/// Maps `TOTAL_SIZE` bytes aligned to `TOTAL_SIZE`.
fn reserve() -> Option<usize> {
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
        return Some(sys::expose(p.wrapping_add(aligned - start)));
    }
    // Second choice, when the address space is too fragmented or limited for
    // the double mapping: ask for aligned addresses directly.
    for k in 1..(1usize << (47 - TOTAL_BITS)) {
        let want = k << TOTAL_BITS;
        if let Some(p) = sys::map(want, TOTAL_SIZE, true) {
            if p.addr() == want {
                return Some(sys::expose(p));
            }
            sys::unmap(p, TOTAL_SIZE);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserving_mark_inherited_through_fork_is_cleared() {
        // What a child forked mid-reservation sees: its parent's mark.
        let parent_mark = ((sys::pid() + 1) << 1) | 1;
        BASE.store(parent_mark, Ordering::Relaxed);
        assert!(!is_ready(base_raw()));
        let base = init().expect("reservation");
        assert!(is_ready(base));
        assert_eq!(base_raw(), base);
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
