//! The program's global allocator, chosen by cargo feature. Exactly one
//! feature (or none, for glibc's malloc) should be enabled; `run.sh` builds
//! one binary per feature.

#[cfg(any(
    all(feature = "smalloc", feature = "mimalloc"),
    all(feature = "smalloc", feature = "jemalloc"),
    all(feature = "smalloc", feature = "snmalloc"),
    all(feature = "smalloc", feature = "rpmalloc"),
    all(feature = "mimalloc", feature = "jemalloc"),
    all(feature = "mimalloc", feature = "snmalloc"),
    all(feature = "mimalloc", feature = "rpmalloc"),
    all(feature = "jemalloc", feature = "snmalloc"),
    all(feature = "jemalloc", feature = "rpmalloc"),
    all(feature = "snmalloc", feature = "rpmalloc"),
))]
compile_error!(
    "simd-json-bench: enable at most one allocator feature \
     (smalloc, mimalloc, jemalloc, snmalloc, rpmalloc)"
);

#[cfg(feature = "smalloc")]
#[global_allocator]
static GLOBAL: smalloc::Smalloc = smalloc::Smalloc::new();
#[cfg(feature = "smalloc")]
/// The name of the global allocator of this build.
pub const NAME: &str = "smalloc";

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
#[cfg(feature = "mimalloc")]
/// The name of the global allocator of this build.
pub const NAME: &str = "mimalloc";

#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
#[cfg(feature = "jemalloc")]
/// The name of the global allocator of this build.
pub const NAME: &str = "jemalloc";

#[cfg(feature = "snmalloc")]
#[global_allocator]
static GLOBAL: snmalloc_rs::SnMalloc = snmalloc_rs::SnMalloc;
#[cfg(feature = "snmalloc")]
/// The name of the global allocator of this build.
pub const NAME: &str = "snmalloc";

#[cfg(feature = "rpmalloc")]
#[global_allocator]
static GLOBAL: bench::rpmalloc_alloc::RpMalloc<true> = bench::rpmalloc_alloc::RpMalloc;
#[cfg(feature = "rpmalloc")]
/// The name of the global allocator of this build.
pub const NAME: &str = "rpmalloc";

#[cfg(not(any(
    feature = "smalloc",
    feature = "mimalloc",
    feature = "jemalloc",
    feature = "snmalloc",
    feature = "rpmalloc"
)))]
/// The name of the global allocator of this build (glibc's malloc).
pub const NAME: &str = "system";
