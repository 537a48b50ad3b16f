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

fn reuse_count(size: usize, n: usize) -> usize {
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
    let reused = unsafe {
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
        reused
    };
    done.wait();
    a.join().unwrap();
    reused
}

/// At most this many of B's blocks may be new memory: its own list hands
/// out never-used slots up to the next new-memory step before it looks
/// elsewhere (twice, for slack).
fn allowed_new(size: usize) -> usize {
    let slot = size.next_power_of_two() as u64;
    (2 * (smalloc::layout::NEW_MEMORY_STEP as u64).div_ceil(slot)) as usize
}

#[test]
fn small_slots_freed_on_another_slab_are_reused_before_new_memory() {
    // Under Miri (slow) the count is too small for the bound to bite; it
    // checks the paths for undefined behaviour.
    let n = if cfg!(miri) { 200 } else { 20_000 };
    let reused = reuse_count(48, n);
    assert!(
        reused + allowed_new(48) >= n,
        "only {reused} of {n} freed slots reused"
    );
}

#[test]
#[cfg_attr(miri, ignore = "large slots do not exist under Miri's geometry")]
fn large_slots_freed_on_another_slab_are_reused_before_new_memory() {
    let n = 400;
    let reused = reuse_count(100_000, n);
    assert!(
        reused + allowed_new(100_000) >= n,
        "only {reused} of {n} freed slots reused"
    );
}

/// An owner that moved to the slab of a thread that ended, to take its freed
/// slots of one class, stays there for a while: dry of another class there,
/// it takes new memory rather than move back to the slab it left or on to
/// another ended thread's (it moved on at nearly every refill, its freed
/// slots spread over every slab). After the while, it moves again.
#[test]
#[cfg_attr(miri, ignore = "the clock the rule reads is not Miri's")]
fn an_owner_that_moved_to_freed_slots_stays_there_a_while() {
    use smalloc::hooks::owned_slab;
    use smalloc::layout::slab_of;
    use std::time::{Duration, Instant};
    // No sweep takes the lists this test reads.
    smalloc::set_purge_delay(Duration::ZERO);
    let [first, second, third] = [32, 48, 80].map(|size| Layout::from_size_align(size, 8).unwrap());
    /// Frees 64 blocks of `l` on the calling thread's slab; returns it.
    fn leave_freed(l: Layout) -> usize {
        // SAFETY: each block is freed once, with its layout.
        unsafe {
            let blocks: Vec<*mut u8> = (0..64).map(|_| A.alloc(l)).collect();
            for &p in &blocks {
                A.dealloc(p, l);
            }
        }
        owned_slab().expect("the thread owns a slab")
    }
    // This thread leaves freed slots of the first class on its slab; two
    // threads alive at once (so on two other slabs) leave the second and
    // the third class on theirs, and end: nobody owns those slabs now.
    let old = leave_freed(first);
    let both = std::sync::Arc::new(Barrier::new(2));
    let spawn = |l: Layout| {
        let both = both.clone();
        thread::spawn(move || {
            let s = leave_freed(l);
            both.wait();
            s
        })
    };
    let (b, c) = (spawn(second), spawn(third));
    let (b, c) = (b.join().unwrap(), c.join().unwrap());
    assert!(old != b && old != c && b != c, "slabs {old}, {b}, {c}");
    // SAFETY: every block is freed once, with the layout it was allocated
    // with, and written only within it.
    unsafe {
        // Dry of the second class, this thread moves to where it is freed.
        let start = Instant::now();
        let p = A.alloc(second);
        assert_eq!((slab_of(p.addr()), owned_slab()), (b, Some(b)));
        // Dry of the first and the third class there, it stays (unless this
        // thread was held up for the rule's whole while: a loaded machine).
        let q = A.alloc(first);
        let r = A.alloc(third);
        if start.elapsed() < Duration::from_millis(5) {
            assert_eq!(owned_slab(), Some(b), "moved on");
            assert_eq!((slab_of(q.addr()), slab_of(r.addr())), (b, b));
        }
        fill(q, 32, 1);
        fill(r, 80, 2);
        // After the while, running dry of the third class again (its new
        // memory used up) moves it to the third class's freed slots.
        thread::sleep(Duration::from_millis(50));
        let mut more = Vec::new();
        while owned_slab() == Some(b) && more.len() <= smalloc::layout::NEW_MEMORY_STEP / 16 {
            more.push(A.alloc(third));
        }
        assert_eq!(owned_slab(), Some(c), "never moved on");
        assert_eq!(slab_of(more.last().unwrap().addr()), c);
        assert_eq!(check(q, 32, 1), Ok(()));
        assert_eq!(check(r, 80, 2), Ok(()));
        for p in more {
            A.dealloc(p, third);
        }
        A.dealloc(r, third);
        A.dealloc(q, first);
        A.dealloc(p, second);
    }
}

/// Large slots that a thread kept on its slab's private list when it ended
/// (no sweep hands them over) are reused by the next thread that runs dry
/// of their class: the slab is marked as holding freed large slots of the
/// class when the thread gives it up (no push ever did).
#[test]
#[cfg_attr(miri, ignore = "large slots do not exist under Miri's geometry")]
fn large_slots_an_ended_thread_kept_privately_are_reused() {
    use smalloc::layout::{size_class, slab_of, slot_size};
    // Nothing hands the private list over to the shared one.
    smalloc::set_purge_delay(std::time::Duration::ZERO);
    let size = 100_000;
    let l = Layout::from_size_align(size, 8).unwrap();
    // As many as the private list keeps.
    let n = smalloc::hooks::PRIVATE_LARGE_BYTES / slot_size(size_class(size, 8));
    assert!(n >= 2, "{n} slots kept");
    // SAFETY: every block is freed once, with its layout, and written only
    // within it.
    unsafe {
        // This thread owns a slab, so the other one gets another.
        let own = A.alloc(Layout::from_size_align(64, 8).unwrap());
        let freed: Vec<usize> = thread::spawn(move || {
            let blocks: Vec<*mut u8> = (0..n).map(|_| A.alloc(l)).collect();
            let addrs = blocks.iter().map(|p| p.addr()).collect();
            for &p in &blocks {
                A.dealloc(p, l);
            }
            addrs
        })
        .join()
        .unwrap();
        assert_ne!(slab_of(freed[0]), slab_of(own.addr()), "one slab");
        let mine: Vec<*mut u8> = (0..n).map(|_| A.alloc(l)).collect();
        for (i, &p) in mine.iter().enumerate() {
            fill(p, size, i as u64);
        }
        for (i, &p) in mine.iter().enumerate() {
            assert_eq!(check(p, size, i as u64), Ok(()), "block {i}");
        }
        let reused = mine.iter().filter(|p| freed.contains(&p.addr())).count();
        assert_eq!(reused, n, "only {reused} of {n} freed slots reused");
        for p in mine {
            A.dealloc(p, l);
        }
        A.dealloc(own, Layout::from_size_align(64, 8).unwrap());
    }
}
