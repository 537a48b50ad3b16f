//! Fuzzes smalloc's C entry points (`smalloc_malloc`, `smalloc_calloc`,
//! `smalloc_realloc`, `smalloc_posix_memalign`, `smalloc_aligned_alloc`,
//! `smalloc_free`, `smalloc_malloc_usable_size`) with the checks of the
//! `global_alloc` target plus the C edge cases: `malloc(0)`, `calloc`
//! overflow (NULL, `ENOMEM`), `realloc(NULL, n)`, `realloc(p, 0)` (frees,
//! NULL), `posix_memalign` with a bad alignment (`EINVAL`, `*out` and
//! `errno` untouched) and `aligned_alloc` with one (NULL, `EINVAL`).
//!
//! The functions are smalloc-ffi's own sources, compiled into this binary
//! (smalloc-ffi builds only a cdylib and a staticlib, and linking those would
//! also replace the fuzzer's own `malloc`): `prefixed.rs` and the modules it
//! uses, without the standard-name interposition, the C++ operators and the
//! load-time constructor.
#![no_main]
#![deny(unsafe_op_in_unsafe_fn)]

use core::ffi::c_void;
use std::ptr;

use libfuzzer_sys::fuzz_target;
use smalloc_fuzz::{HUGE, Input, Live, MAX_SIZE, check, check_zero, realloc_size};

#[path = "../../smalloc-ffi/src/big.rs"]
#[allow(dead_code)]
mod big;
#[path = "../../smalloc-ffi/src/big_registry.rs"]
#[allow(dead_code)]
mod big_registry;
#[path = "../../smalloc-ffi/src/c_alloc.rs"]
#[allow(dead_code)]
mod c_alloc;
#[path = "../../smalloc-ffi/src/errno.rs"]
#[allow(dead_code)]
mod errno;
#[path = "../../smalloc-ffi/src/introspect.rs"]
#[allow(dead_code)]
mod introspect;
#[path = "../../smalloc-ffi/src/next.rs"]
#[allow(dead_code)]
mod next;
#[path = "../../smalloc-ffi/src/prefixed.rs"]
#[allow(dead_code)]
mod prefixed;
// prefixed.rs's smalloc_prof_dump (without the profile feature: ENOSYS).
#[path = "../../smalloc-ffi/src/profile.rs"]
#[allow(dead_code)]
mod profile;

use prefixed::*;

/// The alignment `malloc` guarantees.
const MIN_ALIGN: usize = 16;

fn errno() -> i32 {
    // SAFETY: the calling thread's errno cell.
    unsafe { *libc::__errno_location() }
}

fn set_errno(v: i32) {
    // SAFETY: the calling thread's errno cell.
    unsafe { *libc::__errno_location() = v };
}

/// Checks a fresh block and records it.
fn accept(live: &mut Live, p: *mut c_void, size: usize, align: usize, zeroed: bool) {
    assert!(!p.is_null(), "size {size} align {align} failed");
    assert_eq!(
        p.addr() % align.max(MIN_ALIGN),
        0,
        "size {size} align {align}"
    );
    assert!(smalloc_owns(p));
    // SAFETY: `p` is live.
    assert!(unsafe { smalloc_malloc_usable_size(p) } >= size);
    if zeroed {
        // SAFETY: `p` holds `size` bytes.
        unsafe { check_zero(p.cast(), size) };
    }
    // SAFETY: just handed out.
    unsafe { live.add(p.cast(), size, align.max(MIN_ALIGN)) };
}

/// An alignment argument: usually a valid power of two, sometimes not one
/// or too small for `posix_memalign`.
fn alignment(input: &mut Input) -> Option<usize> {
    let a = input.align()?;
    Some(match input.byte()? {
        0 => a + 8,    // not a power of two (unless a == 8)
        1 => 0,        // never valid
        2 => a.min(4), // below sizeof(void *) for posix_memalign
        _ => a,
    })
}

fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let mut live = Live::new(u64::from(data.len() as u32));
    while let Some(op) = input.byte() {
        match op % 10 {
            0 => {
                let Some(size) = input.size(true) else { break };
                if !live.has_room(size, MIN_ALIGN) {
                    continue;
                }
                let p = smalloc_malloc(size);
                accept(&mut live, p, size, MIN_ALIGN, false);
            }
            1 => {
                let (Some(size), Some(n)) = (input.size(true), input.byte()) else {
                    break;
                };
                if n == 0xff && size >= 2 {
                    // n * size overflows.
                    set_errno(0);
                    let p = smalloc_calloc(usize::MAX / size + 1, size);
                    assert!(p.is_null() && errno() == libc::ENOMEM);
                    continue;
                }
                let n = if size >= HUGE { 1 } else { 1 + n as usize % 4 };
                let total = n * size;
                if !live.has_room(total, MIN_ALIGN) {
                    continue;
                }
                let p = smalloc_calloc(n, size);
                accept(&mut live, p, total, MIN_ALIGN, true);
            }
            2 | 3 => {
                let (Some(size), Some(align)) = (input.size(true), alignment(&mut input)) else {
                    break;
                };
                let size = if align > 4096 {
                    size.min(MAX_SIZE)
                } else {
                    size
                };
                if !live.has_room(size, align.max(1)) {
                    continue;
                }
                if op % 10 == 2 {
                    let mut out = ptr::without_provenance_mut::<c_void>(0x5a5a);
                    set_errno(1234);
                    // SAFETY: `out` is a valid place for a pointer.
                    let rc = unsafe { smalloc_posix_memalign(&mut out, align, size) };
                    assert_eq!(errno(), 1234, "posix_memalign changed errno");
                    if !align.is_power_of_two() || align < size_of::<*mut c_void>() {
                        assert_eq!(rc, libc::EINVAL, "align {align}");
                        assert_eq!(out.addr(), 0x5a5a, "*out written on failure");
                        continue;
                    }
                    assert_eq!(rc, 0, "posix_memalign({align}, {size})");
                    accept(&mut live, out, size, align, false);
                } else {
                    set_errno(0);
                    let p = smalloc_aligned_alloc(align, size);
                    if !align.is_power_of_two() {
                        assert!(p.is_null() && errno() == libc::EINVAL, "align {align}");
                        continue;
                    }
                    accept(&mut live, p, size, align, false);
                }
            }
            4..=6 => {
                let Some(pick) = input.byte() else { break };
                if let Some((p, _)) = live.take(pick) {
                    // SAFETY: live, and now ours.
                    unsafe { smalloc_free(p.cast()) };
                }
            }
            7 => {
                // realloc(NULL, n) allocates.
                let Some(size) = input.size(true) else { break };
                if !live.has_room(size, MIN_ALIGN) {
                    continue;
                }
                // SAFETY: null is a valid argument.
                let p = unsafe { smalloc_realloc(ptr::null_mut(), size) };
                accept(&mut live, p, size, MIN_ALIGN, false);
            }
            _ => {
                let (Some(pick), Some(new_size)) = (input.byte(), input.size(true)) else {
                    break;
                };
                let Some((p, b)) = live.take(pick) else {
                    continue;
                };
                let new_size = realloc_size(&b, new_size);
                if new_size == 0 {
                    // SAFETY: `p` is live; realloc to 0 frees it.
                    let q = unsafe { smalloc_realloc(p.cast(), 0) };
                    assert!(q.is_null(), "realloc(p, 0) returned {q:p}");
                    continue;
                }
                if !live.has_room(new_size, b.align) {
                    // SAFETY: `p` is live.
                    unsafe { smalloc_free(p.cast()) };
                    continue;
                }
                // SAFETY: `p` is live.
                let q = unsafe { smalloc_realloc(p.cast(), new_size) };
                assert!(!q.is_null(), "realloc to {new_size} failed");
                // SAFETY: `q` holds `min(old, new)` bytes of the old block.
                unsafe { check(q.cast(), b.size, b.size.min(new_size), b.tag) };
                // realloc keeps the contents, not the alignment beyond
                // malloc's (a block that stays in place keeps it anyway).
                let align = if q.cast() == p { b.align } else { MIN_ALIGN };
                accept(&mut live, q, new_size, align, false);
            }
        }
    }
    for (p, _) in live.drain() {
        // SAFETY: every live block is freed once.
        unsafe { smalloc_free(p.cast()) };
    }
}

fuzz_target!(|data: &[u8]| run(data));
