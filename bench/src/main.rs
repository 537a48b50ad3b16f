//! The `bench --compare` tool (filled in by the bench issue).
fn main() {
    eprintln!("bench: not yet implemented; run `cargo run --release -p hellomalloc`");
}
