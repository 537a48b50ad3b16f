//! The Rust side of the entry-point overhead measurement (see
//! `bench/overhead.sh`): `N` allocate/free pairs of 32 bytes through
//! `GlobalAlloc`, either calling `Smalloc` directly (`direct`) or through
//! `std::alloc` with smalloc as the `#[global_allocator]` (`global`).

use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;

use smalloc_core::Smalloc;

#[global_allocator]
static GLOBAL: Smalloc = Smalloc::new();

#[inline(never)]
fn direct(n: usize, layout: Layout) {
    for _ in 0..n {
        // SAFETY: a non-zero-size layout; the block is freed with the same
        // layout right after.
        unsafe {
            let p = GLOBAL.alloc(black_box(layout));
            GLOBAL.dealloc(black_box(p), layout);
        }
    }
}

#[inline(never)]
fn global(n: usize, layout: Layout) {
    for _ in 0..n {
        // SAFETY: as in `direct`.
        unsafe {
            let p = std::alloc::alloc(black_box(layout));
            std::alloc::dealloc(black_box(p), layout);
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "direct".into());
    let n: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let layout = Layout::from_size_align(32, 8).unwrap();
    if mode == "global" {
        global(n, layout);
    } else {
        direct(n, layout);
    }
}
