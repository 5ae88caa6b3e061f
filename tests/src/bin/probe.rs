//! Probes the running kernel's BPF features and prints them as JSON (`name -> supported`).
//! The guest script stores the output as `features.json` for the report.
fn main() {
    let features = bpfvm_tests::features::probe_all();
    println!(
        "{}",
        serde_json::to_string_pretty(&features).expect("serialise features")
    );
}
