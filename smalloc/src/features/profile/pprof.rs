//! A [`Profile`] in pprof's format: the messages of pprof's
//! `profile.proto` (the fields smalloc fills, under the same names and
//! tags) encoded by prost, gzipped by flate2. Public so that a reader can
//! decode a profile with the same definitions.
#![allow(missing_docs)]

use crate::features::std;
use std::collections::HashMap;
use std::io::{self, Write};
use std::string::{String, ToString};
use std::vec::Vec;

use prost::Message;

use super::output::{Profile, Symbols, allocator_cut};
use super::sampler;

impl Profile {
    /// Writes the profile in pprof's format (gzipped protobuf, readable by
    /// `go tool pprof` and speedscope) to `w`: sample types alloc_objects,
    /// alloc_space, inuse_objects, inuse_space, as Go's heap profiles.
    pub fn write_pprof(&self, w: impl io::Write) -> io::Result<()> {
        let _inside = sampler::Inside::enter();
        write(self, &mut Symbols::default(), w)
    }
}

/// pprof's `Profile` message (the fields smalloc fills).
#[derive(Clone, PartialEq, Message)]
pub struct PProfile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// pprof's `ValueType`: indexes into the string table.
#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// pprof's `Sample`.
#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// pprof's `Label`.
#[derive(Clone, PartialEq, Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// pprof's `Mapping`.
#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// pprof's `Location`.
#[derive(Clone, PartialEq, Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

/// pprof's `Line`.
#[derive(Clone, PartialEq, Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

/// pprof's `Function`.
#[derive(Clone, PartialEq, Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
}

/// Strings interned into the string table (index 0 is "").
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        let mut s = Strings {
            table: Vec::new(),
            index: HashMap::new(),
        };
        s.id("");
        s
    }

    fn id(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// The executable mappings of the process, from /proc/self/maps.
fn mappings(strings: &mut Strings) -> Vec<Mapping> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut out = Vec::new();
    for line in maps.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 || !f[1].contains('x') {
            continue;
        }
        let Some((lo, hi)) = f[0].split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi), Ok(off)) = (
            u64::from_str_radix(lo, 16),
            u64::from_str_radix(hi, 16),
            u64::from_str_radix(f[2], 16),
        ) else {
            continue;
        };
        out.push(Mapping {
            id: out.len() as u64 + 1,
            memory_start: lo,
            memory_limit: hi,
            file_offset: off,
            filename: strings.id(f[5]),
            has_functions: true,
            has_inline_frames: true,
        });
    }
    out
}

/// Builds the pprof message of `p`.
pub(super) fn build(p: &Profile, names: &mut Symbols) -> PProfile {
    let mut strings = Strings::new();
    let st = |t: &str, u: &str, s: &mut Strings| ValueType {
        r#type: s.id(t),
        unit: s.id(u),
    };
    let sample_type = std::vec![
        st("alloc_objects", "count", &mut strings),
        st("alloc_space", "bytes", &mut strings),
        st("inuse_objects", "count", &mut strings),
        st("inuse_space", "bytes", &mut strings),
    ];
    let period_type = st("space", "bytes", &mut strings);
    let mapping = mappings(&mut strings);
    let mut functions: HashMap<String, u64> = HashMap::new();
    let mut function = Vec::new();
    // By return address and the inlined names the allocator's cut drops.
    let mut locations: HashMap<(usize, usize), u64> = HashMap::new();
    let mut location = Vec::new();
    let mut sample = Vec::new();
    for s in &p.stacks {
        let mut ids = Vec::new();
        let cut = allocator_cut(names, &s.frames);
        for (i, &ip) in s.frames.iter().enumerate().skip(cut.frames) {
            let skip = if i == cut.frames { cut.names } else { 0 };
            let frame_names = names.names(ip)[skip..].to_vec();
            let id = *locations.entry((ip, skip)).or_insert_with(|| {
                let line = frame_names
                    .iter()
                    .map(|n| {
                        let next = functions.len() as u64 + 1;
                        let fid = *functions.entry(n.clone()).or_insert_with(|| {
                            let name = strings.id(n);
                            function.push(Function {
                                id: next,
                                name,
                                system_name: name,
                            });
                            next
                        });
                        Line {
                            function_id: fid,
                            line: 0,
                        }
                    })
                    .collect();
                let ip = ip as u64;
                let mapping_id = mapping
                    .iter()
                    .find(|m| (m.memory_start..m.memory_limit).contains(&ip))
                    .map_or(0, |m| m.id);
                location.push(Location {
                    id: location.len() as u64 + 1,
                    mapping_id,
                    address: ip.saturating_sub(1),
                    line,
                });
                location.len() as u64
            });
            ids.push(id);
        }
        let v = |t: &super::output::Totals| [t.count.round() as i64, t.bytes.round() as i64];
        let ([count, bytes], [live_count, live_bytes]) = (v(&s.allocated), v(&s.live));
        sample.push(Sample {
            location_id: ids,
            value: std::vec![count, bytes, live_count, live_bytes],
            label: Vec::new(),
        });
    }
    let mut comment = Vec::new();
    if p.lost > 0 {
        comment.push(strings.id(&std::format!(
            "smalloc: {} samples lost (the profile's table was full): the estimates are low",
            p.lost
        )));
    }
    PProfile {
        sample_type,
        sample,
        mapping,
        location,
        function,
        string_table: strings.table,
        time_nanos: p.time_ns as i64,
        period_type: Some(period_type),
        period: p.mean as i64,
        comment,
        default_sample_type: 3,
    }
}

/// Writes `p` gzipped to `w`.
pub(super) fn write(p: &Profile, names: &mut Symbols, w: impl Write) -> io::Result<()> {
    let bytes = build(p, names).encode_to_vec();
    let mut gz = flate2::write::GzEncoder::new(w, flate2::Compression::default());
    gz.write_all(&bytes)?;
    gz.finish()?;
    Ok(())
}
