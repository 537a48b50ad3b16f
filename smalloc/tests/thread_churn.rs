//! Threads created and destroyed continuously while allocating: smalloc's
//! resident memory must reach a plateau, not grow with the number of
//! threads ever created. smalloc is the global allocator here, so the
//! threads' stacks bookkeeping, channels and vectors all go through it.
//!
//! `SMALLOC_CHURN_SECS` sets the duration (default 12 s; the verification
//! script runs it for minutes). The RSS curve is printed (`--nocapture`).

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use devutils::{Rng, check_sparse, fill_sparse, rss_bytes};
use smalloc::Smalloc;

#[global_allocator]
static A: Smalloc = Smalloc::new();

/// A block handed from one generation of threads to the next.
struct Parcel(Vec<u8>, u64);

fn worker(seed: u64, inbox: Vec<Parcel>) -> Vec<Parcel> {
    let mut rng = Rng::new(seed);
    for Parcel(v, tag) in inbox {
        // SAFETY: `v` holds `v.len()` initialized bytes.
        assert_eq!(unsafe { check_sparse(v.as_ptr(), v.len(), tag) }, Ok(()));
    }
    let mut live: Vec<Parcel> = Vec::new();
    for i in 0..2_000u64 {
        let size = rng.log_size(8, 64 * 1024);
        let mut v = vec![0u8; size];
        let tag = seed ^ i;
        // SAFETY: `v` has `size` bytes.
        unsafe { fill_sparse(v.as_mut_ptr(), size, tag) };
        live.push(Parcel(v, tag));
        if live.len() > 200 {
            let k = rng.below(live.len() as u64) as usize;
            live.swap_remove(k);
        }
    }
    // Hand a few blocks to the next generation (freed on another thread).
    live.truncate(16);
    live
}

#[test]
#[cfg_attr(miri, ignore = "reads /proc; a wall-clock workload of seconds")]
fn rss_plateaus_under_thread_churn() {
    let secs: u64 = std::env::var("SMALLOC_CHURN_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let start = Instant::now();
    let mut parcels: Vec<Parcel> = Vec::new();
    let mut samples: Vec<(f64, usize, u64)> = Vec::new();
    let mut threads_made = 0u64;
    let mut next_sample = Duration::ZERO;
    while start.elapsed() < Duration::from_secs(secs) {
        // A generation of 8 threads (4x the cores here), each given some of
        // the previous generation's blocks.
        let (tx, rx) = mpsc::channel();
        let mut inboxes: Vec<Vec<Parcel>> = (0..8).map(|_| Vec::new()).collect();
        for (i, p) in parcels.drain(..).enumerate() {
            inboxes[i % 8].push(p);
        }
        let hs: Vec<_> = inboxes
            .into_iter()
            .map(|inbox| {
                threads_made += 1;
                let tx = tx.clone();
                let seed = threads_made;
                thread::spawn(move || tx.send(worker(seed, inbox)).unwrap())
            })
            .collect();
        drop(tx);
        for h in hs {
            h.join().unwrap();
        }
        parcels = rx.iter().flatten().collect();
        if start.elapsed() >= next_sample {
            samples.push((start.elapsed().as_secs_f64(), rss_bytes(), threads_made));
            next_sample += Duration::from_millis(500);
        }
    }
    println!("seconds   RSS MiB   threads created");
    for &(t, rss, n) in &samples {
        println!("{t:7.1}   {:7.1}   {n:>15}", rss as f64 / (1 << 20) as f64);
    }
    assert!(
        threads_made >= 64,
        "too few threads to judge: {threads_made}"
    );
    // Plateau: the peak over the last two thirds of the run is within 1.5x
    // (plus 16 MiB of slack) of the peak over the first third.
    let third = samples.len() / 3;
    let early = samples[..third.max(1)].iter().map(|s| s.1).max().unwrap();
    let late = samples[third..].iter().map(|s| s.1).max().unwrap();
    assert!(
        late <= early + early / 2 + (16 << 20),
        "RSS kept growing: early peak {early} B, late peak {late} B after {threads_made} threads"
    );
}
