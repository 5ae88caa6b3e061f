//! Constants shared by the BPF programs in `ebpf/` and the guest tests in `tests/`.
#![no_std]
