//! The layout's *geometry* as it stands: its base address (where the
//! reservation, or the window mapped on demand, starts), how its address
//! space is held, and the largest slot new blocks get. Set once by the
//! first allocation ([`reservation`](crate::reservation), which owns the
//! protocol); read by every path that turns a slab number into an address.

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::layout::MAX_SC;

/// The base address (aligned, so even), [`UNINIT`], or a "reserving" mark
/// (odd) while a thread makes the layout ([`reservation`](crate::reservation)
/// owns the protocol).
pub static BASE: AtomicUsize = AtomicUsize::new(UNINIT);

/// No layout yet.
pub const UNINIT: usize = 0;

/// The base address if the layout exists; [`UNINIT`] or a reserving mark
/// otherwise.
#[inline(always)]
pub fn base_raw() -> usize {
    // Acquire: pairs with the Release store that publishes the base, so a
    // thread that sees the base also sees the mapping as made by the thread
    // that made it.
    BASE.load(Ordering::Acquire)
}

/// Whether `raw` (from [`base_raw`]) is a real base.
#[inline(always)]
pub fn is_ready(raw: usize) -> bool {
    raw != UNINIT && raw & 1 == 0
}

/// The base address, if the layout exists.
#[inline]
pub fn base() -> Option<usize> {
    let raw = base_raw();
    is_ready(raw).then_some(raw)
}

/// Whether a slot allocation that just failed may fall back to a mapping
/// of its own: when the layout exists (its slots of the request's class and
/// the larger ones were used up, or a commit was refused). Without a layout
/// (the system refused even the slabs' metadata) slot requests fail, as
/// docs/design.md says, rather than each becoming a mapping.
#[inline]
pub fn slots_used_up() -> bool {
    base().is_some()
}

/// How the layout's address space is held, as the statistics report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Geometry {
    /// Nothing yet: no allocation has been made.
    None,
    /// One reservation of the whole layout (the default). Its untouched
    /// parts are left out of core dumps.
    Reserved,
    /// No reservation: each region is mapped as it is used, at its layout
    /// address; for this reason.
    OnDemand(Why),
}

/// Why the layout's address space is mapped on demand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// The environment asked for it (`SMALLOC_RESERVE=0`).
    Asked,
    /// The kernel refused the reservation under an address-space limit
    /// (`RLIMIT_AS`, `ulimit -v`) of this many bytes.
    AddressSpaceLimit(u64),
    /// The kernel refused it under a data limit (`RLIMIT_DATA`, `ulimit
    /// -d`) of this many bytes.
    DataLimit(u64),
    /// The kernel refused it under strict overcommit
    /// (`vm.overcommit_memory=2`), which charges every writable mapping.
    StrictOvercommit,
    /// The kernel refused it with this `errno` for another reason.
    Refused(i32),
    /// The program gave the reservation up after it was made
    /// ([`map_on_demand`](crate::map_on_demand); in C, by lowering its
    /// `RLIMIT_AS` or `RLIMIT_DATA`, or by `mlockall`): what was not
    /// committed is unmapped.
    GivenUp,
}

/// The geometry's code ([`Geometry`] order; `Why` for on demand) and its
/// value (a limit, an errno). Written before the base is published, read
/// after it is seen.
static GEOMETRY: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];

/// Codes in [`GEOMETRY`].
pub const RESERVED: u64 = 1;
pub const ASKED: u64 = 2;
pub const AS_LIMIT: u64 = 3;
pub const DATA_LIMIT: u64 = 4;
pub const STRICT: u64 = 5;
pub const REFUSED: u64 = 6;
pub const GIVEN_UP: u64 = 7;

/// How the layout's address space is held now.
pub fn geometry() -> Geometry {
    if base().is_none() {
        return Geometry::None;
    }
    // Relaxed: written before the base's Release store, which `base::raw`
    // acquired.
    let value = GEOMETRY[1].load(Ordering::Relaxed);
    Geometry::OnDemand(match GEOMETRY[0].load(Ordering::Relaxed) {
        RESERVED => return Geometry::Reserved,
        ASKED => Why::Asked,
        AS_LIMIT => Why::AddressSpaceLimit(value),
        DATA_LIMIT => Why::DataLimit(value),
        STRICT => Why::StrictOvercommit,
        GIVEN_UP => Why::GivenUp,
        _ => Why::Refused(value as i32),
    })
}

/// Whether the regions are mapped on demand (no reservation). Only
/// meaningful once the base is seen.
#[inline]
pub fn on_demand() -> bool {
    // Relaxed: see `geometry`.
    GEOMETRY[0].load(Ordering::Relaxed) > RESERVED
}

/// [`on_demand`] in the total order of sequentially consistent
/// operations (a commit in the reservation against the reservation given
/// up: `commit`).
#[inline]
pub fn on_demand_now() -> bool {
    // SeqCst: see `commit::in_reservation`.
    GEOMETRY[0].load(Ordering::SeqCst) > RESERVED
}

/// Records the geometry: before the base is published, or when the
/// reservation is given up (`reservation::give_up`).
pub fn set_geometry(code: u64, value: u64) {
    // Relaxed: the value is read after the code (a report may pair a new
    // code with the old value once).
    GEOMETRY[1].store(value, Ordering::Relaxed);
    // SeqCst: published by the base's Release store, or, when the
    // reservation is given up, ordered against the commits in it
    // (`commit::in_reservation`).
    GEOMETRY[0].store(code, Ordering::SeqCst);
    if code != RESERVED {
        LARGEST_SC.store(ON_DEMAND_MAX_SC, Ordering::Relaxed);
    }
}

/// The largest size class of slots on demand (32 MiB): a larger block gets
/// a mapping of its own, as glibc's do above its largest mmap threshold, so
/// that what an address-space limit or strict overcommit counts is about
/// the block's size, not the size class above it.
pub const ON_DEMAND_MAX_SC: u32 = {
    let sc = crate::layout::class_of_mask((32 << 20) - 1);
    if MAX_SC < sc { MAX_SC } else { sc }
};

/// The largest size class that new blocks are given slots of.
static LARGEST_SC: AtomicU32 = AtomicU32::new(MAX_SC);

/// The largest size class that new blocks are given slots of: [`MAX_SC`],
/// or that of 32 MiB on demand. A policy only: whether a block is a slot is
/// told by its address (`raw::owns`).
#[inline]
pub fn largest_sc() -> u32 {
    // Relaxed: a policy; set before the base is published, and any value
    // read before is as valid.
    LARGEST_SC.load(Ordering::Relaxed)
}
