//! `--svg FILE`: the summary as a bar chart, written by hand. One bar per
//! peer: the geometric mean of smalloc's time over the peer's time, on a
//! log scale around 1.0 (bars to the left: smalloc faster), and below it
//! one small bar per row and peer so the losing rows stand out. (A version
//! on plotters' SVG backend was tried: about as many lines, four more
//! crates, and less say over the layout: no row headings, estimated text
//! widths.)

use std::fmt::Write;

use super::{Analysis, machine, peers, ratio};
use crate::measure::Row;

const WIDTH: f64 = 900.0;
const LEFT: f64 = 260.0;
const RIGHT: f64 = 40.0;
/// The axis spans 1/8x .. 8x.
const SPAN: f64 = 3.0;

/// X coordinate of ratio `r` (log2 scale, 1.0 in the middle).
fn x_of(r: f64) -> f64 {
    let t = (r.log2().clamp(-SPAN, SPAN) + SPAN) / (2.0 * SPAN);
    LEFT + t * (WIDTH - LEFT - RIGHT)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One horizontal bar from 1.0 to `r`, labelled.
fn bar(s: &mut String, y: f64, h: f64, label: &str, r: f64) {
    let (x0, x1) = (x_of(1.0), x_of(r));
    let color = if r <= 1.0 { "#2a9d4b" } else { "#d1495b" };
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"{:.0}\">{}</text>",
        LEFT - 8.0,
        y + h * 0.75,
        (h * 0.8).clamp(9.0, 14.0),
        esc(label)
    );
    let _ = writeln!(
        s,
        "<rect x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{color}\"/>",
        x0.min(x1),
        (x1 - x0).abs().max(1.0)
    );
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"{:.0}\" {}>{r:.2}x</text>",
        if r <= 1.0 { x1 - 4.0 } else { x1 + 4.0 },
        y + h * 0.75,
        (h * 0.8).clamp(9.0, 12.0),
        if r <= 1.0 { "text-anchor=\"end\"" } else { "" }
    );
}

/// Renders the chart.
pub fn render(rows: &[Row], an: &Analysis) -> String {
    let peers = peers(rows);
    let summary_h = 28.0 * an.peers.len() as f64;
    let per_row_h = 11.0 * (rows.len() * peers.len()) as f64 + 14.0 * rows.len() as f64;
    let height = 110.0 + summary_h + 50.0 + per_row_h + 30.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height:.0}\" \
         font-family=\"sans-serif\"><rect width=\"100%\" height=\"100%\" fill=\"white\"/>"
    );
    let (cpu, cores) = machine();
    let _ = writeln!(
        s,
        "<text x=\"20\" y=\"28\" font-size=\"18\" font-weight=\"bold\">smalloc time / peer time \
         (geometric mean over {} rows; left of 1.0 = smalloc faster)</text>",
        rows.len()
    );
    let _ = writeln!(
        s,
        "<text x=\"20\" y=\"48\" font-size=\"12\" fill=\"#555\">{}, {cores} cores; log scale \
         1/8x .. 8x</text>",
        esc(&cpu)
    );
    let top = 70.0;
    let bottom = height - 20.0;
    for r in [0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0] {
        let x = x_of(r);
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{top}\" x2=\"{x:.1}\" y2=\"{bottom:.1}\" stroke=\"{}\" \
             stroke-width=\"{}\"/><text x=\"{x:.1}\" y=\"{:.1}\" font-size=\"10\" \
             text-anchor=\"middle\" fill=\"#555\">{r}x</text>",
            if r == 1.0 { "#000" } else { "#ddd" },
            if r == 1.0 { 1.5 } else { 1.0 },
            top - 4.0
        );
    }
    let mut y = top + 10.0;
    for p in &an.peers {
        bar(&mut s, y, 20.0, &format!("vs {}", p.peer), p.geomean);
        y += 28.0;
    }
    y += 20.0;
    let _ = writeln!(
        s,
        "<text x=\"20\" y=\"{y:.1}\" font-size=\"14\" font-weight=\"bold\">per row</text>"
    );
    y += 14.0;
    for r in rows {
        let _ = writeln!(
            s,
            "<text x=\"20\" y=\"{:.1}\" font-size=\"11\" font-weight=\"bold\">{}</text>",
            y + 10.0,
            esc(&r.spec.label())
        );
        y += 14.0;
        for p in &peers {
            if let Some(x) = ratio(r, p) {
                bar(&mut s, y, 9.0, &format!("vs {p}"), x);
            }
            y += 11.0;
        }
    }
    s.push_str("</svg>\n");
    s
}
