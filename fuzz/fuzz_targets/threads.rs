//! Fuzzes smalloc's `GlobalAlloc` from several threads driven by one input:
//! the fuzzer's own thread and three workers (spawned once, kept across
//! inputs), each with its own home slab. The input is a sequence of
//! segments, each naming a thread and up to sixteen operations (alloc /
//! alloc_zeroed / dealloc / realloc, as in `global_alloc`, and rarely the
//! thread's exit); the threads run the segments one at a time, in the
//! input's order, handing the turn over through an atomic, so the
//! interleaving is the input's and the same on every run. Any thread may
//! free or reallocate any live block, so frees by a thread that does not own
//! the block's slab (the shared lists) are the common case. One model (the
//! shadow of `global_alloc`) serves all threads and checks every step:
//! alignment, no overlap, contents (sampled fill patterns) kept until free
//! and across realloc, zeroed memory, slot or mapping. At the end of an
//! input the fuzzer's thread frees what is left.
//!
//! A worker's exit (at most one per input) spawns its replacement, which
//! joins it (so the exit, which gives the slab back, is over) before the
//! turn moves on.
#![no_main]
#![deny(unsafe_op_in_unsafe_fn)]

use std::alloc::{GlobalAlloc, Layout};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread::{self, JoinHandle, Thread};

use libfuzzer_sys::fuzz_target;
use smalloc_core::Smalloc;
use smalloc_fuzz::{HUGE, Input, Live, check_home, check_zero, realloc_block};

static A: Smalloc = Smalloc::new();

/// Threads: the fuzzer's (0) and the workers.
const ACTORS: usize = 4;
/// No thread (the `next` of the last segment).
const NOBODY: u64 = 0xff;
/// The turn's segment index once the input is done (the fuzzer's thread's
/// turn again).
const END: u64 = u32::MAX as u64;
/// Times a waiting thread yields its CPU before it sleeps. Yielding rather
/// than spinning: on a machine with fewer free cores than threads a spinning
/// waiter delays the running thread (measured on 2 shared cores: 3,000
/// inputs in 14 s spinning while next, 3 s sleeping at once, under 1 s
/// yielding).
const YIELDS: u32 = 1000;

/// One operation, as decoded from the input; which block it takes is
/// decided when it runs.
#[derive(Clone, Copy, Debug)]
enum Op {
    Alloc {
        size: usize,
        align: usize,
        zeroed: bool,
    },
    Dealloc {
        pick: u8,
    },
    Realloc {
        pick: u8,
        new_size: usize,
    },
    /// The thread exits (workers only) once its segment is done.
    Exit,
}

/// A run of operations of one thread.
struct Segment {
    actor: usize,
    ops: Range<usize>,
}

/// What the running thread reads and writes (one thread at a time).
#[derive(Default)]
struct Model {
    live: Live,
    ops: Vec<Op>,
    segments: Vec<Segment>,
}

/// The threads and the turn.
struct Pool {
    model: Mutex<Model>,
    /// `segment << 16 | next actor << 8 | actor`: whose turn it is, and
    /// whose is next (woken early, so that it is ready).
    turn: AtomicU64,
    /// Each thread's handle (to wake it) and, for workers, its join handle.
    threads: Mutex<Vec<(Thread, Option<JoinHandle<()>>)>>,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    static STARTED: std::sync::Once = std::sync::Once::new();
    let pool = POOL.get_or_init(|| Pool {
        model: Mutex::new(Model::default()),
        turn: AtomicU64::new(END << 16 | NOBODY << 8),
        threads: Mutex::new(vec![(thread::current(), None)]),
    });
    STARTED.call_once(|| {
        for id in 1..ACTORS {
            let h = thread::spawn(move || worker(id));
            pool.threads
                .lock()
                .unwrap()
                .push((h.thread().clone(), Some(h)));
        }
    });
    pool
}

fn lock(m: &Mutex<Model>) -> MutexGuard<'_, Model> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Wakes thread `actor` (if it sleeps; else its next sleep returns at once).
fn wake(pool: &Pool, actor: u64) {
    if actor != NOBODY {
        pool.threads.lock().unwrap()[actor as usize].0.unpark();
    }
}

/// Waits for `me`'s turn: yields, then sleeps.
/// Returns the segment.
fn wait_turn(pool: &Pool, me: usize) -> u64 {
    let mut spins = 0;
    loop {
        // Acquire: the previous segment's writes (the model, the blocks).
        let t = pool.turn.load(Ordering::Acquire);
        if t & 0xff == me as u64 {
            return t >> 16;
        }
        if spins < YIELDS {
            spins += 1;
            thread::yield_now();
        } else {
            thread::park();
            spins = 0;
        }
    }
}

/// Hands the turn from segment `seg` to the next one (or back to the
/// fuzzer's thread at the end) and wakes its thread and the one after.
fn pass_turn(pool: &Pool, seg: u64) {
    let next = seg + 1;
    let (actor, after) = {
        let m = lock(&pool.model);
        let actor_of = |i: u64| {
            m.segments
                .get(i as usize)
                .map_or(NOBODY, |s| s.actor as u64)
        };
        (actor_of(next), actor_of(next + 1))
    };
    let turn = if actor == NOBODY {
        END << 16 | NOBODY << 8
    } else {
        next << 16 | after << 8 | actor
    };
    // Release: our segment's writes, for the next thread.
    pool.turn.store(turn, Ordering::Release);
    wake(pool, if actor == NOBODY { 0 } else { actor });
    wake(pool, after);
}

/// A worker: runs its segments until one ends with its exit.
fn worker(me: usize) {
    let pool = pool();
    loop {
        let seg = wait_turn(pool, me);
        if run_segment(pool, seg) {
            // Replaced by a thread that passes the turn once we are gone.
            let mut threads = pool.threads.lock().unwrap();
            let old = threads[me].1.take().unwrap();
            let new = thread::spawn(move || {
                old.join().unwrap();
                pass_turn(pool, seg);
                worker(me);
            });
            threads[me] = (new.thread().clone(), Some(new));
            return;
        }
        pass_turn(pool, seg);
    }
}

/// Runs segment `seg` on this thread; returns whether the thread is to
/// exit.
fn run_segment(pool: &Pool, seg: u64) -> bool {
    let mut m = lock(&pool.model);
    let Model {
        live,
        ops,
        segments,
    } = &mut *m;
    let mut exit = false;
    for &op in &ops[segments[seg as usize].ops.clone()] {
        match op {
            Op::Alloc {
                size,
                align,
                zeroed,
            } => {
                let Ok(l) = Layout::from_size_align(size, align) else {
                    continue;
                };
                if !live.has_room(size, align) {
                    continue;
                }
                // SAFETY: the layout has a non-zero size.
                let p = unsafe {
                    if zeroed {
                        A.alloc_zeroed(l)
                    } else {
                        A.alloc(l)
                    }
                };
                assert!(!p.is_null(), "{l:?} failed");
                if zeroed {
                    // SAFETY: a live block of `size` bytes.
                    unsafe { check_zero(p, size) };
                }
                // SAFETY: `p` is a live block of `A` with layout `l`.
                unsafe { check_home(&A, p, l) };
                // SAFETY: just handed out.
                unsafe { live.add(p, size, align) };
            }
            Op::Dealloc { pick } => {
                if let Some((p, b)) = live.take(pick) {
                    let l = Layout::from_size_align(b.size, b.align).unwrap();
                    // SAFETY: `p` is live with layout `l`, and now ours.
                    unsafe { A.dealloc(p, l) };
                }
            }
            Op::Realloc { pick, new_size } => {
                // SAFETY: every block of `live` is a live block of `A` with
                // its recorded layout; `decode` takes `new_size` from
                // `input.size(false)`, never zero.
                unsafe { realloc_block(&A, live, pick, new_size) };
            }
            Op::Exit => exit = true,
        }
    }
    exit
}

/// Decodes the input into segments of at most sixteen operations, merging
/// consecutive segments of one thread. A segment's first byte names the
/// thread (low two bits) and the number of operations (next four).
fn decode(data: &[u8], m: &mut Model) {
    let mut input = Input::new(data);
    let mut exits = 0;
    'input: while let Some(h) = input.byte() {
        let actor = h as usize % ACTORS;
        let start = m.ops.len();
        for _ in 0..=(h >> 2) & 15 {
            let Some(op) = input.byte() else { break 'input };
            let op = match op % 8 {
                0..=2 => {
                    let (Some(size), Some(align)) = (input.size(false), input.align()) else {
                        break 'input;
                    };
                    let align = if size >= HUGE { align.min(4096) } else { align };
                    Op::Alloc {
                        size,
                        align,
                        zeroed: op % 8 == 2,
                    }
                }
                3..=5 => {
                    let Some(pick) = input.byte() else {
                        break 'input;
                    };
                    Op::Dealloc { pick }
                }
                // One byte in 256 is an exit.
                _ if op == 0xff => {
                    if actor == 0 || exits > 0 {
                        continue;
                    }
                    exits += 1;
                    m.ops.push(Op::Exit);
                    break;
                }
                _ => {
                    let (Some(pick), Some(new_size)) = (input.byte(), input.size(false)) else {
                        break 'input;
                    };
                    Op::Realloc { pick, new_size }
                }
            };
            m.ops.push(op);
        }
        let end = m.ops.len();
        match m.segments.last_mut() {
            Some(last) if last.actor == actor && !matches!(m.ops[start - 1], Op::Exit) => {
                last.ops.end = end
            }
            _ if start < end => m.segments.push(Segment {
                actor,
                ops: start..end,
            }),
            _ => {}
        }
    }
}

fn run(data: &[u8]) {
    let pool = pool();
    {
        let mut m = lock(&pool.model);
        m.live = Live::new(u64::from(data.len() as u32));
        m.ops.clear();
        m.segments.clear();
        decode(data, &mut m);
        if m.segments.is_empty() {
            return;
        }
        let (first, second) = (
            m.segments[0].actor as u64,
            m.segments.get(1).map_or(NOBODY, |s| s.actor as u64),
        );
        drop(m);
        // Release: the model, for the first thread.
        pool.turn.store(second << 8 | first, Ordering::Release);
        wake(pool, first);
        wake(pool, second);
    }
    loop {
        let seg = wait_turn(pool, 0);
        if seg == END {
            break;
        }
        run_segment(pool, seg);
        pass_turn(pool, seg);
    }
    let mut m = lock(&pool.model);
    for (p, b) in m.live.drain() {
        // SAFETY: every live block is freed once, with its layout.
        unsafe { A.dealloc(p, Layout::from_size_align(b.size, b.align).unwrap()) };
    }
}

fuzz_target!(|data: &[u8]| run(data));
