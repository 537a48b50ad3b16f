//! A tango metric for benchmarks that time only part of an iteration:
//! the iteration adds the nanoseconds of its timed region with [`add`],
//! and a sample is the sum over its iterations (setup, thread starts and
//! cleanup left out, as `bench --compare` leaves them out).

use std::cell::Cell;
use std::time::Duration;

use tango_bench::Metric;

thread_local! {
    static NS: Cell<u64> = const { Cell::new(0) };
}

/// Counts `d` towards the running sample.
pub fn add(d: Duration) {
    NS.with(|c| c.set(c.get() + d.as_nanos() as u64));
}

/// The sum of what the iterations of one sample [`add`]ed.
pub struct Timed;

impl Metric for Timed {
    fn measure_fn(mut f: impl FnMut()) -> u64 {
        NS.with(|c| c.set(0));
        f();
        NS.with(Cell::get).max(1)
    }
}
