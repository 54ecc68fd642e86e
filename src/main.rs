//! The `capsim` command: wires flags to the library crates.

fn main() {
    println!("capsim {}", env!("CARGO_PKG_VERSION"));
}
