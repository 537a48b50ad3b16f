//! Long-running stress test, in the spirit of mimalloc's `test-stress`:
//! `--threads` threads allocate blocks of mixed sizes (16 B to a few MiB),
//! keep some, free some, reallocate some, and swap others through a shared
//! transfer array, so that many blocks are freed by a thread other than the
//! one that allocated them (often after that thread has exited). Threads
//! live for one round (`--round-ms`) and are then replaced by new ones,
//! which exercises every thread's first allocation and slab assignment.
//!
//! Every block carries its size, alignment, tag and allocating thread in a
//! 16-byte header and a fill pattern derived from its tag in the rest; the
//! whole block is verified (sparsely above 64 KiB) before every free and
//! across every reallocation. Any difference aborts the run.
//!
//! smalloc is the global allocator here, so the harness's own vectors and
//! thread stacks' bookkeeping run on it too.
//!
//! ```text
//! cargo run --release -p smalloc --example stress -- \
//!     --threads 32 --seconds 600 --seed 1
//! ```

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use devutils::{Rng, check, check_sparse, fill, fill_sparse};
use smalloc::Smalloc;

#[global_allocator]
static A: Smalloc = Smalloc::new();

/// Header size: every block is at least this large and this aligned.
const HEADER: usize = 16;
/// Blocks up to this size are filled and checked in full.
const FULL: usize = 64 * 1024;
/// Blocks each thread keeps at most.
const MAX_LOCAL: usize = 1000;
/// Slots of the transfer array.
const TRANSFERS: usize = 1000;

static TRANSFER: [AtomicPtr<u8>; TRANSFERS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; TRANSFERS];

/// Operation counters, summed over all threads.
#[derive(Default)]
struct Counters {
    allocs: AtomicU64,
    frees: AtomicU64,
    foreign_frees: AtomicU64,
    reallocs: AtomicU64,
    transfers: AtomicU64,
    bytes: AtomicU64,
}

static COUNT: Counters = Counters {
    allocs: AtomicU64::new(0),
    frees: AtomicU64::new(0),
    foreign_frees: AtomicU64::new(0),
    reallocs: AtomicU64::new(0),
    transfers: AtomicU64::new(0),
    bytes: AtomicU64::new(0),
};

/// Thread-local counts, added to [`COUNT`] when the thread ends.
#[derive(Default)]
struct Local {
    allocs: u64,
    frees: u64,
    foreign_frees: u64,
    reallocs: u64,
    transfers: u64,
    bytes: u64,
}

impl Local {
    fn flush(&self) {
        COUNT.allocs.fetch_add(self.allocs, Ordering::Relaxed);
        COUNT.frees.fetch_add(self.frees, Ordering::Relaxed);
        COUNT
            .foreign_frees
            .fetch_add(self.foreign_frees, Ordering::Relaxed);
        COUNT.reallocs.fetch_add(self.reallocs, Ordering::Relaxed);
        COUNT.transfers.fetch_add(self.transfers, Ordering::Relaxed);
        COUNT.bytes.fetch_add(self.bytes, Ordering::Relaxed);
    }
}

/// Size of a new block: mostly small, sometimes medium, rarely MiBs.
fn random_size(rng: &mut Rng) -> usize {
    match rng.below(1000) {
        0..=899 => rng.log_size(HEADER, 1024),
        900..=989 => rng.log_size(1024, 64 * 1024),
        990..=998 => rng.log_size(64 * 1024, 1 << 20),
        _ => rng.log_size(1 << 20, 8 << 20),
    }
}

fn random_align(rng: &mut Rng) -> usize {
    match rng.below(100) {
        0..=94 => HEADER,
        95..=98 => 64,
        _ => 4096,
    }
}

/// The header: size and log2 of the alignment in the first word, the tag
/// (allocating thread << 40 | a counter) in the second.
fn write_header(p: *mut u8, l: Layout, tag: u64) {
    let word = (l.size() as u64) | (u64::from(l.align().trailing_zeros()) << 48);
    // SAFETY: blocks are at least 16 bytes and 16-aligned.
    unsafe {
        p.cast::<u64>().write(word);
        p.cast::<u64>().add(1).write(tag);
    }
}

/// Reads a block's header: its layout and tag.
fn read_header(p: *mut u8) -> (Layout, u64) {
    // SAFETY: blocks are at least 16 bytes and 16-aligned.
    let (word, tag) = unsafe { (p.cast::<u64>().read(), p.cast::<u64>().add(1).read()) };
    let size = (word & ((1 << 48) - 1)) as usize;
    let align = 1usize << ((word >> 48) & 0xff);
    let l = Layout::from_size_align(size, align).expect("corrupted header");
    (l, tag)
}

/// The tag of a block whose first word may no longer match its layout
/// (right after a realloc).
fn tag_of(p: *mut u8) -> u64 {
    // SAFETY: blocks are at least 16 bytes and 16-aligned.
    unsafe { p.cast::<u64>().add(1).read() }
}

/// Fills the body of a block.
fn fill_body(p: *mut u8, size: usize, tag: u64) {
    // SAFETY: the block holds `size` bytes.
    unsafe {
        if size <= FULL {
            fill(p.add(HEADER), size - HEADER, tag)
        } else {
            fill_sparse(p.add(HEADER), size - HEADER, tag)
        }
    }
}

/// Verifies the body of a block of `size` bytes, up to `upto` bytes.
fn check_body(p: *mut u8, size: usize, upto: usize, tag: u64) {
    let len = upto.min(size) - HEADER;
    // SAFETY: the block holds at least `upto` bytes.
    let r = unsafe {
        if size <= FULL {
            check(p.add(HEADER), len, tag)
        } else if upto >= size {
            check_sparse(p.add(HEADER), len, tag)
        } else {
            // A shrunk sparse block: the first 64 bytes are in every sample.
            check(p.add(HEADER), len.min(64), tag)
        }
    };
    if let Err(off) = r {
        panic!(
            "block {p:p} (size {size}, tag {tag:#x}) corrupted at offset {}",
            off + HEADER
        );
    }
}

struct Worker {
    id: u64,
    rng: Rng,
    local: Vec<*mut u8>,
    next_tag: u64,
    n: Local,
}

impl Worker {
    fn alloc(&mut self) -> *mut u8 {
        let l = Layout::from_size_align(random_size(&mut self.rng), random_align(&mut self.rng))
            .unwrap();
        // SAFETY: the size is at least 16.
        let p = unsafe { A.alloc(l) };
        assert!(!p.is_null(), "{l:?} failed");
        assert_eq!(p.addr() % l.align(), 0, "{l:?} misaligned at {p:p}");
        self.next_tag += 1;
        let tag = (self.id << 40) | self.next_tag;
        write_header(p, l, tag);
        fill_body(p, l.size(), tag);
        self.n.allocs += 1;
        self.n.bytes += l.size() as u64;
        p
    }

    fn free(&mut self, p: *mut u8) {
        let (l, tag) = read_header(p);
        check_body(p, l.size(), l.size(), tag);
        if tag >> 40 != self.id {
            self.n.foreign_frees += 1;
        }
        // SAFETY: the block is ours, allocated with `l`.
        unsafe { A.dealloc(p, l) };
        self.n.frees += 1;
    }

    fn realloc(&mut self, p: *mut u8) -> *mut u8 {
        let (l, tag) = read_header(p);
        let new_size = random_size(&mut self.rng);
        // SAFETY: the block is ours, allocated with `l`; `new_size >= 16`.
        let q = unsafe { A.realloc(p, l, new_size) };
        assert!(!q.is_null(), "realloc {l:?} to {new_size} failed");
        assert_eq!(q.addr() % l.align(), 0, "realloc lost the alignment");
        let kept_tag = tag_of(q);
        assert_eq!(kept_tag, tag, "realloc lost the header");
        check_body(q, l.size(), new_size, tag);
        self.next_tag += 1;
        let tag = (self.id << 40) | self.next_tag;
        let nl = Layout::from_size_align(new_size, l.align()).unwrap();
        write_header(q, nl, tag);
        fill_body(q, new_size, tag);
        self.n.reallocs += 1;
        self.n.bytes += new_size as u64;
        q
    }

    /// One operation.
    fn step(&mut self) {
        match self.rng.below(100) {
            0..=44 => {
                let p = self.alloc();
                self.local.push(p);
                if self.local.len() > MAX_LOCAL {
                    let i = self.rng.below(self.local.len() as u64) as usize;
                    let q = self.local.swap_remove(i);
                    self.free(q);
                }
            }
            45..=79 => {
                if !self.local.is_empty() {
                    let i = self.rng.below(self.local.len() as u64) as usize;
                    let q = self.local.swap_remove(i);
                    self.free(q);
                }
            }
            80..=87 => {
                if !self.local.is_empty() {
                    let i = self.rng.below(self.local.len() as u64) as usize;
                    self.local[i] = self.realloc(self.local[i]);
                }
            }
            _ => {
                // Swap a block (ours or a new one) into the transfer array;
                // whatever was there is now ours, usually from another thread.
                let p = match self.local.pop() {
                    Some(p) if self.rng.chance(1, 2) => p,
                    Some(p) => {
                        self.local.push(p);
                        self.alloc()
                    }
                    None => self.alloc(),
                };
                let slot = &TRANSFER[self.rng.below(TRANSFERS as u64) as usize];
                // AcqRel: the block's contents travel with it.
                let q = slot.swap(p, Ordering::AcqRel);
                self.n.transfers += 1;
                if !q.is_null() {
                    if self.rng.chance(1, 2) {
                        self.free(q);
                    } else {
                        self.local.push(q);
                    }
                }
            }
        }
    }
}

fn run_thread(id: u64, seed: u64, deadline: Instant) {
    let mut w = Worker {
        id,
        rng: Rng::new(seed ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
        local: Vec::new(),
        next_tag: 0,
        n: Local::default(),
    };
    let mut i = 0u64;
    loop {
        w.step();
        i += 1;
        if i % 256 == 0 && Instant::now() >= deadline {
            break;
        }
    }
    // Leave some blocks behind in the transfer array for later threads;
    // free the rest here.
    while let Some(p) = w.local.pop() {
        if w.rng.chance(1, 8) {
            let slot = &TRANSFER[w.rng.below(TRANSFERS as u64) as usize];
            let q = slot.swap(p, Ordering::AcqRel);
            if !q.is_null() {
                w.free(q);
            }
        } else {
            w.free(p);
        }
    }
    w.n.flush();
}

/// Peak resident set size in KiB (VmHWM).
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

struct Args {
    threads: usize,
    seconds: f64,
    seed: u64,
    round_ms: u64,
}

fn parse_args() -> Args {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut a = Args {
        threads: 2 * cores,
        seconds: 10.0,
        seed: 1,
        round_ms: 2000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--threads" => a.threads = value().parse().expect("--threads N"),
            "--seconds" => a.seconds = value().parse().expect("--seconds S"),
            "--seed" => a.seed = value().parse().expect("--seed X"),
            "--round-ms" => a.round_ms = value().parse().expect("--round-ms M"),
            _ => {
                eprintln!(
                    "usage: stress [--threads N] [--seconds S] [--seed X] [--round-ms M]\n\
                     defaults: 2 x cores threads, 10 s, seed 1, 2000 ms rounds"
                );
                std::process::exit(2);
            }
        }
    }
    a
}

fn main() {
    let args = parse_args();
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(args.seconds);
    let mut rounds = 0u64;
    let mut next_id = 0u64;
    while Instant::now() < end {
        let deadline = (Instant::now() + Duration::from_millis(args.round_ms)).min(end);
        let handles: Vec<_> = (0..args.threads)
            .map(|_| {
                next_id += 1;
                let (id, seed) = (next_id, args.seed);
                std::thread::spawn(move || run_thread(id, seed, deadline))
            })
            .collect();
        for h in handles {
            h.join().expect("a worker failed");
        }
        rounds += 1;
    }
    // Free what is left in the transfer array, checking it.
    let mut w = Worker {
        id: 0,
        rng: Rng::new(args.seed),
        local: Vec::new(),
        next_tag: 0,
        n: Local::default(),
    };
    for slot in &TRANSFER {
        let p = slot.swap(std::ptr::null_mut(), Ordering::Acquire);
        if !p.is_null() {
            w.free(p);
        }
    }
    w.n.flush();
    let secs = start.elapsed().as_secs_f64();
    let c = &COUNT;
    let (allocs, frees, reallocs) = (
        c.allocs.load(Ordering::Relaxed),
        c.frees.load(Ordering::Relaxed),
        c.reallocs.load(Ordering::Relaxed),
    );
    assert_eq!(allocs, frees, "blocks lost");
    println!(
        "stress ok: threads={} seconds={secs:.1} seed={} rounds={rounds} threads_run={next_id} \
         ops={} allocs={allocs} frees={frees} foreign_frees={} reallocs={reallocs} \
         transfers={} bytes_allocated={} peak_rss_mib={:.1}",
        args.threads,
        args.seed,
        allocs + frees + reallocs,
        c.foreign_frees.load(Ordering::Relaxed),
        c.transfers.load(Ordering::Relaxed),
        c.bytes.load(Ordering::Relaxed),
        peak_rss_kib() as f64 / 1024.0,
    );
}
