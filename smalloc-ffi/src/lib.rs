//! smalloc as a C allocator.
//!
//! Built as `libsmalloc.so` (for `LD_PRELOAD`) and `libsmalloc.a` (for
//! static linking). Both export:
//!
//! * the prefixed API declared in `include/smalloc.h` (`prefixed.rs`):
//!   `smalloc_malloc`, `smalloc_free`, ...;
//! * the standard names (`malloc`, `free`, ..., `interpose.rs`) and glibc's
//!   `__libc_*` aliases, so the library replaces the C allocator of the
//!   whole process;
//! * the C++ `operator new`/`operator delete` family (`cxx.rs`).
//! * `setrlimit`, `prlimit` and `mlockall` (`limits.rs`), which give the
//!   reservation up before the process lowers its own address-space or
//!   data limit or locks all its memory.
//!
//! Every entry point is a thin wrapper around one function of `c_alloc.rs`,
//! which holds the C semantics (errno, `malloc(0)`, `realloc` edge cases,
//! alignment rules). Slots come from the core crate's pointer-only API
//! (`smalloc::raw`); requests above the largest slot are served by
//! `big.rs` mappings; pointers that belong to neither are *foreign* and go
//! to the next allocator in the chain (`next.rs`).
//!
//! Nothing reachable from an allocation entry point uses `std`: no
//! allocation, no formatting, no panics. `std` is linked only where a
//! `cdylib` needs its unwinding panic runtime (the dev and test profiles)
//! and for the profiler; the release build (`panic = "abort"`) has its own
//! panic handler, so it loads neither std's code nor `libgcc_s`.
#![cfg_attr(not(test), no_std)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

// Only the prefixed API goes into the header: every other module is marked
// `cbindgen:ignore`.

// The panic handler and unwinding runtime (see the crate documentation).
#[cfg(any(test, panic = "unwind", feature = "profile"))]
extern crate std as _;
// The profiler's writers (the `profile` feature) use std by name.
#[cfg(feature = "profile")]
extern crate std;

/// cbindgen:ignore
mod big;
/// cbindgen:ignore
mod big_registry;
/// cbindgen:ignore
mod c_alloc;
/// cbindgen:ignore
mod cxx;
/// cbindgen:ignore
mod errno;
/// cbindgen:ignore
mod interpose;
/// cbindgen:ignore
mod introspect;
/// cbindgen:ignore
mod lifecycle;
/// cbindgen:ignore
mod limits;
/// cbindgen:ignore
mod next;
/// cbindgen:ignore
#[cfg(not(any(test, panic = "unwind", feature = "profile")))]
mod panic;
mod prefixed;
/// cbindgen:ignore
mod profile;
