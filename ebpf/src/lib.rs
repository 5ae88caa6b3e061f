//! Helpers shared by the per-feature BPF objects in `src/<feature>.rs` (each a `[[bin]]`).
#![no_std]
