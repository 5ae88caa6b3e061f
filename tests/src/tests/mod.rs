//! One module per kernel feature, as in the kernel's selftests and aya's integration tests.
//! What the slowest tests cost under TCG, and why, is in docs/test-durations.md: keep bulk
//! work that is not a test's point out of single-element syscalls.
mod batch;
mod bloom_filter;
mod bpf_loop;
mod ebpf;
mod smoke;
mod verifier;
