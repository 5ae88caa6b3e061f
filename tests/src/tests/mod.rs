//! One module per kernel feature, as in the kernel's selftests and aya's integration tests.
mod batch;
mod bloom_filter;
mod bpf_loop;
mod ebpf;
mod smoke;
