//! Which optional features this build has: constants only, for the lower
//! floors (`layout`, `thread_words`), which the features build on and so
//! cannot call into. Each feature's effect on them: `secure`, a smallest
//! slot of 16 bytes (a link and its check); `valgrind`, a geometry small
//! enough for memcheck to keep state for; `va39`, one small enough for a
//! 39-bit address space; `profile`, the last slab
//! reserved for sampled blocks and five more thread words.

/// The secure mode: free-list links stored encoded and checked.
pub const SECURE: bool = cfg!(feature = "secure");
/// memcheck's view of the blocks, in a small geometry.
pub const VALGRIND: bool = cfg!(feature = "valgrind");
/// The heap profiler.
pub const PROFILE: bool = cfg!(feature = "profile");
/// The event counters.
pub const COUNTERS: bool = cfg!(feature = "counters");
/// A layout that fits a 39-bit virtual address space (512 GiB a process).
pub const VA39: bool = cfg!(feature = "va39");
