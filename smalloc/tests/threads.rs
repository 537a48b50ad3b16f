//! Multi-threaded stress: more threads than slabs, frees on other threads
//! than the allocating one, every block's contents verified, and a global
//! registry asserting that no slot is ever handed out twice.

use std::alloc::{GlobalAlloc, Layout};
use std::collections::HashSet;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;

use devutils::{Rng, check, fill};
use smalloc::Smalloc;
use smalloc::layout::THREAD_SLABS;

static A: Smalloc = Smalloc::new();

/// Workload sizes: Miri interprets every instruction, so it runs the same
/// thread counts with far fewer operations (and smaller blocks).
#[cfg(not(miri))]
mod scale {
    pub const MAX_SIZE: usize = 20_000;
    pub const ROUNDS: u64 = 3000;
    pub const HAMMER_ROUNDS: u64 = 20_000;
    pub const HANDOFFS: u64 = 100_000;
}
#[cfg(miri)]
mod scale {
    pub const MAX_SIZE: usize = 300;
    pub const ROUNDS: u64 = 5;
    pub const HAMMER_ROUNDS: u64 = 40;
    pub const HANDOFFS: u64 = 120;
}
use scale::*;

/// Addresses currently live: an insert that finds the address already
/// present is a slot handed out twice.
#[derive(Default)]
struct Registry(Mutex<HashSet<usize>>);

impl Registry {
    fn take(&self, p: *mut u8) {
        assert!(
            self.0.lock().unwrap().insert(p.addr()),
            "slot {p:p} handed out twice"
        );
    }
    fn give_back(&self, p: *mut u8) {
        assert!(
            self.0.lock().unwrap().remove(&p.addr()),
            "slot {p:p} freed but not live"
        );
    }
}

struct Block {
    p: *mut u8,
    size: usize,
    tag: u64,
}
// SAFETY: a Block is an owned allocation; moving it to another thread moves
// the ownership.
unsafe impl Send for Block {}

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

fn new_block(reg: &Registry, rng: &mut Rng, tag: u64) -> Block {
    let size = rng.log_size(1, MAX_SIZE);
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let p = unsafe { A.alloc(layout(size)) };
    assert!(!p.is_null());
    reg.take(p);
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { fill(p, size, tag) };
    Block { p, size, tag }
}

fn free_block(reg: &Registry, b: Block) {
    assert_eq!(
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        unsafe { check(b.p, b.size, b.tag) },
        Ok(()),
        "block {:p} corrupted",
        b.p
    );
    reg.give_back(b.p);
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { A.dealloc(b.p, layout(b.size)) };
}

/// Joins the workers, frees the blocks still waiting in their channels and
/// checks that no block is left live.
fn join_and_free_the_rest(reg: &Registry, handles: Vec<thread::JoinHandle<mpsc::Receiver<Block>>>) {
    // All joined first: a worker still running may send to any channel.
    let rxs: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for rx in rxs {
        while let Ok(b) = rx.try_recv() {
            free_block(reg, b);
        }
    }
    assert!(reg.0.lock().unwrap().is_empty());
}

#[test]
fn cross_thread_frees_with_more_threads_than_slabs() {
    let threads = 3 * THREAD_SLABS;
    let rounds = ROUNDS;
    let reg = Arc::new(Registry::default());
    // Thread i sends some of its blocks to thread i+1, which frees them.
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..threads).map(|_| mpsc::channel::<Block>()).unzip();
    let mut handles = Vec::new();
    for (i, rx) in rxs.into_iter().enumerate() {
        let tx = txs[(i + 1) % threads].clone();
        let reg = reg.clone();
        handles.push(thread::spawn(move || {
            let mut rng = Rng::new(i as u64);
            let mut mine: Vec<Block> = Vec::new();
            for r in 0..rounds {
                let tag = ((i as u64) << 32) | r;
                let b = new_block(&reg, &mut rng, tag);
                if rng.chance(1, 3) {
                    tx.send(b).unwrap();
                } else {
                    mine.push(b);
                }
                if mine.len() > 50 || rng.chance(1, 4) {
                    let k = rng.below(mine.len().max(1) as u64) as usize;
                    if k < mine.len() {
                        free_block(&reg, mine.swap_remove(k));
                    }
                }
                while let Ok(b) = rx.try_recv() {
                    free_block(&reg, b);
                }
            }
            drop(tx);
            for b in mine {
                free_block(&reg, b);
            }
            rx
        }));
    }
    drop(txs);
    join_and_free_the_rest(&reg, handles);
}

/// 64 threads (four times the slabs) send each block to a random thread,
/// which frees it: no slot handed out twice, every block intact, and
/// afterwards the statistics show nothing live (but what memcheck's
/// quarantine holds, with the valgrind feature).
#[test]
#[cfg_attr(miri, ignore = "64 threads")]
fn sixty_four_threads_free_each_others_blocks() {
    // No purge: a sweep holds a list it takes while it counts it, and the
    // statistics below must see a quiet heap.
    smalloc::set_purge_delay(std::time::Duration::ZERO);
    let threads = 64;
    let reg = Arc::new(Registry::default());
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..threads).map(|_| mpsc::channel::<Block>()).unzip();
    let handles: Vec<_> = rxs
        .into_iter()
        .enumerate()
        .map(|(i, rx)| {
            let txs = txs.clone();
            let reg = reg.clone();
            thread::spawn(move || {
                let mut rng = Rng::new(1000 + i as u64);
                let mut mine: Vec<Block> = Vec::new();
                for r in 0..ROUNDS {
                    let b = new_block(&reg, &mut rng, (i as u64) << 32 | r);
                    if rng.chance(1, 2) {
                        let to = rng.below(threads as u64) as usize;
                        txs[to].send(b).unwrap();
                    } else {
                        mine.push(b);
                    }
                    if mine.len() > 30 {
                        let k = rng.below(mine.len() as u64) as usize;
                        free_block(&reg, mine.swap_remove(k));
                    }
                    while let Ok(b) = rx.try_recv() {
                        free_block(&reg, b);
                    }
                }
                for b in mine {
                    free_block(&reg, b);
                }
                rx
            })
        })
        .collect();
    drop(txs);
    join_and_free_the_rest(&reg, handles);
    let s = smalloc::stats::snapshot();
    // (Under the valgrind feature, memcheck's quarantine holds freed blocks.)
    if !cfg!(feature = "valgrind") {
        assert_eq!(s.live_slots(), 0, "{:?}", s.classes);
    }
    assert_eq!(s.walks_cut, 0);
}

#[test]
fn hammering_one_size_class_never_duplicates_a_slot() {
    // Tiny slots, tight loops: the most CAS collisions and failovers.
    let threads = 2 * THREAD_SLABS + 3;
    let reg = Arc::new(Registry::default());
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let reg = reg.clone();
            thread::spawn(move || {
                let l = Layout::from_size_align(16, 16).unwrap();
                let mut held = Vec::with_capacity(64);
                for r in 0..HAMMER_ROUNDS {
                    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
                    let p = unsafe { A.alloc(l) };
                    assert!(!p.is_null());
                    reg.take(p);
                    let tag = ((i as u64) << 40) | r;
                    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
                    unsafe { (p as *mut u64).write(tag) };
                    held.push((p, tag));
                    if held.len() == 64 || r % 3 == 0 {
                        while let Some((p, tag)) = held.pop() {
                            // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
                            assert_eq!(unsafe { (p as *mut u64).read() }, tag);
                            reg.give_back(p);
                            // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
                            unsafe { A.dealloc(p, l) };
                        }
                    }
                }
                for (p, _) in held {
                    reg.give_back(p);
                    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
                    unsafe { A.dealloc(p, l) };
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn producer_consumer_frees_everything_on_the_other_thread() {
    let (tx, rx) = mpsc::sync_channel::<Block>(1024);
    let reg = Arc::new(Registry::default());
    let r2 = reg.clone();
    let consumer = thread::spawn(move || {
        let mut n = 0;
        for b in rx {
            free_block(&r2, b);
            n += 1;
        }
        n
    });
    let mut rng = Rng::new(99);
    for t in 0..HANDOFFS {
        tx.send(new_block(&reg, &mut rng, t)).unwrap();
    }
    drop(tx);
    assert_eq!(consumer.join().unwrap(), HANDOFFS);
}
