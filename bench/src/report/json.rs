//! JSON: one document with the machine, every row's cells, the summary
//! and (with `--isolate`) each allocator's resource use. Written by hand;
//! numbers that are not finite become `null`.

use std::fmt::Write;

use super::{Analysis, cell_summary, machine, ratio};
use crate::isolate::Usage;
use crate::measure::Row;

/// A JSON string literal.
fn string(s: &str) -> String {
    let mut o = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// A JSON number (or null).
fn num(x: f64) -> String {
    if x.is_finite() {
        format!("{x}")
    } else {
        "null".into()
    }
}

/// Renders the document.
pub fn render(rows: &[Row], an: &Analysis, usage: &[Usage]) -> String {
    let (cpu, cores) = machine();
    let mut s = String::new();
    let _ = write!(
        s,
        "{{\"machine\":{{\"cpu\":{},\"cores\":{cores}}},\"unit\":\"ns_per_op\",\"rows\":[",
        string(&cpu)
    );
    for (i, r) in rows.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(
            s,
            "{{\"workload\":{},\"threads\":{},\"label\":{},\"results\":[",
            string(r.spec.workload.name),
            r.spec.threads,
            string(&r.spec.label())
        );
        for (j, c) in r.cells.iter().enumerate() {
            let x = cell_summary(r, &c.alloc).expect("cell exists");
            let samples: Vec<String> = c.samples.iter().map(|&v| num(v)).collect();
            let ratio = if c.alloc == "smalloc" {
                "null".into()
            } else {
                ratio(r, &c.alloc).map_or("null".into(), num)
            };
            let _ = write!(
                s,
                "{}{{\"allocator\":{},\"median_ns\":{},\"min_ns\":{},\"max_ns\":{},\
                 \"mad_pct\":{},\"smalloc_ratio\":{ratio},\"samples\":[{}]}}",
                if j > 0 { "," } else { "" },
                string(&c.alloc),
                num(x.median),
                num(x.min),
                num(x.max),
                num(x.mad_pct),
                samples.join(",")
            );
        }
        s.push_str("]}");
    }
    s.push_str("],\"summary\":{\"geomean_ratio\":{");
    for (i, p) in an.peers.iter().enumerate() {
        let _ = write!(
            s,
            "{}{}:{{\"ratio\":{},\"wins\":{},\"rows\":{}}}",
            if i > 0 { "," } else { "" },
            string(&p.peer),
            num(p.geomean),
            p.wins,
            p.rows
        );
    }
    s.push_str("},\"losses\":[");
    for (i, l) in an.losses.iter().enumerate() {
        let _ = write!(
            s,
            "{}{{\"label\":{},\"peer\":{},\"ratio\":{},\"smalloc_ns\":{},\"peer_ns\":{}}}",
            if i > 0 { "," } else { "" },
            string(&l.label),
            string(&l.peer),
            num(l.ratio),
            num(l.smalloc_ns),
            num(l.peer_ns)
        );
    }
    s.push_str("]},\"isolate\":[");
    for (i, u) in usage.iter().enumerate() {
        let _ = write!(
            s,
            "{}{{\"allocator\":{},\"peak_rss_kib\":{},\"minor_faults\":{},\"major_faults\":{},\
             \"user_s\":{},\"sys_s\":{},\"wall_s\":{}}}",
            if i > 0 { "," } else { "" },
            string(&u.alloc),
            u.max_rss_kib,
            u.minflt,
            u.majflt,
            num(u.user_s),
            num(u.sys_s),
            num(u.wall_s)
        );
    }
    s.push_str("]}\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped() {
        assert_eq!(string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
        assert_eq!(num(f64::NAN), "null");
    }
}
