//! Sampled heap profiling (`smalloc::profile`, the `profile` feature): the
//! estimates per call site lie within a stated statistical bound, freed
//! samples leave the live profile, the outputs (folded, SVG, pprof) are
//! well formed and the pprof output decodes, a full table is reported,
//! big blocks (their own mappings) are sampled and leave the profile when
//! freed, and sampling under many threads with cross-thread frees stays
//! consistent. Without the feature this file is empty.
#![cfg(feature = "profile")]

use std::alloc::Layout;
use std::collections::HashSet;
use std::hint::black_box;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::thread;

use prost::Message;
use smalloc::Smalloc;
use smalloc::profile::{self, Kind, Profile, Unwind};

#[global_allocator]
static A: Smalloc = Smalloc::new();

/// Samples taken since the start.
fn samples(p: &Profile) -> u64 {
    p.stacks.iter().map(|s| s.allocated.samples).sum()
}

/// Estimated bytes of the stacks of `kind` that pass through a function
/// whose name contains `site`.
fn site_bytes(p: &Profile, kind: Kind, site: &str) -> f64 {
    p.folded(kind)
        .lines()
        .filter(|l| l.contains(site))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
        .sum()
}

#[inline(never)]
fn site_three(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| black_box(vec![i as u8; 256])).collect()
}

#[inline(never)]
fn site_one(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| black_box(vec![i as u8; 256])).collect()
}

#[inline(never)]
fn site_odd(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| black_box(vec![i as u8; 300])).collect()
}

#[inline(never)]
fn site_freed(n: usize) {
    let v: Vec<Vec<u8>> = (0..n).map(|i| black_box(vec![i as u8; 256])).collect();
    drop(black_box(v));
}

#[test]
fn estimates_per_site_lie_within_the_bound_and_frees_leave_the_live_profile() {
    const MEAN: usize = 64 << 10;
    assert!(profile::start(MEAN, Unwind::Dwarf));
    // 48 MiB and 16 MiB of 256-byte slots, live; 16 MiB allocated and freed.
    let three = site_three(3 * 65536);
    let one = site_one(65536);
    site_freed(65536);
    profile::stop();
    let p = Profile::snapshot();
    assert_eq!(p.lost, 0);
    let (a, b) = (
        site_bytes(&p, Kind::Live, "site_three"),
        site_bytes(&p, Kind::Live, "site_one"),
    );
    // The bound: a site of B bytes in slots of s << mean gets n ~ Poisson(B
    // / mean) samples, each standing for about `mean` bytes, so its
    // estimate has a relative standard deviation of 1/sqrt(B / mean): 3.6%
    // for 48 MiB, 6.25% for 16 MiB at 64 KiB, and the ratio of the two a
    // log-standard deviation of sqrt(1/768 + 1/256) = 0.072. Five standard
    // deviations (a false failure once in about two million runs):
    let (mib, want_a, want_b) = (1048576.0, 48.0 * 1048576.0, 16.0 * 1048576.0);
    assert!(
        (a / want_a - 1.0).abs() < 5.0 * 0.036,
        "site_three {:.1} MiB",
        a / mib
    );
    assert!(
        (b / want_b - 1.0).abs() < 5.0 * 0.0625,
        "site_one {:.1} MiB",
        b / mib
    );
    let ratio = a / b;
    assert!((ratio / 3.0).ln().abs() < 5.0 * 0.072, "ratio {ratio:.2}");
    // Freed: gone from the live profile, there in the allocation profile.
    assert_eq!(site_bytes(&p, Kind::Live, "site_freed"), 0.0);
    let freed = site_bytes(&p, Kind::Allocated, "site_freed");
    assert!(
        (freed / want_b - 1.0).abs() < 5.0 * 0.0625,
        "site_freed {freed}"
    );
    eprintln!(
        "estimated: site_three {:.1} MiB, site_one {:.1} MiB (ratio {ratio:.2}), site_freed {:.1} MiB; {} samples",
        a / mib,
        b / mib,
        freed / mib,
        samples(&p)
    );
    drop(black_box((three, one)));
}

#[test]
fn the_outputs_are_well_formed_and_pprof_decodes() {
    assert!(profile::start(16 << 10, Unwind::Dwarf));
    let keep = (site_three(20000), site_odd(20000));
    site_freed(20000);
    let p = Profile::snapshot();
    profile::stop();
    // A sample records the requested size, not its slot's (512 bytes).
    let odd = p.live.iter().filter(|s| s.size == 300).count();
    assert!(odd > 100, "{odd} live samples of 300 bytes");
    assert!(p.live.iter().all(|s| s.size != 512));
    // Folded: "frame;frame;... bytes".
    let folded = p.folded(Kind::Allocated);
    assert!(folded.lines().count() >= 2, "{folded}");
    for line in folded.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        assert!(!stack.is_empty() && n.parse::<u64>().unwrap() > 0, "{line}");
        assert!(
            !stack.contains("smalloc::profile"),
            "profiler frames: {line}"
        );
    }
    // SVG.
    let mut svg = Vec::new();
    p.write_svg(Kind::Live, &mut svg).unwrap();
    let svg = String::from_utf8(svg).unwrap();
    assert!(
        svg.contains("<svg") && svg.contains("site_three"),
        "{}",
        &svg[..200.min(svg.len())]
    );
    // pprof: gzip, then the same message definitions.
    let mut gz = Vec::new();
    p.write_pprof(&mut gz).unwrap();
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut raw)
        .unwrap();
    let pp = profile::pprof::PProfile::decode(&raw[..]).unwrap();
    let name = |i: i64| pp.string_table[i as usize].as_str();
    let types: Vec<(&str, &str)> = pp
        .sample_type
        .iter()
        .map(|t| (name(t.r#type), name(t.unit)))
        .collect();
    assert_eq!(
        types,
        [
            ("alloc_objects", "count"),
            ("alloc_space", "bytes"),
            ("inuse_objects", "count"),
            ("inuse_space", "bytes")
        ]
    );
    assert_eq!(pp.sample.len(), p.stacks.len());
    assert!(
        pp.sample
            .iter()
            .all(|s| s.value.len() == 4 && s.value[1] > 0)
    );
    let functions: HashSet<&str> = pp.function.iter().map(|f| name(f.name)).collect();
    assert!(
        functions.iter().any(|f| f.contains("site_three")),
        "{functions:?}"
    );
    assert!(functions.iter().any(|f| f.contains("site_freed")));
    // Live = inuse: only site_three's samples are live.
    let inuse: i64 = pp.sample.iter().map(|s| s.value[3]).sum();
    let live = p.totals(Kind::Live).0;
    assert!(
        (inuse as f64 - live).abs() <= pp.sample.len() as f64,
        "{inuse} {live}"
    );
    assert!(pp.period == 16 << 10);
    drop(keep);
}

#[test]
fn a_full_live_map_is_reported() {
    // Every slot sampled, all live: slot numbers run past the live map.
    assert!(profile::start(1, Unwind::FramePointers));
    let v: Vec<Box<u64>> = (0..profile::MAP_SLOTS as u64 + 5000)
        .map(Box::new)
        .collect();
    profile::stop();
    let p = Profile::snapshot();
    let boxes = p.live.iter().filter(|s| s.size == 8).count();
    // 5000 past the map, less the few boxes the draw skips (a countdown
    // of more than 8 bytes: probability exp(-7) at this mean).
    assert!(p.lost >= 4500, "lost {}", p.lost);
    assert_eq!(boxes, profile::MAP_SLOTS);
    let folded = p.folded(Kind::Live);
    assert!(folded.starts_with("[smalloc: "), "{}", &folded[..100]);
    assert!(folded.lines().next().unwrap().contains("samples lost"));
    drop(v);
}

/// The boxes are the allocations being sampled.
type Boxes = Vec<Box<u64>>;

/// Allocates a box at the end of a call path spelled by the low `level`
/// bits of `bits`: 2^level paths, each a distinct stack.
#[inline(never)]
fn descend(bits: u32, level: u32, out: &mut Boxes) {
    if level == 0 {
        out.push(Box::new(u64::from(bits)));
    } else if bits >> (level - 1) & 1 == 1 {
        left(bits, level - 1, out);
    } else {
        right(bits, level - 1, out);
    }
}

#[inline(never)]
fn left(bits: u32, level: u32, out: &mut Boxes) {
    descend(bits, level, out);
    black_box(1);
}

#[inline(never)]
fn right(bits: u32, level: u32, out: &mut Boxes) {
    descend(bits, level, out);
    black_box(2);
}

#[test]
fn a_full_stack_table_is_reported() {
    // Twice as many distinct stacks as the table holds, each sampled.
    assert!(profile::start(1, Unwind::Dwarf));
    let mut v = Vec::with_capacity(2 * profile::STACKS);
    for bits in 0..2 * profile::STACKS as u32 {
        descend(bits, 15, &mut v);
    }
    profile::stop();
    let p = Profile::snapshot();
    assert!(p.lost > 0, "lost {}", p.lost);
    assert!(
        (profile::STACKS / 2..=profile::STACKS).contains(&p.stacks.len()),
        "{} stacks",
        p.stacks.len()
    );
    // Each stack's samples stand for its one box; every box is sampled but
    // the few the draw skips (probability exp(-7), about 30).
    let boxes = p
        .stacks
        .iter()
        .filter(|s| s.live.samples == 1 && s.live.bytes == s.live.count * 8.0)
        .count();
    assert!(
        boxes + p.lost as usize >= 2 * profile::STACKS - 100,
        "{boxes} {}",
        p.lost
    );
    let folded = p.folded(Kind::Allocated);
    assert!(folded.lines().next().unwrap().contains("samples lost"));
    drop(v);
}

#[inline(never)]
fn site_big(layout: Layout) -> *mut u8 {
    // SAFETY: a non-zero size.
    let p = unsafe { std::alloc::alloc(layout) };
    // Work after the call: no tail call, so this frame is on the stack.
    black_box(p.wrapping_add(black_box(0)))
}

/// The live samples of at least `size` bytes.
fn big_samples(size: usize) -> Vec<smalloc::profile::SampleOut> {
    Profile::snapshot()
        .live
        .into_iter()
        .filter(|s| s.size >= size)
        .collect()
}

#[test]
fn big_blocks_are_sampled_moved_and_freed() {
    assert!(profile::start(profile::DEFAULT_MEAN, Unwind::Dwarf));
    // Above the largest slot (2 GiB): a mapping of its own, never touched.
    let big = (3 << 30) + 12345;
    let layout = Layout::from_size_align(big, 8).unwrap();
    let p = site_big(layout);
    assert!(!p.is_null());
    let live = big_samples(big);
    assert_eq!(live.len(), 1, "{live:?}");
    // Sampled with probability 1 - exp(-6144): it stands for one block.
    assert_eq!(live[0].size, big);
    assert!((live[0].count - 1.0).abs() < 1e-9, "{}", live[0].count);
    let p_ = Profile::snapshot();
    let folded = p_.folded(Kind::Live);
    let line = folded
        .lines()
        .find(|l| l.contains("site_big"))
        .unwrap_or_else(|| panic!("{folded}"));
    assert!(line.ends_with(&format!(" {big}")), "{line}");
    // Grown by mremap (the mapping may move): the sample follows it.
    // SAFETY: `p` is live with `layout`.
    let q = unsafe { std::alloc::realloc(p, layout, big + (1 << 30)) };
    assert!(!q.is_null());
    assert_eq!(big_samples(big).len(), 1);
    // SAFETY: `q` is live with the new size.
    unsafe { std::alloc::dealloc(q, Layout::from_size_align(big + (1 << 30), 8).unwrap()) };
    assert!(big_samples(big).is_empty());
    // Mapped again at the same address, not sampled this time (the
    // profile is stopped): a freed entry does not come back.
    profile::stop();
    let r = site_big(layout);
    assert!(big_samples(big).is_empty());
    // SAFETY: `r` is live with `layout`.
    unsafe { std::alloc::dealloc(r, layout) };
    let p_ = Profile::snapshot();
    assert!(p_.folded(Kind::Allocated).contains("site_big"));
    assert!(!p_.folded(Kind::Live).contains("site_big"));
}

#[test]
fn sampling_under_threads_with_cross_thread_frees_stays_consistent() {
    assert!(profile::start(4 << 10, Unwind::FramePointers));
    let live: Arc<Mutex<HashSet<usize>>> = Arc::default();
    let pass: Arc<Mutex<Vec<Box<[u8]>>>> = Arc::default();
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let (live, pass) = (live.clone(), pass.clone());
            thread::spawn(move || {
                let mut mine: Vec<Box<[u8]>> = Vec::new();
                for i in 0..40_000usize {
                    let size = 8 << ((i * 7 + t) % 10);
                    let b = vec![(i % 251) as u8; size].into_boxed_slice();
                    assert!(
                        live.lock().unwrap().insert(b.as_ptr().addr()),
                        "handed out twice"
                    );
                    mine.push(b);
                    if mine.len() > 64 {
                        let b = mine.swap_remove(i % mine.len());
                        if i % 3 == 0 {
                            pass.lock().unwrap().push(b);
                        } else {
                            check_and_drop(&live, b);
                        }
                    }
                    if i % 5 == 0 {
                        let theirs = pass.lock().unwrap().pop();
                        if let Some(b) = theirs {
                            check_and_drop(&live, b);
                        }
                    }
                }
                for b in mine {
                    check_and_drop(&live, b);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for b in std::mem::take(&mut *pass.lock().unwrap()) {
        check_and_drop(&live, b);
    }
    profile::stop();
    let p = Profile::snapshot();
    assert!(samples(&p) > 1000, "{} samples", samples(&p));
    // Everything the threads allocated is freed: no sample of theirs is
    // live (the test's own collections may be).
    assert!(p.live.len() < 50, "{} live samples", p.live.len());
    assert!(p.live.iter().all(|s| s.alloc_ns <= p.time_ns));
    // Each stack's live samples are among those it took.
    assert!(
        p.stacks
            .iter()
            .all(|s| s.live.samples <= s.allocated.samples)
    );
}

fn check_and_drop(live: &Mutex<HashSet<usize>>, b: Box<[u8]>) {
    let first = b[0];
    assert!(b.iter().all(|&x| x == first), "block corrupted");
    assert!(live.lock().unwrap().remove(&b.as_ptr().addr()));
    drop(b);
}

/// Allocates and frees a 4 KiB block (the sampled site of the walk tests).
#[inline(never)]
fn leaf_x() {
    drop(black_box(vec![1u8; 4096]));
    black_box(());
}

#[inline(never)]
fn leaf_y() {
    drop(black_box(vec![2u8; 4096]));
    black_box(());
}

/// The shared middle of two paths: the paths differ two frames out.
#[inline(never)]
fn middle() {
    leaf_x();
    black_box(());
}

#[inline(never)]
fn path_a() {
    middle();
    black_box(1);
}

#[inline(never)]
fn path_b() {
    middle();
    black_box(2);
}

#[test]
fn stacks_alike_but_for_one_frame_are_told_apart() {
    // Frame-pointer walks, each thread's recent ones known again by
    // rereading their words: four paths from one loop, their frames at the
    // same addresses, differing in one return address (the leaf's, or two
    // frames out), each 3:1 against its twin.
    const MEAN: usize = 64 << 10;
    const N: usize = 16384;
    assert!(profile::start(MEAN, Unwind::FramePointers));
    for i in 0..8 * N {
        match i % 8 {
            0..3 => path_a(),
            3 => path_b(),
            4..7 => leaf_x(),
            _ => leaf_y(),
        }
    }
    profile::stop();
    let p = Profile::snapshot();
    assert_eq!(p.lost, 0);
    let bytes = |site| site_bytes(&p, Kind::Allocated, site);
    let (a, b) = (bytes("path_a"), bytes("path_b"));
    assert!(
        a > 0.0,
        "no sample names path_a: the test needs frame pointers \
         (RUSTFLAGS=\"-C force-frame-pointers=yes\")"
    );
    // `leaf_x` also runs under `path_a` and `path_b` (the paths through
    // `middle`): the direct calls are the rest.
    let (x, y) = (bytes("leaf_x") - a - b, bytes("leaf_y"));
    // Each site: 3N or N blocks of 4 KiB (48 or 16 MiB), so as in the first
    // test a relative standard deviation of 3.6% and 6.25%, the ratio a
    // log-standard deviation of 0.072; five of them (x and y are estimates
    // of differences, with somewhat more spread: a bound of six).
    let want = (3 * N * 4096) as f64;
    for (name, big, small) in [("path", a, b), ("leaf", x, y)] {
        assert!(
            (big / want - 1.0).abs() < 6.0 * 0.036,
            "{name}: {big} {small}"
        );
        assert!(
            (small / (want / 3.0) - 1.0).abs() < 6.0 * 0.0625,
            "{name}: {big} {small}"
        );
        assert!(
            (big / small / 3.0).ln().abs() < 6.0 * 0.072,
            "{name}: {big} {small}"
        );
    }
}

/// 100,000-byte blocks: slots of 112 KiB, a size class nothing else in
/// these tests uses.
fn kept_sc() -> usize {
    smalloc::layout::size_class(100_000, 1) as usize
}

fn hundred_k(n: usize) -> Vec<Box<[u8]>> {
    (0..n)
        .map(|i| black_box(vec![i as u8; 100_000].into_boxed_slice()))
        .collect()
}

/// The 112 KiB class's slots: live, free in records (the profile slab's
/// private slots), free on the shared lists, ever handed out.
fn class_112k(s: &smalloc::stats::Snapshot) -> (u64, u64, u64, u64) {
    let c = &s.classes[kept_sc()];
    (c.live(), c.free_private, c.free_shared, c.handed_out)
}

#[test]
fn kept_slots_count_as_free_pass_to_later_samples_and_go_to_the_shared_list_on_trim() {
    // Every allocation sampled (a mean of one byte).
    assert!(profile::start(1, Unwind::FramePointers));
    let t = thread::spawn(|| {
        let v = hundred_k(6);
        let during = smalloc::stats::snapshot();
        drop(v);
        (during, smalloc::stats::snapshot())
    });
    let (during, freed) = t.join().unwrap();
    // Live; then free, kept by the thread's record; still kept once the
    // thread has ended (its record free, for the next thread).
    assert_eq!(class_112k(&during), (6, 0, 0, 6));
    assert_eq!(class_112k(&freed), (0, 6, 0, 6));
    assert_eq!(class_112k(&smalloc::stats::snapshot()), (0, 6, 0, 6));
    // Sampled again, on this thread: the same six slots (not new memory),
    // then kept by this thread's record.
    let again = hundred_k(6);
    assert_eq!(class_112k(&smalloc::stats::snapshot()), (6, 0, 0, 6));
    drop(again);
    assert_eq!(class_112k(&smalloc::stats::snapshot()), (0, 6, 0, 6));
    // A trim puts them on the shared list; every slot of the region being
    // free, it resets the region (all its pages given back, nothing handed
    // out any more).
    let resets = smalloc::stats::snapshot().purge_resets;
    smalloc::stats::trim(0);
    let after = smalloc::stats::snapshot();
    assert_eq!(class_112k(&after), (0, 0, 0, 0));
    assert!(after.purge_resets > resets);
    profile::stop();
}

#[test]
fn a_fork_child_frees_the_records_of_the_threads_it_has_not() {
    assert!(profile::start(1, Unwind::FramePointers));
    let (kept, go) = (
        Arc::new(std::sync::Barrier::new(2)),
        Arc::new(std::sync::Barrier::new(2)),
    );
    let t = thread::spawn({
        let (kept, go) = (kept.clone(), go.clone());
        move || {
            drop(hundred_k(5));
            kept.wait();
            go.wait();
        }
    });
    kept.wait();
    assert_eq!(class_112k(&smalloc::stats::snapshot()), (0, 5, 0, 5));
    // The child allocates (smalloc serves a fork child) and takes
    // snapshots.
    devutils::fork::in_child(|| {
        // The thread's record is free here: its slots serve these samples
        // (not new memory, which would leave the record's 5 too).
        let v = hundred_k(5);
        assert_eq!(class_112k(&smalloc::stats::snapshot()), (5, 0, 0, 5));
        drop(v);
    });
    // The parent's thread still keeps them.
    assert_eq!(class_112k(&smalloc::stats::snapshot()), (0, 5, 0, 5));
    go.wait();
    t.join().unwrap();
    profile::stop();
}

static HOOKED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn hooked() {
    HOOKED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

#[inline(never)]
fn many_site(i: usize) -> Box<[u8]> {
    black_box(vec![i as u8; 64 << (i % 6)].into_boxed_slice())
}

#[test]
fn every_sample_is_in_the_totals_with_more_threads_than_exclusive_shards() {
    // Twelve threads sampling one site at once: the first records add to
    // shards of their own by plain stores, the rest to a shared one.
    profile::set_sample_hook(hooked);
    assert!(profile::start(4 << 10, Unwind::FramePointers));
    let start = Arc::new(std::sync::Barrier::new(12));
    let threads: Vec<_> = (0..12)
        .map(|_| {
            let start = start.clone();
            thread::spawn(move || {
                start.wait();
                let mut v = Vec::new();
                for i in 0..20_000 {
                    v.push(many_site(i));
                    if v.len() > 32 {
                        v.swap_remove(i % 32);
                    }
                }
                // Everyone still holds a record here.
                start.wait();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    profile::stop();
    let p = Profile::snapshot();
    assert_eq!(p.lost, 0);
    // Every sample taken (the hook counts them) is in its stack's totals.
    let total = samples(&p);
    assert_eq!(total, HOOKED.load(std::sync::atomic::Ordering::Relaxed));
    assert!(total > 12 * 1000, "{total} samples");
}

thread_local! {
    static MY_SAMPLES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn hooked_here() {
    MY_SAMPLES.with(|c| c.set(c.get() + 1));
}

/// Allocates and frees `bytes` in 64 KiB blocks, one at a time, until the
/// calling thread takes a sample; the bytes allocated until then.
fn until_sampled(bytes: usize) -> usize {
    let mut done = 0;
    while done < bytes && MY_SAMPLES.with(|c| c.get()) == 0 {
        drop(black_box(Vec::<u8>::with_capacity(64 << 10)));
        done += 64 << 10;
    }
    done
}

#[test]
fn a_thread_that_allocated_much_while_sampling_was_off_begins_within_64_mib() {
    // While sampling is off a thread looks whether it is on ever more
    // seldom, up to every 64 MiB it allocates: after 2 GiB it begins
    // within 64 MiB of a start, and at its first look a sample is all
    // but certain (a 64 KiB block reaches past the first countdown, of
    // mean 4 KiB, with probability 1 - exp(-16)).
    profile::set_sample_hook(hooked_here);
    let (started, off) = (Arc::new(std::sync::Barrier::new(2)), 2 << 30);
    let t = {
        let started = started.clone();
        thread::spawn(move || {
            assert_eq!(until_sampled(off), off, "sampled while off");
            started.wait();
            started.wait();
            until_sampled(1 << 30)
        })
    };
    started.wait();
    assert!(profile::start(4 << 10, Unwind::FramePointers));
    started.wait();
    let after = t.join().unwrap();
    profile::stop();
    assert!(
        after <= (64 << 20) + (64 << 10),
        "began after {after} bytes"
    );
}

#[test]
fn the_largest_means_sample_almost_nothing_and_overflow_nothing() {
    // A mean beyond `MAX_MEAN` is taken as it: countdowns drawn from it
    // neither overflow (a debug build would panic) nor wrap to a small
    // count (which would sample at once).
    for mean in [usize::MAX, profile::MAX_MEAN + 1, profile::MAX_MEAN] {
        assert!(profile::start(mean, Unwind::FramePointers));
        for i in 0..1000 {
            drop(black_box(vec![i as u8; 1 << 20]));
        }
        profile::stop();
    }
    let p = Profile::snapshot();
    assert_eq!(samples(&p), 0);
}
