//! The text report of a [`Snapshot`], in the style of tcmalloc's: one
//! number per line with its meaning, then a table per size class and one
//! per slab; with the `counters` feature, the counts and events after. Every number line starts with `MALLOC:`, then the number;
//! table rows start with the size class or slab number.

use core::fmt::{self, Write};

use super::{Geometry, Snapshot, Why};
use crate::counters::NAMES;
use crate::layout::{self, NUM_SLABS};

/// The slot size of class `sc` in the largest unit that divides it:
/// (number, unit).
fn slot_size(sc: u32) -> (u64, &'static str) {
    let mut n = layout::slot_size(sc) as u64;
    let mut k = 0;
    while k < 3 && n % 1024 == 0 {
        n /= 1024;
        k += 1;
    }
    (n, ["B", "KiB", "MiB", "GiB"][k])
}

/// One `MALLOC:` line: `sign`, a byte count with MiB, and its meaning.
fn bytes_line(w: &mut impl Write, sign: char, n: u64, what: &str) -> fmt::Result {
    // Tenths of a MiB in integers: float formatting would add 20 KB of text.
    let tenths = ((u128::from(n) * 10 + (1 << 19)) >> 20) as u64;
    let (whole, tenth) = (tenths / 10, tenths % 10);
    writeln!(w, "MALLOC: {sign} {n:>15} ({whole:>8}.{tenth} MiB) {what}")
}

/// One `MALLOC:` line of a count.
fn count_line(w: &mut impl Write, n: u64, what: &str) -> fmt::Result {
    writeln!(w, "MALLOC:   {n:>15}                  {what}")
}

const RULE: &str = "------------------------------------------------";

/// The line saying how the layout's address space is held, and why.
fn geometry_line(w: &mut impl Write, g: Geometry) -> fmt::Result {
    let whole = layout::TOTAL_SIZE >> 30;
    let refused = "the reservation was refused under";
    let mib = |n: u64| n >> 20;
    match g {
        Geometry::None => writeln!(w, "Address space: none yet (no allocation made)"),
        Geometry::Reserved => writeln!(
            w,
            "Address space: one reservation of {whole} GiB; core dumps hold its committed part"
        ),
        Geometry::OnDemand(why) => {
            write!(
                w,
                "Address space: regions mapped on demand (no reservation: "
            )?;
            match why {
                Why::Asked => write!(w, "SMALLOC_RESERVE=0")?,
                Why::AddressSpaceLimit(n) => {
                    write!(w, "{refused} an address-space limit of {} MiB", mib(n))?
                }
                Why::DataLimit(n) => write!(w, "{refused} a data limit of {} MiB", mib(n))?,
                Why::StrictOvercommit => write!(w, "{refused} strict overcommit")?,
                Why::Refused(e) => write!(w, "the kernel refused the reservation, errno {e}")?,
                Why::GivenUp => write!(w, "the program gave the reservation up")?,
            }
            writeln!(w, ")")
        }
    }
}

/// Writes the report of `s`.
pub fn report(w: &mut impl Write, s: &Snapshot) -> fmt::Result {
    writeln!(w, "{RULE}")?;
    geometry_line(w, s.geometry)?;
    bytes_line(
        w,
        ' ',
        s.live_bytes(),
        "Bytes in use by the application (whole slots)",
    )?;
    bytes_line(
        w,
        '+',
        s.free_bytes(),
        "Bytes in freed slots on smalloc's lists",
    )?;
    bytes_line(
        w,
        '=',
        s.handed_out_bytes(),
        "Bytes of slots ever handed out",
    )?;
    writeln!(w, "MALLOC:")?;
    bytes_line(
        w,
        ' ',
        s.resident_bytes,
        "Bytes resident in the slots' pages",
    )?;
    bytes_line(
        w,
        ' ',
        s.trimmable_bytes,
        "Bytes a trim could release (malloc_trim)",
    )?;
    bytes_line(
        w,
        ' ',
        s.purged_bytes,
        "Bytes given back to the kernel by purges and trims, ever",
    )?;
    bytes_line(
        w,
        ' ',
        s.big_bytes,
        "Bytes of big allocations (a mapping each)",
    )?;
    count_line(w, s.big_count, "Big allocations")?;
    let handed_out = s.used_classes().map(|(_, c)| c.handed_out).sum();
    count_line(w, handed_out, "Slots ever handed out")?;
    count_line(w, s.live_slots(), "Slots in use")?;
    count_line(w, s.free_slots(), "Freed slots on lists")?;
    count_line(w, s.purge_resets, "Regions reset to never-used by purges")?;
    count_line(
        w,
        s.purge_spans,
        "Spans of freed slots given back by purges",
    )?;
    count_line(
        w,
        s.purge_nudges,
        "Owners nudged to hand their private lists over",
    )?;
    let shared: u64 = s.used_classes().map(|(_, c)| c.shared_frees).sum();
    count_line(w, shared, "Frees onto shared lists (mod 2^32 per list)")?;
    let in_use = s.slabs.iter().filter(|l| l.handed_out_bytes != 0).count() as u64;
    count_line(w, in_use, "Slabs in use")?;
    let owned = s.slabs.iter().filter(|l| l.owned).count() as u64;
    count_line(w, owned, "Slabs owned by a thread")?;
    let threads = s.slabs.iter().map(|l| l.threads as u64).sum();
    count_line(w, threads, "Live threads that allocated")?;
    bytes_line(
        w,
        ' ',
        s.reservation_size as u64,
        "Virtual address space reserved",
    )?;
    bytes_line(
        w,
        ' ',
        s.committed_bytes,
        "Bytes of the slots' regions committed (mapped, dumped)",
    )?;
    count_line(w, s.committed_regions, "Regions committed")?;
    bytes_line(
        w,
        ' ',
        s.largest_slot as u64,
        "Largest slot (larger blocks get a mapping each)",
    )?;
    count_line(
        w,
        s.walks_cut,
        "List walks cut short (threads were running)",
    )?;
    writeln!(w, "{RULE}")?;
    writeln!(
        w,
        "{:>5} {:>10} {:>12} {:>12} {:>13} {:>13} {:>16} {:>13}",
        "class",
        "slot size",
        "handed out",
        "in use",
        "free shared",
        "free private",
        "bytes in use",
        "shared frees"
    )?;
    for (sc, c) in s.used_classes() {
        writeln!(
            w,
            "{sc:>5} {:>6} {:<3} {:>12} {:>12} {:>13} {:>13} {:>16} {:>13}",
            slot_size(sc).0,
            slot_size(sc).1,
            c.handed_out,
            c.live(),
            c.free_shared,
            c.free_private,
            c.live() * layout::slot_size(sc) as u64,
            c.shared_frees
        )?;
    }
    writeln!(w, "{RULE}")?;
    writeln!(
        w,
        "{:>5} {:>6} {:>8} {:>18} {:>18}",
        "slab", "owned", "threads", "handed out bytes", "free bytes"
    )?;
    for (i, l) in s.slabs.iter().enumerate().take(NUM_SLABS) {
        if l.handed_out_bytes == 0 && l.threads == 0 {
            continue;
        }
        let owned = if l.owned { "yes" } else { "no" };
        writeln!(
            w,
            "{i:>5} {owned:>6} {:>8} {:>18} {:>18}",
            l.threads, l.handed_out_bytes, l.free_bytes
        )?;
    }
    writeln!(w, "{RULE}")?;
    if s.counters {
        counts(w, s)?;
    }
    Ok(())
}

/// The event counters' part of the report (the `counters` feature): totals,
/// a table per size class, the cold-path events.
fn counts(w: &mut impl Write, s: &Snapshot) -> fmt::Result {
    let t = s.counts();
    count_line(w, t.allocs, "Allocations")?;
    count_line(w, t.frees, "Frees")?;
    let by = "by threads that do not own the slot's slab";
    writeln!(
        w,
        "MALLOC:   {:>15}                  Allocations {by}",
        t.remote_allocs
    )?;
    writeln!(
        w,
        "MALLOC:   {:>15}                  Frees {by} (remote)",
        t.remote_frees
    )?;
    writeln!(w, "{RULE}")?;
    writeln!(
        w,
        "{:>5} {:>10} {:>14} {:>14} {:>14} {:>14}",
        "class", "slot size", "allocs", "frees", "remote allocs", "remote frees"
    )?;
    for (sc, c) in s.used_classes() {
        let n = &c.counts;
        writeln!(
            w,
            "{sc:>5} {:>6} {:<3} {:>14} {:>14} {:>14} {:>14}",
            slot_size(sc).0,
            slot_size(sc).1,
            n.allocs,
            n.frees,
            n.remote_allocs,
            n.remote_frees
        )?;
    }
    writeln!(w, "{RULE}")?;
    for (name, n) in NAMES.iter().zip(s.events) {
        writeln!(w, "MALLOC:   {n:>15}                  Event {name}")?;
    }
    writeln!(w, "{RULE}")
}

#[cfg(test)]
mod tests {
    use super::bytes_line;
    use std::string::String;

    fn line(n: u64) -> String {
        let mut s = String::new();
        bytes_line(&mut s, '+', n, "x").unwrap();
        s
    }

    #[test]
    fn byte_lines_show_mib_to_a_tenth_rounded_to_nearest() {
        assert_eq!(line(0), "MALLOC: +               0 (       0.0 MiB) x\n");
        assert_eq!(
            line(1 << 20),
            "MALLOC: +         1048576 (       1.0 MiB) x\n"
        );
        // 1.45 MiB and a byte rounds up, 1.04 MiB down.
        assert!(line((1 << 20) + (45 << 20) / 100 + 1).contains("(       1.5 MiB)"));
        assert!(line((1 << 20) + (4 << 20) / 100).contains("(       1.0 MiB)"));
        assert!(line(8 << 40).contains("( 8388608.0 MiB)"));
        // No overflow at the top of the range.
        assert!(line(u64::MAX).contains("(17592186044416.0 MiB)"));
    }
}
