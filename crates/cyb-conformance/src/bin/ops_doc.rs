//! Prints docs/ops.md: `cargo run -p cyb-conformance --bin ops-doc > docs/ops.md`.

fn main() {
    match cyb_conformance::report::current_page() {
        Ok(page) => print!("{page}"),
        Err(e) => {
            eprintln!("ops-doc: {e}");
            std::process::exit(1);
        }
    }
}
