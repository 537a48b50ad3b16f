//! Checks run in a `fork` child: [`in_child`] for any, and
//! [`child_allocates`], the one the tests of each cache a thread keeps
//! (held slots, guest cells) run on what a child inherits.

use std::alloc::{GlobalAlloc, Layout};
use std::collections::HashSet;

use crate::{check, fill};

/// Blocks the child allocates: enough to run any list it inherited dry.
const BLOCKS: usize = 3000;

/// Forks. The child runs `first_checks`, then allocates [`BLOCKS`] blocks
/// of `layout` (at least 8 bytes) from `a`, checks that no two are the
/// same, that none is `live`, and that the first is `first` when given,
/// then fills, checks and frees them all, and exits. Panics in the parent
/// if any of that failed in the child.
pub fn child_allocates<A: GlobalAlloc>(
    a: &A,
    layout: Layout,
    live: usize,
    first: Option<usize>,
    first_checks: impl FnOnce(),
) {
    in_child(|| {
        first_checks();
        let blocks: Vec<*mut u8> = (0..BLOCKS)
            .map(|_| {
                // SAFETY: a layout of non-zero size.
                let p = unsafe { a.alloc(layout) };
                assert!(!p.is_null(), "out of memory in the child");
                p
            })
            .collect();
        if let Some(first) = first {
            assert_eq!(blocks[0].addr(), first, "the child's thread still holds it");
        }
        let distinct: HashSet<usize> = blocks.iter().map(|p| p.addr()).collect();
        assert_eq!(distinct.len(), BLOCKS, "a slot handed out twice");
        assert!(!distinct.contains(&live), "a live block handed out");
        for (i, &p) in blocks.iter().enumerate() {
            // SAFETY: a live block of `layout.size()` bytes.
            unsafe { fill(p, layout.size(), i as u64) };
        }
        for (i, &p) in blocks.iter().enumerate() {
            // SAFETY: as above, filled with `i`; freed once.
            unsafe {
                assert_eq!(check(p, layout.size(), i as u64), Ok(()), "block corrupted");
                a.dealloc(p, layout);
            }
        }
    });
}

/// Forks; the child runs `checks` and exits with `_exit` (0, or 1 if they
/// panicked: the panic's message is on stderr). Panics in the parent if
/// the child failed. `checks` may allocate (smalloc's fork handlers make
/// it usable in the child) but must not take locks other threads of the
/// parent may have held at the fork (`std::thread::spawn`'s, where those
/// threads start threads).
pub fn in_child(checks: impl FnOnce()) {
    // SAFETY: the child runs only `checks`, within the limits above, and
    // calls _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(checks)).map_or(1, |()| 0);
        // SAFETY: _exit never returns.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "child status {status:#x}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "the child's checks failed");
}
