//! Slots freed by another thread go back to the slab they came from. A
//! thread whose own list offers only never-used slots first looks for such
//! freed slots on the other slabs, and reuses them, before it touches new
//! memory (otherwise cross-thread frees make every slab's touched memory
//! grow to the whole working set).

use std::alloc::{GlobalAlloc, Layout};
use std::collections::HashSet;
use std::sync::{Barrier, mpsc};
use std::thread;

use devutils::{check, fill};
use smalloc::Smalloc;

static A: Smalloc = Smalloc::new();

fn reuse_share(size: usize, n: usize) -> f64 {
    let l = Layout::from_size_align(size, 8).unwrap();
    let (to_b, from_a) = mpsc::channel::<Vec<usize>>();
    let done = std::sync::Arc::new(Barrier::new(2));
    let done_a = done.clone();
    // Thread A allocates n blocks on its slab and stays alive (so thread B
    // gets another slab), until B is done.
    let a = thread::spawn(move || {
        let blocks: Vec<usize> = (0..n)
            // SAFETY: a non-zero layout.
            .map(|_| unsafe { A.alloc(l) }.addr())
            .collect();
        to_b.send(blocks).unwrap();
        done_a.wait();
    });
    // SAFETY: pointers passed to the allocator came from it with this
    // layout and are live; blocks hold `size` bytes.
    let share = unsafe {
        // Warm B's own list of this class a little (its slab is in use).
        let own = A.alloc(l);
        let blocks = from_a.recv().unwrap();
        let a_slab = smalloc::layout::slab_of(blocks[0]);
        assert_ne!(
            a_slab,
            smalloc::layout::slab_of(own.addr()),
            "A and B share a slab"
        );
        let freed: HashSet<usize> = blocks.iter().copied().collect();
        // B frees A's blocks: they go back to A's slab.
        for &p in &blocks {
            A.dealloc(smalloc::raw::slot_start(p as *const u8) as *mut u8, l);
        }
        // B allocates as many: they should be A's freed slots, not new memory.
        let mine: Vec<*mut u8> = (0..n).map(|_| A.alloc(l)).collect();
        for (i, &p) in mine.iter().enumerate() {
            fill(p, size, i as u64);
        }
        for (i, &p) in mine.iter().enumerate() {
            assert_eq!(check(p, size, i as u64), Ok(()), "block {i}");
        }
        let distinct: HashSet<usize> = mine.iter().map(|p| p.addr()).collect();
        assert_eq!(distinct.len(), n, "a slot handed out twice");
        let reused = mine.iter().filter(|p| freed.contains(&p.addr())).count();
        for &p in &mine {
            A.dealloc(p, l);
        }
        A.dealloc(own, l);
        reused as f64 / n as f64
    };
    done.wait();
    a.join().unwrap();
    share
}

#[test]
fn small_slots_freed_on_another_slab_are_reused_before_new_memory() {
    let share = reuse_share(48, if cfg!(miri) { 300 } else { 20_000 });
    assert!(
        share > 0.95,
        "only {:.1}% of A's freed slots reused",
        share * 100.0
    );
}

#[test]
#[cfg_attr(miri, ignore = "large slots do not exist under Miri's geometry")]
fn large_slots_freed_on_another_slab_are_reused_before_new_memory() {
    let share = reuse_share(100_000, 400);
    assert!(
        share > 0.95,
        "only {:.1}% of A's freed slots reused",
        share * 100.0
    );
}
