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
use smalloc_fuzz::{HUGE, Input, Live, check_home, check_zero, realloc_block};

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
                // SAFETY: `p` is a live block of `A` with layout `l`.
                unsafe { check_home(&A, p, l) };
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
                // SAFETY: every block of `live` is a live block of `A` with
                // its recorded layout; `input.size(false)` is never zero.
                unsafe { realloc_block(&A, &mut live, pick, new_size) };
            }
        }
    }
    for (p, b) in live.drain() {
        // SAFETY: every live block is freed once, with its layout.
        unsafe { A.dealloc(p, Layout::from_size_align(b.size, b.align).unwrap()) };
    }
}

fuzz_target!(|data: &[u8]| run(data));
