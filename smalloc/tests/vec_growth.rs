//! realloc of growing blocks (`smalloc::grow`): a block that doubles past
//! 64 KiB jumps to a 2 MiB slot once and then grows there in place; every
//! move keeps the contents; growing never leaves a slot that fits; and the
//! reservation stays one mapping however many blocks grow (realloc copies,
//! it does not move pages, so it never splits the reservation into more
//! VMAs, which the kernel limits to `vm.max_map_count`).
//!
//! smalloc is the global allocator here, so the `Vec` tests see the sizes
//! the standard library really asks for.
//!
//! A request for a large slot (64 KiB and more) may get a freed slot of up
//! to two size classes larger (see `cold_path::find_freed`), which other
//! tests of this process may have left (under `cargo test`; `cargo
//! nextest` runs each test alone): the checks of large size classes accept
//! that, with [`lands_in`].

use std::alloc::{GlobalAlloc, Layout};

use devutils::{check, check_sparse, fill, fill_sparse};
use smalloc::Smalloc;
use smalloc::layout::{MAX_SLOT_SIZE, sc_of, slot_size};

#[global_allocator]
static A: Smalloc = Smalloc::new();

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

fn l(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

/// Size of the slot holding `p`.
fn slot_of(p: *const u8) -> usize {
    slot_size(sc_of(p.addr()))
}

/// Whether a block in a slot of `slot` bytes is where a request for a slot
/// of `want` bytes may land: exactly there below 64 KiB, in a slot of up to
/// four times that from 64 KiB on (a borrowed freed slot).
fn lands_in(slot: usize, want: usize) -> bool {
    if want < 64 * KIB {
        slot == want
    } else {
        (want..=4 * want).contains(&slot)
    }
}

/// Doubles a block from `start` bytes to `top`, filling it completely with
/// a pattern and checking all of it after every realloc. Returns, for each
/// step, (new size, slot size, whether the block moved).
fn double(start: usize, top: usize) -> Vec<(usize, usize, bool)> {
    let mut steps = Vec::new();
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let mut p = unsafe { A.alloc(l(start)) };
    assert!(!p.is_null());
    // SAFETY: as above.
    unsafe { fill(p, start, start as u64) };
    let mut size = start;
    while size < top {
        let new = size * 2;
        // SAFETY: as above.
        let q = unsafe { A.realloc(p, l(size), new) };
        assert!(!q.is_null(), "{size} -> {new}");
        // SAFETY: as above.
        let kept = unsafe { check(q, size, size as u64) };
        assert_eq!(kept, Ok(()), "{size} -> {new}: contents lost");
        // SAFETY: as above.
        unsafe { fill(q, new, new as u64) };
        steps.push((new, slot_of(q), q != p));
        p = q;
        size = new;
    }
    // SAFETY: as above.
    unsafe { A.dealloc(p, l(size)) };
    steps
}

/// The moves of `steps` (from [`double`]) at sizes above 64 KiB.
fn moves_past_64_kib(steps: &[(usize, usize, bool)]) -> Vec<(usize, usize)> {
    steps
        .iter()
        .filter(|s| s.2 && s.0 > 64 * KIB)
        .map(|s| (s.0, s.1))
        .collect()
}

#[test]
#[cfg_attr(miri, ignore = "no 2 MiB slots in Miri's geometry")]
fn a_doubling_block_jumps_to_2_mib_once_and_grows_there() {
    let steps = double(8, 8 * MIB);
    // Moved by the ladder at 16 B, 128 B, 256 B, 8 KiB and 32 KiB.
    let small_moves: Vec<usize> = steps
        .iter()
        .filter(|s| s.2 && s.0 <= 64 * KIB)
        .map(|s| s.0)
        .collect();
    // (The secure mode's smallest slots are 16 bytes: the first move is
    // out of one, at 32 B.)
    let want: &[usize] = if cfg!(feature = "secure") {
        &[32, 128, 256, 8 * KIB, 32 * KIB]
    } else {
        &[16, 128, 256, 8 * KIB, 32 * KIB]
    };
    assert_eq!(small_moves, want);
    // Then doubling past 64 KiB: once to 2 MiB (not to 256 KiB, then 2
    // MiB), where it grows in place; past 2 MiB, its own class each time.
    // (If the 32 KiB move got a borrowed 128 or 256 KiB slot, the jump
    // comes at 256 or 512 KiB.)
    let moves = moves_past_64_kib(&steps);
    assert!(
        moves[0].0 <= 512 * KIB && lands_in(moves[0].1, 2 * MIB),
        "{moves:?}"
    );
    assert!(moves[1..].iter().all(|m| m.0 > 2 * MIB), "{moves:?}");
    for &(size, slot, _) in &steps {
        let want = match size {
            // The secure mode's first slot, 16 bytes, holds it.
            ..=16 if cfg!(feature = "secure") => 16,
            ..=64 => 64,
            65..=128 => 128,
            129..=4096 => 4096,
            4097..=16384 => 16384,
            16385..=65536 => 65536,
            _ => slot_size(smalloc::layout::size_class(size, 8)).max(2 * MIB),
        };
        // Up to 512 KiB it may still be in the 64 KiB rung's borrowed slot.
        let ok = lands_in(slot, want) || (size <= 512 * KIB && lands_in(slot, 64 * KIB));
        assert!(ok, "{size}: slot {slot}, want {want}");
    }
}

#[test]
#[cfg_attr(miri, ignore = "no 2 MiB slots in Miri's geometry")]
fn a_doubling_block_of_24_byte_elements_jumps_too() {
    // A Vec of 24-byte elements is 3/4 of its slot when full: 12 KiB
    // (16 KiB slot), 24 and 48 KiB (64 KiB slot), then 96 KiB: 2 MiB.
    let steps = double(12 * KIB, 1536 * KIB);
    let moves = moves_past_64_kib(&steps);
    assert_eq!(moves.len(), 1, "{steps:?}");
    assert!(lands_in(moves[0].1, 2 * MIB), "{steps:?}");
}

#[test]
#[cfg_attr(miri, ignore = "no 2 MiB slots in Miri's geometry")]
fn growth_that_is_not_doubling_keeps_the_ladder() {
    for (from, to, slot) in [
        (64 * KIB, 128 * KIB + 8, 256 * KIB), // more than twice
        (64 * KIB, 96 * KIB, 256 * KIB),      // 1.5x
        (40 * KIB, 128 * KIB + 8, 256 * KIB),
        (32 * KIB, 64 * KIB, 64 * KIB), // doubling, but not past 64 KiB
        (16 * KIB, 32 * KIB, 64 * KIB),
    ] {
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        unsafe {
            let p = A.alloc(l(from));
            fill(p, from, 3);
            let q = A.realloc(p, l(from), to);
            // (Unless `p` got a borrowed slot large enough to stay in.)
            if q != p {
                assert!(lands_in(slot_of(q), slot), "{from} -> {to}");
            }
            assert!(slot_of(q) < 2 * MIB, "{from} -> {to}");
            assert_eq!(check(q, from, 3), Ok(()));
            A.dealloc(q, l(to));
        }
    }
}

#[test]
#[cfg_attr(miri, ignore = "no 2 MiB slots in Miri's geometry")]
fn growing_inside_a_large_slot_never_moves_and_shrinking_still_does() {
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe {
        // Doubled from 16 KiB until it jumps to a 2 MiB slot (at 128 KiB,
        // or later from a borrowed larger slot).
        let mut size = 16 * KIB;
        let mut p = A.alloc(l(size));
        while slot_of(p) < 2 * MIB {
            p = A.realloc(p, l(size), 2 * size);
            size *= 2;
        }
        assert!(size <= 512 * KIB && lands_in(slot_of(p), 2 * MIB), "{size}");
        fill(p, size, 2);
        let kept = size;
        // Growing to sizes of an eighth of the slot or less, and more, by
        // any factor: in place (the shrink rule is for shrinking).
        for new in [size + 8, 256 * KIB, 256 * KIB + 8, MIB + 1, 2 * MIB] {
            if new < size {
                continue;
            }
            assert_eq!(A.realloc(p, l(size), new), p, "{size} -> {new}");
            assert_eq!(check(p, kept, 2), Ok(()));
            size = new;
        }
        // Shrinking to an eighth or less leaves the 2 MiB slot.
        let q = A.realloc(p, l(size), 100 * KIB);
        assert_ne!(q, p);
        assert!(lands_in(slot_of(q), 112 * KIB));
        assert_eq!(check(q, 100 * KIB, 2), Ok(()));
        A.dealloc(q, l(100 * KIB));
    }
}

#[test]
#[cfg_attr(miri, ignore = "no 2 MiB slots in Miri's geometry")]
fn a_pushed_vec_moves_to_2_mib_once_and_keeps_its_bytes() {
    // The sizes std's Vec really asks for when pushed one element at a
    // time (amortized doubling), with bytes and with 24-byte elements:
    // past 64 KiB, one move, into a 2 MiB slot, and none after it up to
    // 1.5 MB.
    let mut v: Vec<u8> = Vec::new();
    let mut moves = Vec::new();
    let mut last = v.as_ptr();
    for i in 0..1_500_000usize {
        v.push(i as u8 ^ (i >> 8) as u8);
        if v.as_ptr() != last {
            last = v.as_ptr();
            moves.push((v.capacity(), slot_of(last)));
        }
    }
    assert!(
        v.iter()
            .enumerate()
            .all(|(i, &b)| b == i as u8 ^ (i >> 8) as u8)
    );
    let late: Vec<_> = moves.iter().filter(|m| m.0 > 64 * KIB).collect();
    assert!(late.len() == 1 && lands_in(late[0].1, 2 * MIB), "{moves:?}");

    let mut w: Vec<[u64; 3]> = Vec::new();
    let mut moves = Vec::new();
    let mut last = w.as_ptr();
    for i in 0..60_000u64 {
        w.push([i, !i, i * 3]);
        if w.as_ptr() != last {
            last = w.as_ptr();
            moves.push((w.capacity() * 24, slot_of(last.cast())));
        }
    }
    assert!(
        w.iter()
            .enumerate()
            .all(|(i, e)| *e == [i as u64, !(i as u64), i as u64 * 3])
    );
    let late: Vec<_> = moves.iter().filter(|m| m.0 > 64 * KIB).collect();
    assert!(late.len() == 1 && lands_in(late[0].1, 2 * MIB), "{moves:?}");
}

#[test]
fn growing_blocks_keep_their_contents_up_to_64_mib() {
    // Doubling and not doubling, through the exact size classes above
    // 2 MiB and the released ones (128 MiB slots: not reached) and, under
    // Miri, past the largest slot into big mappings.
    let top = if cfg!(miri) { 128 * KIB } else { 64 * MIB };
    for start in [1, 24, 3000, 100 * KIB + 8] {
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        unsafe {
            let mut p = A.alloc(l(start));
            fill_sparse(p, start, start as u64);
            let mut size = start;
            let mut k = 0u64;
            while size < top {
                // Alternate doubling and growing by 3/2.
                let new = if k % 2 == 0 {
                    size * 2
                } else {
                    size * 3 / 2 + 8
                };
                let q = A.realloc(p, l(size), new);
                assert!(!q.is_null());
                assert_eq!(
                    check_sparse(q, size, size as u64),
                    Ok(()),
                    "{size} -> {new}"
                );
                fill_sparse(q, new, new as u64);
                p = q;
                size = new;
                k += 1;
            }
            A.dealloc(p, l(size));
        }
    }
    if MAX_SLOT_SIZE >= 2 * MIB {
        let _ = double(8, 16 * MIB);
    }
}

/// The most mappings the layout's window should hold: one per committed
/// region and per metadata range (16 slabs, two each), with the untouched
/// parts between them.
fn most_vmas() -> usize {
    2 * (smalloc::stats::snapshot().committed_regions as usize + 32) + 1
}

/// The number of mappings (lines of /proc/self/maps) that overlap
/// smalloc's reservation.
fn vmas_in_reservation() -> usize {
    let base = smalloc::hooks::reservation_base().expect("reserved");
    let end = base + smalloc::layout::TOTAL_SIZE;
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter(|line| {
            let range = line.split_whitespace().next().unwrap();
            let (lo, hi) = range.split_once('-').unwrap();
            let lo = usize::from_str_radix(lo, 16).unwrap();
            let hi = usize::from_str_radix(hi, 16).unwrap();
            lo < end && hi > base
        })
        .count()
}

#[test]
#[cfg_attr(miri, ignore = "Miri has no /proc/self/maps")]
fn thousands_of_grow_cycles_keep_a_mapping_per_region() {
    // 32 blocks live at once (so many different slots are grown into),
    // each doubled from 8 bytes to a size up to 4 MiB, then freed; 4000
    // such cycles, across the jump to 2 MiB, the exact classes above it,
    // and shrinks out of them.
    let mut live: Vec<(*mut u8, usize, u64)> = Vec::new();
    let mut rng = devutils::Rng::new(5);
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe {
        let p = A.alloc(l(8));
        A.dealloc(p, l(8));
    }
    assert!(vmas_in_reservation() >= 1);
    for cycle in 0..4000u64 {
        let top = rng.log_size(8, 4 * MIB);
        // SAFETY: as above.
        unsafe {
            let mut p = A.alloc(l(8));
            let mut size = 8;
            fill_sparse(p, size, cycle);
            while size < top {
                let q = A.realloc(p, l(size), size * 2);
                assert_eq!(check_sparse(q, size, cycle), Ok(()));
                p = q;
                size *= 2;
                fill_sparse(p, size, cycle);
            }
            if rng.chance(1, 4) && size >= 64 * KIB {
                // Shrink some: out of their large slots.
                let q = A.realloc(p, l(size), size / 16);
                assert_eq!(check_sparse(q, size / 16, cycle), Ok(()));
                p = q;
                size /= 16;
            }
            live.push((p, size, cycle));
            if live.len() > 32 {
                let (p, size, tag) = live.swap_remove(rng.below(live.len() as u64) as usize);
                assert_eq!(check_sparse(p, size, tag), Ok(()));
                A.dealloc(p, l(size));
            }
        }
        if cycle % 500 == 0 {
            assert!(vmas_in_reservation() <= most_vmas(), "after {cycle} cycles");
        }
    }
    assert!(vmas_in_reservation() <= most_vmas());
    for (p, size, tag) in live {
        // SAFETY: as above.
        unsafe {
            assert_eq!(check_sparse(p, size, tag), Ok(()));
            A.dealloc(p, l(size));
        }
    }
}
