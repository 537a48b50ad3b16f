//! Do the 4- and 8-byte size classes pay? Allocates many 8-byte objects in
//! 8-byte slots and in 16-byte slots (what a 16-byte minimum would give),
//! interleaved in child processes, and reports allocation time, the time of
//! a pass reading them all, and the resident memory they take.
//!
//! `cargo run --release -p smalloc --example small_slots`

use std::alloc::{GlobalAlloc, Layout};
use std::process::Command;
use std::time::Instant;

static A: smalloc::Smalloc = smalloc::Smalloc::new();

const N: usize = 4_000_000;
const ROUNDS: usize = 7;

fn rss_kib() -> usize {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    s.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<usize>()
        .unwrap()
        * 4
}

/// One measurement in this process: slots of `slot` bytes holding u64s.
fn child(slot: usize) {
    let l = Layout::from_size_align(slot, 8).unwrap();
    let mut v: Vec<*mut u64> = Vec::with_capacity(N);
    let r0 = rss_kib();
    let t = Instant::now();
    for i in 0..N {
        // SAFETY: a valid non-zero layout; the slot holds a u64.
        unsafe {
            let p = A.alloc(l) as *mut u64;
            p.write(i as u64);
            v.push(p);
        }
    }
    let alloc_ns = t.elapsed().as_nanos() as f64 / N as f64;
    let t = Instant::now();
    let mut sum = 0u64;
    for _ in 0..5 {
        // SAFETY: every pointer is a live slot holding a u64.
        sum = v
            .iter()
            .fold(sum, |s, &p| s.wrapping_add(unsafe { p.read() }));
    }
    let read_ns = t.elapsed().as_nanos() as f64 / (5 * N) as f64;
    let kib = rss_kib() - r0;
    assert_eq!(sum, 5 * (N as u64 * (N as u64 - 1) / 2));
    println!("{alloc_ns:.2} {read_ns:.3} {kib}");
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    if let Some(slot) = std::env::args().nth(1) {
        return child(slot.parse().unwrap());
    }
    let exe = std::env::current_exe().unwrap();
    let mut res: [Vec<[f64; 3]>; 2] = [vec![], vec![]];
    for _ in 0..ROUNDS {
        for (k, slot) in [8, 16].into_iter().enumerate() {
            let out = Command::new(&exe).arg(slot.to_string()).output().unwrap();
            let s = String::from_utf8(out.stdout).unwrap();
            let f: Vec<f64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();
            res[k].push([f[0], f[1], f[2]]);
        }
    }
    println!("{N} u64 objects, {ROUNDS} interleaved rounds, medians:");
    println!("slot   alloc+write ns/op   read ns/op   slots' RSS MiB");
    let mut m = [[0.0; 3]; 2];
    for (k, slot) in [8, 16].into_iter().enumerate() {
        for c in 0..3 {
            m[k][c] = median(&mut res[k].iter().map(|r| r[c]).collect::<Vec<_>>());
        }
        let mib = (m[k][2] - (N * 8 / 1024) as f64) / 1024.0;
        println!(
            "{slot:>3} B   {:>17.2}   {:>10.3}   {:>14.1}",
            m[k][0], m[k][1], mib
        );
    }
    println!(
        "8-byte slots vs 16-byte: alloc {:.2}x, read {:.2}x",
        m[0][0] / m[1][0],
        m[0][1] / m[1][1]
    );
}
