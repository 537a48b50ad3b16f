//! simd-json-bench's workload as `json/DOCUMENT/PARSER`: each corpus
//! document parsed by each parser (the parse and the drop of the value
//! timed, as simd-json-bench times them). The corpus is read from
//! `SMALLOC_JSON_CORPUS`, else from `../shared/json-corpus` beside the
//! repository; without either, the generated stand-ins are parsed.

use std::path::PathBuf;

use tango_bench::{Benchmark, benchmark_fn};

use crate::corpus;
use crate::measure::{Parser, parse_once};
use crate::timed::{self, Timed};

/// Where the corpus is, if anywhere.
fn corpus_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("SMALLOC_JSON_CORPUS") {
        return Some(dir.into());
    }
    let dir = devutils::workspace_dir().join("../shared/json-corpus");
    dir.is_dir().then_some(dir)
}

/// The benchmarks, one per (document, parser).
pub fn all() -> Vec<Benchmark> {
    let docs = corpus::load(corpus_dir().as_deref(), 1.0, &[]).expect("the JSON corpus");
    let mut v = Vec::new();
    for doc in docs {
        let bytes: &'static [u8] = doc.bytes.leak();
        for parser in Parser::ALL {
            let name = format!("json/{}/{}", doc.name, parser.name());
            v.push(benchmark_fn(name, move |b| {
                let mut scratch = Vec::with_capacity(bytes.len());
                b.metric::<Timed>().iter(move || {
                    timed::add(parse_once(parser, bytes, &mut scratch));
                })
            }));
        }
    }
    v
}
