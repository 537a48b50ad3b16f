//! Model checking of the real free-list code (smalloc::free_list::pop and
//! push) with loom: every interleaving of a few threads, up to loom's
//! preemption bound.
//!
//! RUSTFLAGS="--cfg loom" cargo test -p smalloc --release --test loom_free_list
//!
//! Non-vacuity: built with `--cfg loom --cfg smalloc_no_push_counter` (the
//! push counter never moves), loom finds the ABA bug in the ABA test and
//! in the two-thread test; both are marked to expect that failure.
#![cfg(loom)]

use std::collections::HashSet;

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU32, AtomicU64};
use loom::thread;
use smalloc::free_list::{self, FlhCell, LinkCell, LinkStore, Pop};
use std::sync::atomic::Ordering;

/// Slots of [`free_list::NEW_MEMORY_STEP`] bytes.
const STEP_SHIFT: u32 = free_list::NEW_MEMORY_STEP.trailing_zeros();

struct Flh(AtomicU64);

impl FlhCell for Flh {
    fn load(&self, order: Ordering) -> u64 {
        self.0.load(order)
    }
    fn compare_exchange(&self, c: u64, n: u64, s: Ordering, f: Ordering) -> Result<u64, u64> {
        self.0.compare_exchange(c, n, s, f)
    }
}

struct Link(AtomicU32);

impl LinkCell for Link {
    unsafe fn store_link(&self, link: u32) {
        self.0.store(link, Ordering::Relaxed)
    }
}

struct Links(Vec<Link>);

impl LinkStore for Links {
    unsafe fn load_link(&self, slot: u32) -> u32 {
        self.0[slot as usize].0.load(Ordering::Relaxed)
    }
}

/// A list of `n` slots of `2^shift` bytes.
struct List {
    flh: Flh,
    links: Links,
    n: u32,
    shift: u32,
}

impl List {
    /// Slots of half the new-memory step when `n` is even (every second
    /// never-used slot starts new memory), else of a whole step: the
    /// allocator's regions are a whole number of steps, which
    /// `pop_or_new_memory` relies on to notice the end of the region.
    fn new(n: u32) -> Arc<List> {
        Arc::new(List {
            flh: Flh(AtomicU64::new(0)),
            links: Links((0..n).map(|_| Link(AtomicU32::new(0))).collect()),
            n,
            shift: if n % 2 == 0 {
                STEP_SHIFT - 1
            } else {
                STEP_SHIFT
            },
        })
    }

    /// Pops, retrying collisions; None when empty. Goes through
    /// `pop_or_new_memory` as the allocator does, then takes a never-used
    /// slot that starts new memory with the plain `pop`, as the allocator
    /// does when it finds no freed slot elsewhere.
    fn pop(&self) -> Option<u32> {
        loop {
            match free_list::pop_or_new_memory(&self.flh, &self.links, self.n, self.shift) {
                Pop::Slot { slot, .. } => return Some(slot),
                Pop::Empty => return None,
                Pop::Collision { .. } => thread::yield_now(),
                Pop::NewMemory => match free_list::pop(&self.flh, &self.links, self.n) {
                    Pop::Slot { slot, .. } => return Some(slot),
                    Pop::Empty => return None,
                    Pop::Collision { .. } => thread::yield_now(),
                    Pop::NewMemory => unreachable!("plain pop never reports new memory"),
                },
            }
        }
    }

    fn push(&self, slot: u32) {
        // SAFETY: the caller owns `slot`.
        unsafe { free_list::push(&self.flh, &self.links.0[slot as usize], slot) }
    }

    /// Drains the list single-threadedly.
    fn drain(&self) -> Vec<u32> {
        std::iter::from_fn(|| self.pop()).collect()
    }
}

/// Every slot is either held by exactly one owner or in the list, once.
fn check_conservation(list: &List, held: Vec<Vec<u32>>) {
    let mut all = HashSet::new();
    for s in held.into_iter().flatten().chain(list.drain()) {
        assert!(all.insert(s), "slot {s} handed out twice");
    }
    assert_eq!(all.len(), list.n as usize, "a slot was lost: {all:?}");
}

/// Runs `f` under loom with a preemption bound of 3 and prints how many
/// interleavings were explored.
fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = runs.clone();
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(move || {
        // Plain std atomic: bookkeeping outside the model.
        counter.fetch_add(1, Ordering::Relaxed);
        f()
    });
    println!(
        "loom explored {} interleavings",
        runs.load(Ordering::Relaxed)
    );
}

#[test]
#[cfg_attr(smalloc_no_push_counter, should_panic)]
fn two_threads_pop_and_push_on_one_slab() {
    model(|| {
        let list = List::new(3);
        let l2 = list.clone();
        let t = thread::spawn(move || {
            let a = l2.pop().unwrap();
            l2.push(a);
            let b = l2.pop().unwrap();
            vec![b]
        });
        let x = list.pop().unwrap();
        let y = list.pop();
        list.push(x);
        let mine: Vec<u32> = y.into_iter().collect();
        let theirs = t.join().unwrap();
        check_conservation(&list, vec![mine, theirs]);
    });
}

#[test]
fn three_threads_mixing_pops_and_pushes() {
    model(|| {
        let list = List::new(4);
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let l = list.clone();
                thread::spawn(move || {
                    let a = l.pop();
                    if let Some(a) = a {
                        l.push(a);
                    }
                    l.pop().into_iter().collect::<Vec<_>>()
                })
            })
            .collect();
        let mine = list.pop().into_iter().collect();
        let mut held = vec![mine];
        for h in hs {
            held.push(h.join().unwrap());
        }
        check_conservation(&list, held);
    });
}

/// The ABA sequence: the list is A -> B -> C (all previously freed, so their
/// links are real). Thread 1 pops (it may be preempted between reading head
/// A with next B and its compare-and-swap); thread 2 pops A, pops B and
/// pushes A back. Without the push counter thread 1's CAS would succeed and
/// install B, which thread 2 owns: B handed out twice.
#[test]
#[cfg_attr(smalloc_no_push_counter, should_panic)]
fn aba_is_prevented_by_the_push_counter() {
    model(|| {
        let list = List::new(3);
        // Make A=0 -> B=1 -> C=2 a list of used slots.
        let all = list.drain();
        for &s in all.iter().rev() {
            list.push(s);
        }
        let l1 = list.clone();
        let t1 = thread::spawn(move || l1.pop().into_iter().collect::<Vec<_>>());
        let a = list.pop().unwrap();
        let b = list.pop();
        list.push(a);
        let t1_held = t1.join().unwrap();
        check_conservation(&list, vec![t1_held, b.into_iter().collect()]);
    });
}

/// Failover across slabs: two lists (slabs); a thread finding its own slab
/// empty takes from the other, while another thread frees into both.
#[test]
fn failover_across_slabs() {
    model(|| {
        let slabs = [List::new(1), List::new(2)];
        let s0 = slabs[0].clone();
        let s1 = slabs[1].clone();
        // Empty slab 0 up front.
        let only = s0.pop().unwrap();
        let t = thread::spawn(move || {
            // Thread on slab 0: empty, fail over to slab 1.
            let got = s0.pop().or_else(|| s1.pop());
            (got, s0, s1)
        });
        // Meanwhile free slab 0's slot back.
        slabs[0].push(only);
        let (got, s0, s1) = t.join().unwrap();
        let got = got.expect("slab 1 had slots");
        // `got` came from slab 0 or slab 1; account per slab.
        let (mut h0, mut h1) = (vec![], vec![]);
        let from_0 = s0.drain();
        if from_0.is_empty() {
            h0.push(got)
        } else {
            h1.push(got)
        }
        let mut all0: HashSet<u32> = from_0.into_iter().collect();
        for s in h0 {
            assert!(all0.insert(s));
        }
        assert_eq!(all0.len(), 1);
        check_conservation(&s1, vec![h1]);
    });
}
