//! Fuzzes smalloc's `GlobalAlloc`: the bytes decode into a sequence of
//! alloc / alloc_zeroed / realloc / dealloc with sizes and alignments over
//! every size class (and past the largest slot). Checked on every step:
//! non-null results, alignment, no overlap with a live block, contents kept
//! until free and across realloc, zeroed memory reads zero, and that a
//! request which fits a slot got a slot (and one that does not, a mapping).
#![no_main]

use std::alloc::{GlobalAlloc, Layout};

use libfuzzer_sys::fuzz_target;
use smalloc_core::Smalloc;
use smalloc_core::layout::{MAX_SC, size_class};
use smalloc_fuzz::{HUGE, Input, Live, check, check_zero, realloc_size};

static A: Smalloc = Smalloc::new();

/// A layout from the input. Huge sizes keep a page alignment so that they
/// move by `mremap`, never by copying gigabytes; over-aligned requests keep
/// an ordinary size.
fn layout(input: &mut Input) -> Option<Layout> {
    let size = input.size(false)?;
    let align = input.align()?;
    let align = if size >= HUGE { align.min(4096) } else { align };
    Layout::from_size_align(size, align).ok()
}

/// The slot-or-mapping invariant of a live block.
fn check_home(p: *mut u8, l: Layout) {
    let slot = size_class(l.size(), l.align()) <= MAX_SC;
    assert_eq!(A.owns_slot(p), slot, "{l:?} at {p:p}");
    // SAFETY: `p` is live with layout `l`.
    assert!(unsafe { A.usable_size(p, l) } >= l.size());
}

fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let mut live = Live::new(u64::from(data.len() as u32));
    while let Some(op) = input.byte() {
        match op % 8 {
            // alloc, alloc_zeroed
            0..=2 => {
                let Some(l) = layout(&mut input) else { break };
                if !live.has_room(l.size(), l.align()) {
                    continue;
                }
                let zeroed = op % 8 == 2;
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
                    // SAFETY: a live block of `l.size()` bytes.
                    unsafe { check_zero(p, l.size()) };
                }
                check_home(p, l);
                // SAFETY: just handed out.
                unsafe { live.add(p, l.size(), l.align()) };
            }
            // dealloc
            3..=5 => {
                let Some(pick) = input.byte() else { break };
                if let Some((p, b)) = live.take(pick) {
                    let l = Layout::from_size_align(b.size, b.align).unwrap();
                    // SAFETY: `p` is live with layout `l`, and now ours.
                    unsafe { A.dealloc(p, l) };
                }
            }
            // realloc
            _ => {
                let (Some(pick), Some(new_size)) = (input.byte(), input.size(false)) else {
                    break;
                };
                let Some((p, b)) = live.take(pick) else {
                    continue;
                };
                let new_size = realloc_size(&b, new_size);
                let l = Layout::from_size_align(b.size, b.align).unwrap();
                if !live.has_room(new_size, b.align) {
                    // SAFETY: `p` is live with layout `l`.
                    unsafe { A.dealloc(p, l) };
                    continue;
                }
                // SAFETY: `p` is live with layout `l`; `new_size` is non-zero
                // and does not overflow when rounded to `l.align()`.
                let q = unsafe { A.realloc(p, l, new_size) };
                assert!(!q.is_null(), "realloc {l:?} to {new_size} failed");
                // SAFETY: `q` holds `min(old, new)` bytes of the old block.
                unsafe { check(q, b.size, b.size.min(new_size), b.tag) };
                let nl = Layout::from_size_align(new_size, b.align).unwrap();
                check_home(q, nl);
                // SAFETY: `q` is handed out to us now.
                unsafe { live.add(q, new_size, b.align) };
            }
        }
    }
    for (p, b) in live.drain() {
        // SAFETY: every live block is freed once, with its layout.
        unsafe { A.dealloc(p, Layout::from_size_align(b.size, b.align).unwrap()) };
    }
}

fuzz_target!(|data: &[u8]| run(data));
