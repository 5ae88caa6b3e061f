//! Machine: what installs the tools, builds the guest code, picks the accelerator, writes the guest script and boots the VM.
pub mod accel;
pub mod build;
pub mod guest;
pub mod own_root;
pub mod provision;
pub mod qemu;
pub mod tcg_thread;
pub mod vng;
pub mod warm_guest;
