//! hellomalloc: a small program that runs on smalloc.
//!
//! It installs smalloc as the global allocator, exercises the usual std
//! collections (Vec, String, HashMap, Box) from one thread and then from
//! several threads that hand memory to each other, verifies every result,
//! and prints a short report. It exits with status 1 if any check fails.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::mpsc;
use std::thread;

#[global_allocator]
static ALLOC: smalloc::Smalloc = smalloc::Smalloc::new();

/// Number of producer threads in the cross-thread exercise.
const PRODUCERS: usize = 4;
/// Batches each producer sends.
const BATCHES_PER_PRODUCER: usize = 250;
/// Strings in one batch.
const STRINGS_PER_BATCH: usize = 40;

/// Collects the outcome of every check.
#[derive(Default)]
struct Checks {
    passed: usize,
    failed: Vec<String>,
}

impl Checks {
    fn check(&mut self, ok: bool, what: impl Into<String>) {
        if ok {
            self.passed += 1;
        } else {
            let what = what.into();
            eprintln!("FAILED: {what}");
            self.failed.push(what);
        }
    }
}

/// Pushes many integers one at a time so the buffer grows repeatedly.
fn exercise_vec(checks: &mut Checks) {
    const N: u64 = 200_000;
    let mut v: Vec<u64> = Vec::new();
    let mut moves = 0usize;
    let mut last = v.as_ptr();
    for i in 1..=N {
        v.push(i);
        if v.as_ptr() != last {
            moves += 1;
            last = v.as_ptr();
        }
    }
    let sum: u64 = v.iter().sum();
    checks.check(sum == N * (N + 1) / 2, "vec: sum of 1..=N");
    checks.check(
        v.iter().enumerate().all(|(i, &x)| x == i as u64 + 1),
        "vec: every element in place after growth",
    );
    let owned = smalloc::raw::owns(v.as_ptr().cast());
    checks.check(owned, "vec: buffer lies in smalloc's reservation");
    println!(
        "vec: pushed {N} u64s, buffer moved {moves} times, capacity {}, sum {sum}",
        v.capacity()
    );
    let addr = v.as_ptr().addr();
    let slot = if owned {
        format!(
            " (slab {}, size class {}: {}-byte slot)",
            smalloc::layout::slab_of(addr),
            smalloc::layout::sc_of(addr),
            smalloc::raw::slot_size(v.as_ptr().cast()),
        )
    } else {
        String::new()
    };
    println!("vec: buffer at {addr:#x}, smalloc::raw::owns = {owned}{slot}");

    // Shrinking and regrowing must keep the contents.
    v.truncate(1000);
    v.shrink_to_fit();
    v.extend(1001..=5000);
    checks.check(
        v.len() == 5000 && v.iter().enumerate().all(|(i, &x)| x == i as u64 + 1),
        "vec: contents survive shrink_to_fit and regrowth",
    );
}

/// Builds strings by formatting and by appending.
fn exercise_string(checks: &mut Checks) {
    const LINES: usize = 10_000;
    let mut s = String::new();
    for i in 0..LINES {
        writeln!(s, "line {i:05}: {}", i * i).expect("writing to a String cannot fail");
    }
    let lines: Vec<&str> = s.lines().collect();
    checks.check(lines.len() == LINES, "string: line count");
    checks.check(
        lines
            .iter()
            .enumerate()
            .all(|(i, l)| *l == format!("line {i:05}: {}", i * i)),
        "string: every formatted line reads back",
    );
    let words: Vec<String> = (0..1000).map(|i| format!("w{i}")).collect();
    let joined = words.join(",");
    let split: Vec<&str> = joined.split(',').collect();
    checks.check(split == words, "string: join then split round-trips");
    let upper = joined.to_uppercase();
    checks.check(
        upper.len() == joined.len() && upper.starts_with("W0,W1,"),
        "string: to_uppercase",
    );
    println!(
        "string: formatted {LINES} lines ({} bytes), joined {} words ({} bytes)",
        s.len(),
        words.len(),
        joined.len()
    );
}

/// Inserts, looks up and removes many entries.
fn exercise_hashmap(checks: &mut Checks) {
    const N: u64 = 100_000;
    let mut m: HashMap<u64, String> = HashMap::new();
    for k in 0..N {
        m.insert(k, format!("value-{k}"));
    }
    checks.check(m.len() == N as usize, "hashmap: size after inserts");
    let found = (0..N)
        .filter(|k| m.get(k).is_some_and(|v| *v == format!("value-{k}")))
        .count();
    checks.check(
        found == N as usize,
        "hashmap: every key found with its value",
    );
    let mut removed = 0u64;
    for k in (0..N).step_by(2) {
        if m.remove(&k).is_some() {
            removed += 1;
        }
    }
    checks.check(removed == N / 2, "hashmap: every even key removed once");
    checks.check(
        (0..N).all(|k| m.contains_key(&k) == (k % 2 == 1)),
        "hashmap: only odd keys remain",
    );
    m.shrink_to_fit();
    checks.check(
        m.get(&(N - 1)).map(String::as_str) == Some(&*format!("value-{}", N - 1)),
        "hashmap: lookups after shrink_to_fit",
    );
    println!(
        "hashmap: inserted {N}, found {found}, removed {removed}, {} remain",
        m.len()
    );
}

/// A singly linked list of boxes, plus boxed slices and trait objects.
fn exercise_box(checks: &mut Checks) {
    struct Node {
        value: u32,
        next: Option<Box<Node>>,
    }
    const N: u32 = 10_000;
    let mut head: Option<Box<Node>> = None;
    for value in 0..N {
        head = Some(Box::new(Node { value, next: head }));
    }
    let head_owned = head
        .as_deref()
        .is_some_and(|n| smalloc::raw::owns((n as *const Node).cast()));
    checks.check(head_owned, "box: list node lies in smalloc's reservation");
    let mut count = 0u32;
    let mut expect = N;
    let mut ok = true;
    let mut cur = head.as_deref();
    while let Some(n) = cur {
        expect -= 1;
        ok &= n.value == expect;
        count += 1;
        cur = n.next.as_deref();
    }
    checks.check(ok && count == N, "box: list walks back in order");
    // Drop iteratively: a recursive drop of a long list could overflow the stack.
    while let Some(mut n) = head {
        head = n.next.take();
    }

    let page: Box<[u8; 4096]> = Box::new([0xA5; 4096]);
    checks.check(page.iter().all(|&b| b == 0xA5), "box: 4 KiB array");
    let slice: Box<[u64]> = (0..1000u64).collect();
    checks.check(slice.iter().sum::<u64>() == 499_500, "box: boxed slice");
    let closures: Vec<Box<dyn Fn(u64) -> u64>> = (1..=10u64)
        .map(|k| Box::new(move |x| x * k) as Box<dyn Fn(u64) -> u64>)
        .collect();
    let total: u64 = closures.iter().map(|f| f(3)).sum();
    checks.check(total == 3 * 55, "box: boxed closures");
    println!("box: built and walked a {count}-node boxed list, boxed array/slice/closures ok");
}

/// One batch handed from a producer thread to the consumer.
struct Batch {
    producer: usize,
    seq: usize,
    items: Vec<String>,
}

fn item_text(producer: usize, seq: usize, i: usize) -> String {
    format!("p{producer}-b{seq}-i{i}")
}

/// Several producer threads build batches and send them to one consumer
/// thread, which verifies and frees them: memory allocated on one thread is
/// freed on another.
fn exercise_threads(checks: &mut Checks) {
    let (tx, rx) = mpsc::channel::<Batch>();
    let (consumed, consumer_ok, foreign_owned) = thread::scope(|s| {
        let consumer = s.spawn(move || {
            let mut batches = 0usize;
            let mut ok = true;
            let mut owned = true;
            let mut next_seq = [0usize; PRODUCERS];
            for batch in rx {
                ok &= batch.items.len() == STRINGS_PER_BATCH;
                // A channel keeps each sender's messages in order.
                ok &= batch.seq == next_seq[batch.producer];
                next_seq[batch.producer] += 1;
                for (i, item) in batch.items.iter().enumerate() {
                    ok &= *item == item_text(batch.producer, batch.seq, i);
                    owned &= smalloc::raw::owns(item.as_ptr());
                }
                owned &= smalloc::raw::owns(batch.items.as_ptr().cast());
                batches += 1;
                // `batch` is dropped here, on the consumer thread.
            }
            (batches, ok, owned)
        });
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|producer| {
                let tx = tx.clone();
                s.spawn(move || {
                    // Private work on this thread: allocated and freed here.
                    let local: Vec<Vec<u32>> = (0..200u32).map(|n| (0..n).collect()).collect();
                    let local_ok = local.iter().enumerate().all(|(n, v)| v.len() == n);
                    for seq in 0..BATCHES_PER_PRODUCER {
                        let items = (0..STRINGS_PER_BATCH)
                            .map(|i| item_text(producer, seq, i))
                            .collect();
                        tx.send(Batch {
                            producer,
                            seq,
                            items,
                        })
                        .expect("the consumer outlives the producers");
                    }
                    local_ok
                })
            })
            .collect();
        drop(tx);
        let producers_ok = producers.into_iter().all(|h| h.join().unwrap_or(false));
        checks.check(producers_ok, "threads: producers' local data");
        consumer.join().unwrap_or((0, false, false))
    });
    let expected = PRODUCERS * BATCHES_PER_PRODUCER;
    checks.check(consumed == expected, "threads: every batch arrived");
    checks.check(consumer_ok, "threads: every batch intact and in order");
    checks.check(
        foreign_owned,
        "threads: memory from other threads lies in smalloc's reservation",
    );
    println!(
        "threads: {PRODUCERS} producers sent {consumed} batches ({} strings) to 1 consumer, which dropped them",
        consumed * STRINGS_PER_BATCH
    );
}

/// Peak resident set size (VmHWM) in kB, from /proc/self/status.
fn peak_rss_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() -> ExitCode {
    println!("hellomalloc: std collections and threads on smalloc (the global allocator)");
    let mut checks = Checks::default();
    exercise_vec(&mut checks);
    exercise_string(&mut checks);
    exercise_hashmap(&mut checks);
    exercise_box(&mut checks);
    exercise_threads(&mut checks);
    match peak_rss_kb() {
        Some(kb) => println!("peak RSS (VmHWM): {kb} kB"),
        None => println!("peak RSS (VmHWM): unavailable"),
    }
    if checks.failed.is_empty() {
        println!("all {} checks passed", checks.passed);
        ExitCode::SUCCESS
    } else {
        println!(
            "{} of {} checks FAILED",
            checks.failed.len(),
            checks.passed + checks.failed.len()
        );
        ExitCode::FAILURE
    }
}
