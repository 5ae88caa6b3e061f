//! Domain: the user's options checked, the kernel pins and trees, custom images, what each kernel must have.
pub mod custom;
pub mod expect;
pub mod kernels;
pub mod options;
