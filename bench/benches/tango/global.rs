//! The global allocator of this bench binary: smalloc, unless a
//! `global-*` cargo feature of the bench package picks a peer. The tango
//! harness itself runs on the same allocator (in each side's own process).

#[cfg(not(any(
    feature = "global-system",
    feature = "global-mimalloc",
    feature = "global-jemalloc",
    feature = "global-snmalloc",
    feature = "global-rpmalloc"
)))]
mod chosen {
    #[global_allocator]
    static GLOBAL: smalloc::Smalloc = smalloc::Smalloc::new();
    pub const NAME: &str = "smalloc";
}

#[cfg(feature = "global-system")]
mod chosen {
    pub const NAME: &str = "system";
}

#[cfg(all(feature = "global-mimalloc", not(feature = "global-system")))]
mod chosen {
    #[global_allocator]
    static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
    pub const NAME: &str = "mimalloc";
}

#[cfg(all(
    feature = "global-jemalloc",
    not(any(feature = "global-system", feature = "global-mimalloc"))
))]
mod chosen {
    #[global_allocator]
    static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
    pub const NAME: &str = "jemalloc";
}

#[cfg(all(
    feature = "global-snmalloc",
    not(any(
        feature = "global-system",
        feature = "global-mimalloc",
        feature = "global-jemalloc"
    ))
))]
mod chosen {
    #[global_allocator]
    static GLOBAL: snmalloc_rs::SnMalloc = snmalloc_rs::SnMalloc;
    pub const NAME: &str = "snmalloc";
}

#[cfg(all(
    feature = "global-rpmalloc",
    not(any(
        feature = "global-system",
        feature = "global-mimalloc",
        feature = "global-jemalloc",
        feature = "global-snmalloc"
    ))
))]
mod chosen {
    #[global_allocator]
    static GLOBAL: bench::rpmalloc_alloc::RpMalloc<true> = bench::rpmalloc_alloc::RpMalloc;
    pub const NAME: &str = "rpmalloc";
}

/// The name of this binary's global allocator (if several `global-*`
/// features are on, the first of system, mimalloc, jemalloc, snmalloc,
/// rpmalloc wins).
pub const NAME: &str = chosen::NAME;

/// Whether the global allocator is smalloc.
pub const IS_SMALLOC: bool = cfg!(not(any(
    feature = "global-system",
    feature = "global-mimalloc",
    feature = "global-jemalloc",
    feature = "global-snmalloc",
    feature = "global-rpmalloc"
)));

/// With the `smalloc-profile` feature and `SMALLOC_BENCH_PROF=MEAN` (bytes)
/// in the environment, smalloc's heap profiler samples from the moment the
/// binary is loaded (nothing is written): for measuring the cost of
/// sampling with `bench/ab.sh`. Stacks are walked by frame pointers (build
/// with `RUSTFLAGS="-C force-frame-pointers=yes"`), or by the DWARF
/// unwinder with `SMALLOC_BENCH_PROF_UNWIND=dwarf`.
#[cfg(feature = "smalloc-profile")]
#[used]
#[unsafe(link_section = ".init_array")]
static START_PROFILE: extern "C" fn() = {
    extern "C" fn start() {
        if let Some(mean) = std::env::var("SMALLOC_BENCH_PROF")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            let unwind = match std::env::var("SMALLOC_BENCH_PROF_UNWIND").as_deref() {
                Ok("dwarf") => smalloc::profile::Unwind::Dwarf,
                _ => smalloc::profile::Unwind::FramePointers,
            };
            smalloc::profile::start(mean, unwind);
        }
    }
    start
};
