//! Fuzzes the secure mode (built with `--features secure`): between
//! ordinary allocations, frees and reallocations (checked as in
//! `global_alloc`), the bytes inject the bugs the mode promises to stop and
//! check that every one is stopped, with its message and address:
//!
//! * a write after free into the link or check word of a freed slot
//!   (bytes 0-3 and 8-15), followed at once by allocations of the slot's
//!   size until its list reaches the slot, which must report the corrupted
//!   list (a list is LIFO, so the slot is reached after the slots freed
//!   after it);
//! * a second free of a block freed and not handed out again since;
//! * a free of a pointer inside a live block.
//!
//! A freed slot stops being free where the purge reset its region (every
//! slot of it free and quiet for a delay): it is never-used again, on no
//! list, and the target forgets it. The purge delay is 1 ms here, so that
//! sweeps, hand-overs and resets come between the target's steps.
//!
//! Under cargo-fuzz the core's `secure::fail` panics instead of aborting;
//! the target catches the panic. Each check runs before the allocator
//! changes anything, so the heap is as it was, and after repairing the
//! bytes it overwrote the target carries on with the same heap.
#![no_main]
#![deny(unsafe_op_in_unsafe_fn)]

use std::alloc::{GlobalAlloc, Layout};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

use libfuzzer_sys::fuzz_target;
use smalloc_core::Smalloc;
use smalloc_core::layout::{MAX_SC, MIN_SC, sc_of, slab_of, slot_of, slot_size};
use smalloc_fuzz::{Input, Live, check, check_zero, is_mapping};

static A: Smalloc = Smalloc::new();

/// Set while the target expects the allocator to stop a bug: the panic
/// hook then stays quiet (libfuzzer-sys's hook would abort).
static EXPECTING: AtomicBool = AtomicBool::new(false);

/// Most allocations that may be needed to reach a corrupted slot on its
/// list: more than the frees one input can make.
const MAX_DRIVE: usize = 4096;

fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        smalloc_core::set_purge_delay(std::time::Duration::from_millis(1));
        let fuzzer_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !EXPECTING.load(Ordering::Relaxed) {
                fuzzer_hook(info);
            }
        }));
    });
}

/// Runs `f`, which must make the secure mode stop `what` at `addr`.
fn expect_stop(what: &str, addr: usize, f: impl FnOnce()) {
    EXPECTING.store(true, Ordering::Relaxed);
    let r = catch_unwind(AssertUnwindSafe(f));
    EXPECTING.store(false, Ordering::Relaxed);
    let Err(payload) = r else {
        panic!("the secure mode did not stop a {what} at {addr:#x}");
    };
    let msg = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("");
    let want = format!("smalloc: {what} at {addr:#018x}");
    assert!(msg.starts_with(&want), "expected `{want}`, got `{msg}`");
}

/// A block freed by the target (or by a moving realloc) and not handed out
/// again since: its slot is on a free list.
#[derive(Clone, Copy)]
struct Freed {
    addr: usize,
    layout: Layout,
}

/// What one run knows besides the live blocks.
struct Run {
    live: Live,
    freed: Vec<Freed>,
}

impl Run {
    /// Records a block just handed out (its slot is no longer free).
    ///
    /// # Safety
    /// `p` was just handed out with layout `l`.
    unsafe fn handed_out(&mut self, p: *mut u8, l: Layout) {
        assert!(!p.is_null(), "{l:?} failed");
        self.freed.retain(|f| f.addr != p.addr());
        // SAFETY: per the contract.
        unsafe { self.live.add(p, l.size(), l.align()) };
    }

    /// A freed block from the input's pick, if any, among those still on a
    /// free list.
    fn pick_freed(&mut self, pick: u8) -> Option<Freed> {
        self.freed.retain(|f| on_a_list(f.addr));
        (!self.freed.is_empty()).then(|| self.freed[pick as usize % self.freed.len()])
    }
}

/// Whether the freed slot at `addr` is still on a free list: below what its
/// region handed out. A sweep that reset the region made the tail 0, and a
/// slot claimed again since is handed out or in the owner's fresh run, past
/// what it handed out.
fn on_a_list(addr: usize) -> bool {
    let sc = sc_of(addr);
    let usage = smalloc_core::hooks::list_usage(slab_of(addr), sc);
    u64::from(slot_of(addr, sc)) < usage.handed_out
}

/// A layout from the input: every slot size class, never a mapping of its
/// own (the secure mode checks slots only).
fn layout(input: &mut Input) -> Option<Option<Layout>> {
    let size = input.size(false)?;
    let align = input.align()?;
    Some(
        (!is_mapping(size, align))
            .then(|| Layout::from_size_align(size, align).ok())
            .flatten(),
    )
}

/// Writes `xor` into byte `at` of the freed slot `f` (its link or check
/// word), then allocates its size class until the list reaches it, which
/// must stop the program; then puts the byte back. The slot must be on a
/// list of the slab this thread owns: its private list (LIFO), or for a
/// large slot the private list of large slots and then the slab's shared
/// list, both of which its allocations take from before anything else.
fn write_after_free(run: &mut Run, f: Freed, at: usize, xor: u8) {
    let sc = sc_of(f.addr);
    debug_assert!(sc <= MAX_SC);
    let p = std::ptr::with_exposed_provenance_mut::<u8>(f.addr + at);
    // SAFETY: a free slot (of at least 16 bytes in this mode) in the
    // reservation, which stays mapped; nobody else runs.
    let old = unsafe { p.read() };
    // SAFETY: as above.
    unsafe { p.write(old ^ xor) };
    // The smallest request of the class.
    let size = if sc == MIN_SC {
        1
    } else {
        slot_size(sc - 1) + 1
    };
    let l = Layout::from_size_align(size, 1).unwrap();
    let mut drive = Vec::new();
    expect_stop("corrupted free list (a write after free?)", f.addr, || {
        for _ in 0..MAX_DRIVE {
            // SAFETY: a non-zero size.
            let q = unsafe { A.alloc(l) };
            assert!(!q.is_null() && q.addr() != f.addr, "{l:?}: {q:p}");
            drive.push(q);
        }
    });
    // SAFETY: as above.
    unsafe { p.write(old) };
    for q in drive {
        // SAFETY: just handed out with layout `l`.
        unsafe { run.handed_out(q, l) };
    }
}

fn run(data: &[u8]) {
    install_hook();
    let mut input = Input::new(data);
    let mut run = Run {
        live: Live::new(u64::from(data.len() as u32)),
        freed: Vec::new(),
    };
    while let Some(op) = input.byte() {
        match op % 9 {
            // alloc, alloc_zeroed
            0..=2 => {
                let Some(l) = layout(&mut input) else { break };
                let Some(l) = l else { continue };
                if !run.live.has_room(l.size(), l.align()) {
                    continue;
                }
                let zeroed = op % 9 == 2;
                // SAFETY: the layout has a non-zero size.
                let p = unsafe {
                    if zeroed {
                        A.alloc_zeroed(l)
                    } else {
                        A.alloc(l)
                    }
                };
                if zeroed && !p.is_null() {
                    // SAFETY: a live block of `l.size()` bytes.
                    unsafe { check_zero(p, l.size()) };
                }
                // SAFETY: just handed out.
                unsafe { run.handed_out(p, l) };
            }
            // dealloc
            3 | 4 => {
                let Some(pick) = input.byte() else { break };
                if let Some((p, b)) = run.live.take(pick) {
                    let l = Layout::from_size_align(b.size, b.align).unwrap();
                    // SAFETY: `p` is live with layout `l`, and now ours.
                    unsafe { A.dealloc(p, l) };
                    run.freed.push(Freed {
                        addr: b.addr,
                        layout: l,
                    });
                }
            }
            // realloc
            5 => {
                let (Some(pick), Some(new_size)) = (input.byte(), input.size(false)) else {
                    break;
                };
                let Some((p, b)) = run.live.take(pick) else {
                    continue;
                };
                let l = Layout::from_size_align(b.size, b.align).unwrap();
                if !run.live.has_room(new_size, b.align) || is_mapping(new_size, b.align) {
                    // SAFETY: `p` is live with layout `l`.
                    unsafe { A.dealloc(p, l) };
                    run.freed.push(Freed {
                        addr: b.addr,
                        layout: l,
                    });
                    continue;
                }
                // SAFETY: `p` is live with layout `l`; `new_size` is non-zero
                // and does not overflow when rounded to `l.align()`.
                let q = unsafe { A.realloc(p, l, new_size) };
                assert!(!q.is_null(), "realloc {l:?} to {new_size} failed");
                // SAFETY: `q` holds `min(old, new)` bytes of the old block.
                unsafe { check(q, b.size, b.size.min(new_size), b.tag) };
                if q != p {
                    run.freed.push(Freed {
                        addr: b.addr,
                        layout: l,
                    });
                }
                let nl = Layout::from_size_align(new_size, b.align).unwrap();
                // SAFETY: `q` is handed out to us now.
                unsafe { run.handed_out(q, nl) };
            }
            // a write after free
            6 => {
                let (Some(pick), Some(at), Some(xor)) = (input.byte(), input.byte(), input.byte())
                else {
                    break;
                };
                let Some(f) = run.pick_freed(pick) else {
                    continue;
                };
                // Only where the allocator promises to look: a list of this
                // thread's slab, which its next allocations follow.
                if smalloc_core::hooks::owned_slab() != Some(slab_of(f.addr)) {
                    continue;
                }
                // The link (bytes 0-3) or the check (8-15); bytes 4-7 are
                // not part of either.
                let at = at as usize % 12;
                let at = if at < 4 { at } else { at + 4 };
                write_after_free(&mut run, f, at, xor | 1);
            }
            // a double free
            7 => {
                let Some(pick) = input.byte() else { break };
                let Some(f) = run.pick_freed(pick) else {
                    continue;
                };
                let p = std::ptr::with_exposed_provenance_mut::<u8>(f.addr);
                // SAFETY: none: a double free, which the secure mode stops
                // before it changes anything.
                expect_stop("double free", f.addr, || unsafe { A.dealloc(p, f.layout) });
            }
            // a free of a pointer inside a live block
            _ => {
                let (Some(pick), Some(k)) = (input.byte(), input.u16()) else {
                    break;
                };
                let Some((p, b)) = run.live.take(pick) else {
                    continue;
                };
                let l = Layout::from_size_align(b.size, b.align).unwrap();
                if b.size >= 2 {
                    let k = 1 + k as usize % (b.size - 1);
                    // SAFETY: none: `p + k` is inside the block, which the
                    // secure mode sees from its address alone.
                    expect_stop(
                        "free of a pointer that is not the start of a block",
                        b.addr + k,
                        || unsafe { A.dealloc(p.add(k), l) },
                    );
                }
                // The block is untouched: free it for real.
                // SAFETY: `p` is live with layout `l` (checked by `take`).
                unsafe { A.dealloc(p, l) };
                run.freed.push(Freed {
                    addr: b.addr,
                    layout: l,
                });
            }
        }
    }
    for (p, b) in run.live.drain() {
        // SAFETY: every live block is freed once, with its layout.
        unsafe { A.dealloc(p, Layout::from_size_align(b.size, b.align).unwrap()) };
    }
}

fuzz_target!(|data: &[u8]| run(data));
