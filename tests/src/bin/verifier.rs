//! Prints, as a JSON array, the verifier's statistics of every program of each BPF object
//! named on the command line (`bpfvm_tests::verifier`). The guest script stores the output as
//! `verifier.json`. A program the kernel refuses is a record, not an error; an object that
//! cannot be read or parsed is an error (exit status 1).
use std::path::PathBuf;

fn main() {
    let objects: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if objects.is_empty() {
        eprintln!("usage: verifier OBJECT...");
        std::process::exit(2);
    }
    bpfvm_tests::sys::raise_memlock();
    let mut all = Vec::new();
    for path in &objects {
        match bpfvm_tests::verifier::of_object(path) {
            Ok(stats) => all.extend(stats),
            Err(e) => {
                eprintln!("error: {e:#}");
                std::process::exit(1);
            }
        }
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&all).expect("serialise the statistics")
    );
}
