//! `bench --compare`: smalloc against glibc, mimalloc, jemalloc, snmalloc
//! and rpmalloc, each driven through its `GlobalAlloc` impl in this one
//! process (or one child process each with `--isolate`). See
//! bench/README.md for the workloads and how to read the output.
#![deny(unsafe_op_in_unsafe_fn)]

mod cli;
mod isolate;
mod measure;
mod report;

use bench::{allocators, harness, process, workloads};

use std::process::ExitCode;

use cli::{Config, Format};

/// The harness itself (thread spawning, result vectors, output) uses the
/// system allocator, the same for every allocator under test.
#[global_allocator]
static HARNESS_ALLOC: std::alloc::System = std::alloc::System;

fn list() {
    println!("allocators: {}", allocators::all_names().join(", "));
    println!("\nworkloads (default operations per batch):");
    for w in workloads::ALL {
        println!("  {:<20} {:>8}  {}", w.name, w.default_ops, w.about);
    }
}

fn compare(c: &Config) -> Result<(), String> {
    let (rows, usage) = if c.isolate && c.format != Format::Raw {
        isolate::run(c)?
    } else {
        let progress = c.format != Format::Raw;
        (measure::measure_all(c, progress), Vec::new())
    };
    let an = report::analyze(&rows);
    match c.format {
        Format::Text => print!("{}", report::text::render(&rows, &an, &usage, c.batches)),
        Format::Csv => print!("{}", report::csv::render(&rows, &usage)),
        Format::Json => print!("{}", report::json::render(&rows, &an, &usage)),
        Format::Raw => {
            for r in &rows {
                for cell in &r.cells {
                    println!("{}", isolate::raw_line(&r.spec, cell));
                }
            }
        }
    }
    if let Some(path) = &c.svg {
        std::fs::write(path, report::svg::render(&rows, &an))
            .map_err(|e| format!("writing {path}: {e}"))?;
        eprintln!("wrote {path}");
    }
    Ok(())
}

fn main() -> ExitCode {
    let c = cli::parse();
    if c.list {
        list();
        return ExitCode::SUCCESS;
    }
    if !c.compare {
        cli::print_help();
        return ExitCode::from(2);
    }
    match compare(&c) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}
