//! Kernel: which kernel to boot, parsed once (`choice`), and made ready to boot (`ready`):
//! a pinned Debian kernel fetched and verified (`pins`), an image the user built (`image`), or
//! a source tree configured and built (`source_tree`); and what each kernel must have
//! (`expect`). A *source tree* is what `--kernel-tree` names (sources); a *bootable kernel*
//! (`ready::Bootable`) is a `vmlinuz` with its release, what vng boots.
pub mod bootable;
pub mod choice;
pub mod expect;
pub mod image;
pub mod pins;
pub mod ready;
pub mod source_tree;
