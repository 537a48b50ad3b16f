//! What runs when the library is loaded, when the process forks and when it
//! exits.
//!
//! * Load (an `.init_array` entry, before `main` for `LD_PRELOAD` and static
//!   linking, inside `dlopen` otherwise): make smalloc's reservation now,
//!   while the process most likely has one thread (the core's lazy
//!   initialization has a window in which a `fork` would leave the child
//!   waiting forever for a reservation that the parent's other thread was
//!   making); resolve the next allocator's `free`, `realloc` and
//!   `malloc_usable_size` (see [`next`](crate::next)); register the fork
//!   handler; start the heap profiler if `SMALLOC_PROF` asks (a library
//!   built with the `profile` feature, [`profile`](crate::profile)).
//! * Fork, in the child: release the symbol resolver's lock. The slot free
//!   lists and the big-allocation registry are lock-free, so a fork taken at
//!   any instant leaves them consistent (at worst a block that a parent
//!   thread was allocating or freeing at that instant is leaked in the
//!   child).
//! * Exit (an `.fini_array` entry): the heap profile, if profiling; the
//!   optional statistics report (`SMALLOC_STATS`,
//!   [`introspect`](crate::introspect)).

use smalloc_core::raw;

/// Runs when the library is loaded.
extern "C" fn on_load() {
    raw::reserve();
    crate::next::resolve_common();
    crate::profile::on_load();
    // SAFETY: a handler that only stores to an atomic is async-signal-safe,
    // as a fork child handler must be.
    unsafe { libc::pthread_atfork(None, None, Some(on_fork_child)) };
}

/// Runs in the child after `fork`.
extern "C" fn on_fork_child() {
    crate::next::reset_after_fork();
}

/// Runs at exit.
extern "C" fn on_exit() {
    crate::profile::at_exit();
    crate::introspect::at_exit();
}

#[used]
#[unsafe(link_section = ".init_array")]
static ON_LOAD: extern "C" fn() = on_load;

#[used]
#[unsafe(link_section = ".fini_array")]
static ON_EXIT: extern "C" fn() = on_exit;
