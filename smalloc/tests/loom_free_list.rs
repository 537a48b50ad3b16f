//! Model checking of the real free-list code with loom: every interleaving
//! of a few threads, up to loom's preemption bound, of
//! `smalloc::free_list` (the shared list: push, pop, take_all),
//! `smalloc::private_list` (the owner's list: push, pop) and
//! `smalloc::ownership` (claim, release), and of the purge's protocols: an
//! owner handing its private list over whole, a sweep resetting a region
//! whose every slot it holds while others claim never-used slots, a sweep
//! giving a span back (`smalloc::spans`) while others pop and take spans;
//! and an owner holding another slab's slot (`held`): sent home or handed
//! out again while that slab's owner takes its shared list, inherited with
//! the holder's slab by its next owner; a guest cell (`guest`, the real
//! operations) emptied by a trim while its thread holds and takes a slot
//! or a chain of them, or empties it at its end; and the hint of which
//! slabs may hold freed large slots (`large_freed`, the real operations)
//! cleared by a search that found nothing while a slot is freed or an
//! owner leaves its private list behind.
//!
//! RUSTFLAGS="--cfg loom" cargo test -p smalloc --release --test loom_free_list
//!
//! Non-vacuity:
//! * built with `--cfg smalloc_no_push_counter` (the push counter never
//!   moves), loom finds the ABA bug in the tests marked for it (the span
//!   test too: the sweep puts the rest of the list back while others pop);
//! * built with `--cfg smalloc_no_ownership_check` (every claim succeeds),
//!   loom finds two threads on one private list (or one held cell) in the
//!   tests marked for it;
//! * built with `--cfg smalloc_blind_chain_push` (a chain goes onto the
//!   shared list whether or not it is still empty), loom finds a slot lost
//!   in the hand-over test; with `--cfg smalloc_blind_reset` (a sweep sets
//!   the tail to 0 without first making claims fail), a slot handed out
//!   twice in the reset test; with `--cfg smalloc_blind_span_take` (a span
//!   taken by a load and a store), a slot handed out twice in the span
//!   test; with `--cfg smalloc_blind_guest_empty` (a guest cell emptied by
//!   a load and a store), a slot handed out twice in the first guest test
//!   and one lost in the guest chain's; with `--cfg
//!   smalloc_blind_hint_clear` (a search clears the hint without looking
//!   again), a freed slot without its hint in both hint tests.

#![cfg(loom)]

use std::collections::HashSet;

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize};
use loom::thread;
use smalloc::free_list::{self, FlhCell, LinkCell, LinkStore, Pop};
use smalloc::guest;
use smalloc::large_freed;
use smalloc::nudge::{self, EntryCell};
use smalloc::ownership::{self, SetCell};
use smalloc::private_list::{self, HeadCell};
use smalloc::spans::{self, SpanWord};
use std::sync::atomic::Ordering;

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

/// Link `k` is element `k - 1`.
struct Links(Vec<Link>);

impl LinkStore for Links {
    unsafe fn load_link(&self, link: u32) -> u32 {
        self.0[link as usize - 1].0.load(Ordering::Relaxed)
    }
}

struct Head(AtomicU32);

impl HeadCell for Head {
    fn get(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
    fn set(&self, link: u32) {
        self.0.store(link, Ordering::Relaxed)
    }
}

struct Set(AtomicUsize);

impl SetCell for Set {
    fn fetch_or(&self, bits: usize, order: Ordering) -> usize {
        self.0.fetch_or(bits, order)
    }
    fn fetch_and(&self, bits: usize, order: Ordering) -> usize {
        self.0.fetch_and(bits, order)
    }
}

struct Entry(AtomicUsize);

impl EntryCell for Entry {
    fn load(&self, order: Ordering) -> usize {
        self.0.load(order)
    }
    fn store(&self, v: usize, order: Ordering) {
        self.0.store(v, order)
    }
    fn compare_exchange(
        &self,
        c: usize,
        n: usize,
        s: Ordering,
        f: Ordering,
    ) -> Result<usize, usize> {
        self.0.compare_exchange(c, n, s, f)
    }
}

/// One slab with one size class of `n` slots (links 1..=n): its shared
/// list, its private list and its bit in an owned set.
struct Slab {
    owned: Set,
    flh: Flh,
    head: Head,
    links: Links,
    n: u32,
}

impl Slab {
    /// A slab whose slots are all on the shared list (freed by others).
    fn new(n: u32) -> Arc<Slab> {
        let s = Slab {
            owned: Set(AtomicUsize::new(0)),
            flh: Flh(AtomicU64::new(0)),
            head: Head(AtomicU32::new(0)),
            links: Links((0..n).map(|_| Link(AtomicU32::new(0))).collect()),
            n,
        };
        for l in (1..=n).rev() {
            s.push_shared(l);
        }
        Arc::new(s)
    }

    fn claim(&self) -> bool {
        ownership::claim_in(&self.owned, 0)
    }

    fn release(&self) {
        ownership::release_in(&self.owned, 0)
    }

    /// Claims, waiting for the current owner to release.
    fn claim_wait(&self) {
        while !self.claim() {
            thread::yield_now();
        }
    }

    fn push_shared(&self, l: u32) {
        // SAFETY: the caller owns slot `l`.
        unsafe { free_list::push(&self.flh, &self.links.0[l as usize - 1], l) };
    }

    /// The owner hands its private list to the shared list whole (as
    /// `purge::give` does): the private list emptied first, then one
    /// compare-and-swap onto an empty list (the private list restored if it
    /// fails), else a walk to its last slot and a push of the chain.
    fn give(&self) {
        let first = self.head.get();
        if first == 0 {
            return;
        }
        let w = self.flh.load(Ordering::Relaxed);
        if w as u32 == 0 {
            self.head.set(0);
            // SAFETY: the owner's chain, ending with link 0.
            if unsafe { free_list::push_chain_if_empty(&self.flh, w, first) } {
                return;
            }
            self.head.set(first);
        }
        let mut last = first;
        // SAFETY: the owner's chain.
        while let next @ 1.. = unsafe { self.links.load_link(last) } {
            last = next;
        }
        self.head.set(0);
        // SAFETY: the chain is ours; `last` is its last slot.
        unsafe { free_list::push(&self.flh, &self.links.0[last as usize - 1], first) };
    }

    /// A pop by a thread that does not own the slab, retrying collisions.
    fn pop_shared(&self) -> Option<u32> {
        loop {
            match free_list::pop(&self.flh, &self.links) {
                Pop::Slot(l) => return Some(l),
                Pop::Empty => return None,
                Pop::Collision { .. } => thread::yield_now(),
            }
        }
    }

    /// The owner's allocation: its private list, else the shared list
    /// taken whole (as `cold_path::owner_take` does).
    fn alloc_owned(&self) -> Option<u32> {
        // SAFETY: the caller owns the slab.
        if let Some(l) = unsafe { private_list::pop(&self.head, &self.links) } {
            return Some(l);
        }
        let first = free_list::take_all(&self.flh);
        if first == 0 {
            return None;
        }
        // SAFETY: we own the chain we took.
        let next = unsafe { self.links.load_link(first) };
        self.head.set(next);
        Some(first)
    }

    /// The owner's free.
    fn free_owned(&self, l: u32) {
        // SAFETY: the caller owns the slab and slot `l`.
        unsafe { private_list::push(&self.head, &self.links.0[l as usize - 1], l) }
    }

    /// A non-owner taking one slot of the private list of a slab nobody
    /// owns, under a short claim (as `cold_path::take_any` does).
    fn borrow_private(&self) -> Option<u32> {
        if !self.claim() {
            return None;
        }
        // SAFETY: we own the slab until the release.
        let got = unsafe { private_list::pop(&self.head, &self.links) };
        self.release();
        got
    }

    /// Everything left on both lists, single-threadedly.
    fn drain(&self) -> Vec<u32> {
        let mut all = Vec::new();
        self.claim_wait();
        while let Some(l) = self.alloc_owned() {
            all.push(l);
        }
        self.release();
        all
    }
}

/// Every slot is either held by exactly one thread or on a list, once.
fn check_conservation(slab: &Slab, held: Vec<Vec<u32>>) {
    let mut all = HashSet::new();
    for s in held.into_iter().flatten().chain(slab.drain()) {
        assert!(all.insert(s), "slot {s} handed out twice");
    }
    assert_eq!(all.len(), slab.n as usize, "a slot was lost: {all:?}");
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
#[cfg_attr(smalloc_no_push_counter, should_panic(expected = "handed out twice"))]
fn two_threads_pop_and_push_on_the_shared_list() {
    model(|| {
        let slab = Slab::new(3);
        let s2 = slab.clone();
        let t = thread::spawn(move || {
            let a = s2.pop_shared().unwrap();
            s2.push_shared(a);
            let b = s2.pop_shared().unwrap();
            vec![b]
        });
        let x = slab.pop_shared().unwrap();
        let y = slab.pop_shared();
        slab.push_shared(x);
        let mine: Vec<u32> = y.into_iter().collect();
        let theirs = t.join().unwrap();
        check_conservation(&slab, vec![mine, theirs]);
    });
}

/// The ABA sequence: the list is A -> B -> C. Thread 1 pops (it may be
/// preempted between reading head A with next B and its compare-and-swap);
/// thread 2 pops A, pops B and pushes A back. Without the push counter
/// thread 1's CAS would succeed and install B, which thread 2 owns: B
/// handed out twice.
#[test]
#[cfg_attr(smalloc_no_push_counter, should_panic(expected = "handed out twice"))]
fn aba_is_prevented_by_the_push_counter() {
    model(|| {
        let slab = Slab::new(3);
        let s1 = slab.clone();
        let t1 = thread::spawn(move || s1.pop_shared().into_iter().collect::<Vec<_>>());
        let a = slab.pop_shared().unwrap();
        let b = slab.pop_shared();
        slab.push_shared(a);
        let t1_held = t1.join().unwrap();
        check_conservation(&slab, vec![t1_held, b.into_iter().collect()]);
    });
}

/// The owner allocates and frees on its private list and takes the shared
/// list whole, while another thread frees slots onto the shared list and a
/// third pops from it (a thread that owns no slab).
#[test]
fn owner_takes_the_shared_list_while_others_push_and_pop() {
    model(|| {
        let slab = Slab::new(3);
        assert!(slab.claim());
        // The remote thread holds one slot, taken before the race.
        let remote = slab.pop_shared().unwrap();
        let (s1, s2) = (slab.clone(), slab.clone());
        let freer = thread::spawn(move || {
            s1.push_shared(remote);
            Vec::new()
        });
        let popper = thread::spawn(move || s2.pop_shared().into_iter().collect::<Vec<_>>());
        let a = slab.alloc_owned();
        let b = slab.alloc_owned();
        if let Some(a) = a {
            slab.free_owned(a);
        }
        let c = slab.alloc_owned();
        slab.release();
        let mine: Vec<u32> = b.into_iter().chain(c).collect();
        let held = vec![mine, freer.join().unwrap(), popper.join().unwrap()];
        check_conservation(&slab, held);
    });
}

/// The owner frees onto its private list and exits (releases) while another
/// thread frees onto the shared list; the next owner claims the slab and
/// inherits both lists.
#[test]
#[cfg_attr(
    smalloc_no_ownership_check,
    should_panic(expected = "handed out twice")
)]
fn the_next_owner_inherits_the_private_list() {
    model(|| {
        let slab = Slab::new(3);
        // The first owner holds two slots, the remote thread one.
        assert!(slab.claim());
        let a = slab.alloc_owned().unwrap();
        let b = slab.alloc_owned().unwrap();
        let remote = slab.alloc_owned().unwrap();
        let (s1, s2) = (slab.clone(), slab.clone());
        let first = thread::spawn(move || {
            s1.free_owned(a);
            s1.free_owned(b);
            s1.release();
        });
        let freer = thread::spawn(move || s2.push_shared(remote));
        // The next owner: waits for the claim, then takes two slots.
        slab.claim_wait();
        let x = slab.alloc_owned();
        let y = slab.alloc_owned();
        slab.release();
        first.join().unwrap();
        freer.join().unwrap();
        check_conservation(&slab, vec![x.into_iter().chain(y).collect()]);
    });
}

/// A thread that owns no slab takes a slot of the private list of a slab
/// whose owner just left, under a short claim, while a new owner claims the
/// slab and allocates.
#[test]
#[cfg_attr(
    smalloc_no_ownership_check,
    should_panic(expected = "handed out twice")
)]
fn a_non_owner_borrows_from_an_unowned_slab() {
    model(|| {
        let slab = Slab::new(2);
        // Both slots on the private list, nobody owns the slab.
        assert!(slab.claim());
        let a = slab.alloc_owned().unwrap();
        let b = slab.alloc_owned().unwrap();
        slab.free_owned(a);
        slab.free_owned(b);
        slab.release();
        let s1 = slab.clone();
        let borrower = thread::spawn(move || s1.borrow_private().into_iter().collect::<Vec<_>>());
        let mine = if slab.claim() {
            let got = slab.alloc_owned();
            slab.release();
            got.into_iter().collect()
        } else {
            Vec::new()
        };
        let theirs = borrower.join().unwrap();
        check_conservation(&slab, vec![mine, theirs]);
    });
}

/// The owner hands its private list (two slots) over to the shared list
/// while another thread frees a slot onto it and a third pops from it.
#[test]
#[cfg_attr(smalloc_blind_chain_push, should_panic(expected = "a slot was lost"))]
fn the_owner_hands_its_private_list_over_while_others_push_and_pop() {
    model(|| {
        let slab = Slab::new(3);
        assert!(slab.claim());
        let a = slab.alloc_owned().unwrap();
        let b = slab.alloc_owned().unwrap();
        let remote = slab.alloc_owned().unwrap();
        slab.free_owned(a);
        slab.free_owned(b);
        let (s1, s2) = (slab.clone(), slab.clone());
        let freer = thread::spawn(move || {
            s1.push_shared(remote);
            Vec::new()
        });
        let popper = thread::spawn(move || s2.pop_shared().into_iter().collect::<Vec<_>>());
        slab.give();
        slab.release();
        let held = vec![freer.join().unwrap(), popper.join().unwrap()];
        check_conservation(&slab, held);
    });
}

/// A sweep resets a region (as `purge::sweep_list` and `purge::reset` do)
/// while a thread pops from its shared list and another claims never-used
/// slots from its tail. Slots 1 and 2 were handed out and freed (the tail is
/// 2); slot 3 was never used. Every slot must end up exactly once: held by
/// a thread, on the list, or at or above the tail (never-used).
#[test]
#[cfg_attr(smalloc_blind_reset, should_panic(expected = "slot"))]
fn a_sweep_resets_a_region_while_others_pop_and_claim() {
    const N: u32 = 3;
    model(|| {
        let slab = Slab::new(2);
        let tail = Arc::new(AtomicU32::new(2));
        let (s1, t1) = (slab.clone(), tail.clone());
        let sweeper = thread::spawn(move || {
            let first = free_list::take_all(&s1.flh);
            if first == 0 {
                return;
            }
            let (mut n, mut last) = (1, first);
            // SAFETY: the chain is ours.
            while let next @ 1.. = unsafe { s1.links.load_link(last) } {
                (n, last) = (n + 1, next);
            }
            let t = t1.load(Ordering::Relaxed);
            // While the tail says "used up", claims fail.
            if n == t
                && (cfg!(smalloc_blind_reset)
                    || t1
                        .compare_exchange(t, N, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok())
            {
                // The pages given back; the slots never-used again.
                t1.store(0, Ordering::Release);
            } else {
                // SAFETY: the chain is ours; `last` is its last slot.
                unsafe { free_list::push(&s1.flh, &s1.links.0[last as usize - 1], first) };
            }
        });
        let (s2, t2) = (slab.clone(), tail.clone());
        let claimer = thread::spawn(move || {
            let mut got = Vec::new();
            for _ in 0..2 {
                let t = t2.load(Ordering::Relaxed);
                if t < N
                    && t2
                        .compare_exchange(t, t + 1, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                {
                    got.push(t + 1);
                }
            }
            let _ = &s2;
            got
        });
        let popped: Vec<u32> = slab.pop_shared().into_iter().collect();
        sweeper.join().unwrap();
        let claimed = claimer.join().unwrap();
        let mut all = HashSet::new();
        let never_used = tail.load(Ordering::Relaxed) + 1..=N;
        for s in popped
            .into_iter()
            .chain(claimed)
            .chain(slab.drain())
            .chain(never_used)
        {
            assert!(all.insert(s), "slot {s} handed out twice");
        }
        assert_eq!(all.len(), N as usize, "a slot was lost: {all:?}");
    });
}

struct Span(AtomicU64);

impl SpanWord for Span {
    fn load(&self, order: Ordering) -> u64 {
        self.0.load(order)
    }
    fn store(&self, v: u64, order: Ordering) {
        self.0.store(v, order)
    }
    fn fetch_or(&self, bits: u64, order: Ordering) -> u64 {
        self.0.fetch_or(bits, order)
    }
    fn fetch_and(&self, bits: u64, order: Ordering) -> u64 {
        self.0.fetch_and(bits, order)
    }
}

/// A sweep gives a span back (as `purge::sweep_list` and
/// `spans::give_back` do): it takes the shared list whole, takes the
/// span's slots (2 and 3) off the chain, puts the rest back and sets the
/// span's bit; meanwhile two threads each take a span, else pop a slot.
/// Every slot must end up exactly once: held by a thread, on the list, or
/// in a span still given back.
#[test]
#[cfg_attr(
    any(smalloc_blind_span_take, smalloc_no_push_counter),
    should_panic(expected = "slot")
)]
fn a_sweep_gives_a_span_back_while_others_pop_and_take_spans() {
    const N: u32 = 3;
    model(|| {
        let slab = Slab::new(N);
        let map = Arc::new([Span(AtomicU64::new(0))]);
        let (s1, m1) = (slab.clone(), map.clone());
        let sweeper = thread::spawn(move || {
            let first = free_list::take_all(&s1.flh);
            let mut chain = Vec::new();
            let mut link = first;
            while link != 0 {
                chain.push(link);
                // SAFETY: the chain is ours.
                link = unsafe { s1.links.load_link(link) };
            }
            if chain.len() as u32 != N {
                // Not every slot is free: the span is not whole.
                if first != 0 {
                    let last = *chain.last().unwrap();
                    // SAFETY: the chain is ours; `last` is its last slot.
                    unsafe { free_list::push(&s1.flh, &s1.links.0[last as usize - 1], first) };
                }
                return;
            }
            // The span's slots off the chain (the pages given back); the
            // rest put back; then the span made takeable.
            // SAFETY: slot 1 is ours; it ends the rebuilt chain.
            unsafe { s1.links.0[0].store_link(0) };
            s1.push_shared(1);
            spans::put(&*m1, 0);
        });
        let takers: Vec<_> = (0..2)
            .map(|_| {
                let (s, m) = (slab.clone(), map.clone());
                thread::spawn(move || match spans::take_run(&*m, 2) {
                    Some((0, 1)) => vec![2, 3],
                    Some(r) => panic!("spans {r:?}"),
                    None => s.pop_shared().into_iter().collect(),
                })
            })
            .collect();
        sweeper.join().unwrap();
        let mut held: Vec<Vec<u32>> = takers.into_iter().map(|t| t.join().unwrap()).collect();
        if spans::take_run(&*map, 1).is_some() {
            held.push(vec![2, 3]);
        }
        check_conservation(&slab, held);
    });
}

/// The purging thread nudges an owner (writes its thread-local alloc word)
/// while the owner gives its slab up and its thread ends, which frees its
/// words: no nudge may touch them after the owner's `unregister_in`
/// returns. The words are a loom cell, so an access that does not happen
/// before their release is a data race loom reports. Built with `--cfg
/// smalloc_blind_unregister` (the owner does not wait for a nudge under
/// way) loom must find one.
#[test]
#[cfg_attr(smalloc_blind_unregister, should_panic)]
fn a_nudge_never_touches_the_words_of_an_owner_that_gave_its_slab_up() {
    model(|| {
        // The words' address, registered (8-aligned, like a real one).
        const WORDS: usize = 0x1000;
        let entry = Arc::new(Entry(AtomicUsize::new(WORDS)));
        let words = Arc::new(loom::cell::UnsafeCell::new(1usize));
        let (e, w) = (entry.clone(), words.clone());
        let purger = thread::spawn(move || {
            nudge::nudge_in(&*e, |at| {
                assert_eq!(at, WORDS);
                // SAFETY: the registration is held: the owner waits.
                w.with_mut(|p| unsafe { *p = 0 });
            });
        });
        // The owner: gives the slab up, then its words go away.
        nudge::unregister_in(&*entry, thread::yield_now);
        // SAFETY: no nudge touches the words any more.
        words.with_mut(|p| unsafe { *p = usize::MAX });
        purger.join().unwrap();
        assert_eq!(entry.0.load(Ordering::Relaxed), 0);
    });
}

/// The held cell of one size class in the private block of a slab other
/// than the slots' (`smalloc/src/held.rs`): whoever owns that slab (its
/// bit in `owned`) reads and writes it with plain loads and stores. The
/// cell names the last slot held, and each held slot's link cell the one
/// held before it (the chain's word, over the slot's link).
struct Holder {
    owned: Set,
    cell: AtomicU64,
}

impl Holder {
    fn new() -> Arc<Holder> {
        Arc::new(Holder {
            owned: Set(AtomicUsize::new(0)),
            cell: AtomicU64::new(0),
        })
    }

    fn claim(&self) -> bool {
        ownership::claim_in(&self.owned, 0)
    }

    fn release(&self) {
        ownership::release_in(&self.owned, 0)
    }

    /// The owner frees slot `l` of `home` with a credit for its class: it
    /// holds it (as `held::hold`), chained before those it holds already.
    fn hold(&self, home: &Slab, l: u32) {
        // Relaxed: the owner's cell and held slots (see held.rs).
        let before = self.cell.load(Ordering::Relaxed) as u32;
        home.links.0[l as usize - 1]
            .0
            .store(before, Ordering::Relaxed);
        self.cell.store(u64::from(l), Ordering::Relaxed);
    }

    /// The owner takes the last slot held (as `held::take`).
    fn take(&self, home: &Slab) -> Option<u32> {
        // Relaxed: the owner's cell and held slots.
        let l = self.cell.load(Ordering::Relaxed) as u32;
        if l == 0 {
            return None;
        }
        // SAFETY: a held slot, ours.
        let next = unsafe { home.links.load_link(l) };
        self.cell.store(u64::from(next), Ordering::Relaxed);
        Some(l)
    }

    /// The owner takes every slot held (as `held::send_home` before its
    /// pushes).
    fn take_all(&self, home: &Slab) -> Vec<u32> {
        let mut all = Vec::new();
        while let Some(l) = self.take(home) {
            all.push(l);
        }
        all
    }
}

/// An owner frees both slots of another slab: it holds the first (it had a
/// credit) and, if `both`, the second too (a chain), else sends the second
/// home (no credit left); then hands what it holds out again or, if
/// `ends`, sends it home as at its end; meanwhile the slots' own slab's
/// owner, whose private list is empty, allocates (taking its shared list
/// whole) and frees.
fn hold_against_the_home_owner(ends: bool, both: bool) {
    model(move || {
        let home = Slab::new(2);
        assert!(home.claim());
        let a = home.alloc_owned().unwrap();
        let b = home.alloc_owned().unwrap();
        home.release();
        let holder = Holder::new();
        assert!(holder.claim());
        let (h, s1) = (holder.clone(), home.clone());
        let t = thread::spawn(move || {
            h.hold(&s1, a);
            if both {
                h.hold(&s1, b);
            } else {
                s1.push_shared(b);
            }
            let mut mine = h.take_all(&s1);
            if ends {
                for l in mine.drain(..) {
                    s1.push_shared(l);
                }
            }
            h.release();
            mine
        });
        let s2 = home.clone();
        let owner = thread::spawn(move || {
            s2.claim_wait();
            let x = s2.alloc_owned();
            if let Some(x) = x {
                s2.free_owned(x);
            }
            let y = s2.alloc_owned();
            s2.release();
            y
        });
        let theirs = t.join().unwrap();
        let y = owner.join().unwrap();
        check_conservation(&home, vec![theirs, y.into_iter().collect()]);
    });
}

#[test]
fn a_held_slot_handed_out_again_while_its_slab_owner_allocates() {
    hold_against_the_home_owner(false, false);
}

#[test]
fn a_held_slot_sent_home_at_its_holder_end_while_its_slab_owner_allocates() {
    hold_against_the_home_owner(true, false);
}

#[test]
fn a_chain_of_held_slots_handed_out_again_while_their_slab_owner_allocates() {
    hold_against_the_home_owner(false, true);
}

#[test]
fn a_chain_of_held_slots_sent_home_at_its_holder_end_while_their_slab_owner_allocates() {
    hold_against_the_home_owner(true, true);
}

/// The holder's slab changes hands with two slots held: the first holder
/// leaves without sending them home (it moved to another slab; its tables
/// stay with the slab); whoever owns the slab next, a new thread (taking
/// one) or a sweep of the unowned slab (taking all, to send them home),
/// each after its claim, takes from the chain. Each slot is taken exactly
/// once.
#[test]
#[cfg_attr(
    smalloc_no_ownership_check,
    should_panic(expected = "handed out twice")
)]
fn the_next_owner_of_a_holders_slab_inherits_its_held_slot() {
    model(|| {
        let home = Slab::new(2);
        assert!(home.claim());
        let a = home.alloc_owned().unwrap();
        let b = home.alloc_owned().unwrap();
        home.release();
        let holder = Holder::new();
        assert!(holder.claim());
        holder.hold(&home, a);
        holder.hold(&home, b);
        let h = holder.clone();
        let first = thread::spawn(move || h.release());
        let (h2, s2) = (holder.clone(), home.clone());
        let next = thread::spawn(move || {
            if !h2.claim() {
                return Vec::new();
            }
            let got = h2.take(&s2);
            h2.release();
            got.into_iter().collect()
        });
        let sweep = if holder.claim() {
            let got = holder.take_all(&home);
            holder.release();
            got
        } else {
            Vec::new()
        };
        first.join().unwrap();
        let theirs = next.join().unwrap();
        // Whatever is still held: the slab's last owner's.
        assert!(holder.claim());
        let left = holder.take_all(&home);
        check_conservation(&home, vec![sweep, theirs, left]);
    });
}

/// A guest cell (`smalloc/src/guest.rs`, the real operations): its thread
/// changes it with compare-and-swaps, any thread empties it with a swap.
struct GuestCell(AtomicU64);

impl guest::CellWord for GuestCell {
    fn load(&self, order: Ordering) -> u64 {
        self.0.load(order)
    }
    fn compare_exchange(&self, c: u64, n: u64, s: Ordering, f: Ordering) -> Result<u64, u64> {
        self.0.compare_exchange(c, n, s, f)
    }
    fn swap(&self, v: u64, order: Ordering) -> u64 {
        self.0.swap(v, order)
    }
    fn store(&self, v: u64, order: Ordering) {
        self.0.store(v, order)
    }
}

/// A slot's address in a guest cell: its link, shifted clear of the
/// cell's mark bit.
fn cell_addr(l: u32) -> usize {
    (l as usize) << 1
}

/// The link of a slot's address in a guest cell.
fn cell_link(addr: usize) -> u32 {
    (addr >> 1) as u32
}

/// Bits of a packed chain word (in a slot's 32-bit link) below its length.
const PACKED_LEN_SHIFT: u32 = 16;

/// A guest's chain words, in the slots' links (as the real ones overlay
/// the slots' first words), packed: the address below bit 16, the length
/// above.
impl guest::ChainWords for Slab {
    fn load(&self, addr: usize) -> usize {
        // SAFETY: the model's links are atomic cells, read at any time.
        let w = unsafe { self.links.load_link(cell_link(addr)) } as usize;
        (w & ((1 << PACKED_LEN_SHIFT) - 1)) | (w >> PACKED_LEN_SHIFT) << guest::LEN_SHIFT
    }
    fn store(&self, addr: usize, word: usize) {
        let packed =
            (word & ((1 << PACKED_LEN_SHIFT) - 1)) | (word >> guest::LEN_SHIFT) << PACKED_LEN_SHIFT;
        self.links.0[cell_link(addr) as usize - 1]
            .0
            .store(packed as u32, Ordering::Relaxed);
    }
}

/// A slab of two slots (both handed out: returned) and an empty guest cell.
fn guest_scene() -> (Arc<Slab>, u32, u32, Arc<GuestCell>) {
    let home = Slab::new(2);
    assert!(home.claim());
    let a = home.alloc_owned().unwrap();
    let b = home.alloc_owned().unwrap();
    home.release();
    (home, a, b, Arc::new(GuestCell(AtomicU64::new(0))))
}

/// Empties the cell (a trim, or the guest at its end) and sends what it
/// held home.
fn empty_guest_cell(cell: &GuestCell, home: &Slab) {
    if let Some(c) = guest::empty_in(cell) {
        guest::for_each_in_chain(home, c, |x| home.push_shared(cell_link(x)));
    }
}

/// The guest's free of slot `l`, with a credit to chain if `chain`: held,
/// or sent home.
fn guest_free(cell: &GuestCell, home: &Slab, l: u32, chain: bool) {
    if guest::hold_in(cell, home, cell_addr(l), chain) == 0 {
        home.push_shared(l);
    }
}

/// A guest (a thread without a slab) frees both slots of a slab, holding
/// the first and, if `chain`, the second too (else it goes home: no
/// credit), and takes the last held back; meanwhile a trim empties its
/// cell from another thread, and the slab's owner allocates (taking its
/// shared list whole). Built with `--cfg smalloc_blind_guest_empty` (the
/// trim reads, then clears the cell) the guest takes a slot the trim sends
/// home or, with a chain, the trim clears a chain the guest lengthened
/// after the trim's read: a slot lost.
fn a_trim_against_a_guest_taking(chain: bool) {
    model(move || {
        let (home, a, b, cell) = guest_scene();
        let (c1, h1) = (cell.clone(), home.clone());
        let g = thread::spawn(move || {
            guest_free(&c1, &h1, a, chain);
            guest_free(&c1, &h1, b, chain);
            guest::take_in(&*c1, &*h1).map(cell_link)
        });
        let (c2, h2) = (cell.clone(), home.clone());
        let trim = thread::spawn(move || empty_guest_cell(&c2, &h2));
        let h3 = home.clone();
        let owner = thread::spawn(move || {
            h3.claim_wait();
            let y = h3.alloc_owned();
            h3.release();
            y
        });
        let mine = g.join().unwrap();
        trim.join().unwrap();
        let y = owner.join().unwrap();
        // What the guest still holds: its own.
        let mut left = Vec::new();
        if let Some(c) = guest::empty_in(&*cell) {
            guest::for_each_in_chain(&*home, c, |x| left.push(cell_link(x)));
        }
        check_conservation(
            &home,
            vec![mine.into_iter().collect(), y.into_iter().collect(), left],
        );
    });
}

#[test]
#[cfg_attr(smalloc_blind_guest_empty, should_panic(expected = "handed out twice"))]
fn a_trim_empties_a_guest_cell_while_the_guest_takes_its_slot() {
    a_trim_against_a_guest_taking(false);
}

#[test]
#[cfg_attr(smalloc_blind_guest_empty, should_panic(expected = "a slot was lost"))]
fn a_trim_empties_a_guest_chain_while_the_guest_takes_from_it() {
    a_trim_against_a_guest_taking(true);
}

/// A guest ends (its cell emptied as `guest::leave` does) while a trim
/// empties the same cell: each slot goes home once. Without `chain` it
/// hands out its held slot, frees it again (home: the slot just handed
/// out) and holds the other; with `chain` it holds both, hands out the last
/// and holds it again.
fn a_guest_ending_against_a_trim(chain: bool) {
    model(move || {
        let (home, a, b, cell) = guest_scene();
        let (c1, h1) = (cell.clone(), home.clone());
        let g = thread::spawn(move || {
            guest_free(&c1, &h1, a, chain);
            if chain {
                guest_free(&c1, &h1, b, chain);
            }
            if let Some(x) = guest::take_in(&*c1, &*h1) {
                guest_free(&c1, &h1, cell_link(x), chain);
            }
            if !chain {
                guest_free(&c1, &h1, b, chain);
            }
            empty_guest_cell(&c1, &h1);
        });
        let (c2, h2) = (cell.clone(), home.clone());
        let trim = thread::spawn(move || empty_guest_cell(&c2, &h2));
        g.join().unwrap();
        trim.join().unwrap();
        assert_eq!(
            cell.0.load(Ordering::Relaxed) & !1,
            0,
            "the cell holds nothing"
        );
        check_conservation(&home, vec![]);
    });
}

#[test]
#[cfg_attr(
    smalloc_blind_guest_empty,
    ignore = "two blind emptiers push one slot twice: a cycle the drain never leaves"
)]
fn a_guest_ends_while_a_trim_empties_its_cell() {
    a_guest_ending_against_a_trim(false);
}

#[test]
#[cfg_attr(
    smalloc_blind_guest_empty,
    ignore = "two blind emptiers push one slot twice: a cycle the drain never leaves"
)]
fn a_guest_ends_with_a_chain_while_a_trim_empties_its_cell() {
    a_guest_ending_against_a_trim(true);
}

/// A slab's bit in the hint of which slabs may hold freed large slots
/// (`smalloc::large_freed`, the real operations), bit 1 of its own word.
struct Hint(Set);

impl Hint {
    fn new() -> Arc<Hint> {
        Arc::new(Hint(Set(AtomicUsize::new(0))))
    }

    fn is_set(&self) -> bool {
        self.0.0.load(Ordering::Relaxed) & 1 != 0
    }

    /// A free onto the shared list, marking it if the list was empty (as
    /// `cold_path::dealloc_large_shared` does).
    fn free(&self, slab: &Slab, l: u32) {
        // SAFETY: the caller owns slot `l`.
        let p = unsafe { free_list::push(&slab.flh, &slab.links.0[l as usize - 1], l) };
        if p.onto_empty {
            large_freed::mark_in(&self.0, 1);
        }
    }

    /// The owner gives the slab up, marking it if its private list holds
    /// slots (as `home_slab::release_owned` does).
    fn leave(&self, slab: &Slab) {
        let head = slab.head.get();
        slab.release();
        if head != 0 {
            large_freed::mark_in(&self.0, 1);
        }
    }

    /// A search for a freed slot on the slab, as `cold_path::find_freed`'s
    /// for large slots when the bit is set: its shared list, its private
    /// list under a short claim if nobody owns it (marking it again if
    /// slots are left), else the clear and the second look.
    fn search(&self, slab: &Slab) -> Option<u32> {
        if !self.is_set() {
            return None;
        }
        if let Some(l) = slab.pop_shared() {
            return Some(l);
        }
        // Relaxed: a hint; the claim decides.
        if slab.owned.0.load(Ordering::Relaxed) & 1 == 0 && slab.claim() {
            // SAFETY: we own the slab until the release.
            let got = unsafe { private_list::pop(&slab.head, &slab.links) };
            self.leave(slab);
            if got.is_some() {
                return got;
            }
        }
        large_freed::found_none_in(&self.0, 1, &slab.flh, || {
            // Relaxed: as `large_freed::found_none`.
            slab.owned.0.load(Ordering::Relaxed) & 1 == 0 && slab.head.get() != 0
        });
        None
    }

    /// The invariant: a list a search may take from that holds a slot has
    /// the bit set.
    fn check(&self, slab: &Slab) {
        let shared = slab.flh.load(Ordering::Relaxed) as u32 != 0;
        let unowned_private = slab.owned.0.load(Ordering::Relaxed) & 1 == 0 && slab.head.get() != 0;
        assert!(
            !(shared || unowned_private) || self.is_set(),
            "a freed slot without its hint"
        );
    }
}

/// A slab of `n` slots, all handed out, and its hint clear.
fn hint_scene(n: u32) -> (Arc<Slab>, Vec<u32>, Arc<Hint>) {
    let slab = Slab::new(n);
    let slots = (0..n).map(|_| slab.pop_shared().unwrap()).collect();
    (slab, slots, Hint::new())
}

/// A slab of two slots, both handed out, and its hint clear: `other`, on
/// its own thread, gives the slots back (with the slab claimed for it first
/// if `owned`), while this thread searches the slab twice as if its bit were
/// set (it may be by then), taking what it finds. Afterwards the hint's
/// invariant holds and every slot is accounted for.
fn two_searches_against(owned: bool, other: fn(&Slab, &Hint, Vec<u32>)) {
    model(move || {
        let (slab, slots, hint) = hint_scene(2);
        if owned {
            assert!(slab.claim());
        }
        let (s1, h1) = (slab.clone(), hint.clone());
        let t = thread::spawn(move || other(&s1, &h1, slots));
        hint.0.0.fetch_or(1, Ordering::Relaxed);
        let mut got = Vec::new();
        for _ in 0..2 {
            got.extend(hint.search(&slab));
        }
        t.join().unwrap();
        hint.check(&slab);
        check_conservation(&slab, vec![got]);
    });
}

/// One thread frees two slots onto a slab's shared list while another
/// searches it twice. Built with `--cfg smalloc_blind_hint_clear` (no
/// second look after the clear) a search that found the list empty clears
/// the bit the first free just set.
#[test]
#[cfg_attr(
    smalloc_blind_hint_clear,
    should_panic(expected = "a freed slot without its hint")
)]
fn a_search_that_finds_nothing_never_hides_a_slot_freed_meanwhile() {
    two_searches_against(false, |slab, hint, slots| {
        for l in slots {
            hint.free(slab, l);
        }
    });
}

/// An owner frees two slots onto its private list and gives the slab up,
/// while another thread searches it twice (borrowing what it finds). Built
/// with `--cfg smalloc_blind_hint_clear` a search that found the slab
/// owned clears the bit the owner set as it left.
#[test]
#[cfg_attr(
    smalloc_blind_hint_clear,
    should_panic(expected = "a freed slot without its hint")
)]
fn a_search_that_finds_nothing_never_hides_what_an_owner_left() {
    two_searches_against(true, |slab, hint, slots| {
        for l in slots {
            slab.free_owned(l);
        }
        hint.leave(slab);
    });
}
