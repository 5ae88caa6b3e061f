//! Kernels the user built (`--kernel path/to/bzImage [--modules DIR]`): staged as a tree that
//! vng understands (`boot/vmlinuz-<release>` beside `lib/modules/<release>`).
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::kernels::KernelTree;

/// `--kernel` is a path when it names a file or contains a slash; otherwise a pin version.
pub fn is_path(kernel: &str) -> bool {
    kernel.contains('/') || Path::new(kernel).is_file()
}

/// The release string an x86 bzImage carries in its setup header (`make kernelrelease`).
pub fn image_release(image: &[u8]) -> Result<String> {
    // boot protocol: "HdrS" at 0x202; kernel_version (u16 at 0x20e) points 0x200 before the
    // NUL-terminated "6.1.0-rc1 (user@host) #1 SMP ..." string.
    if image.get(0x202..0x206) != Some(b"HdrS") {
        bail!("not an x86 bzImage (no \"HdrS\" boot header); pass arch/x86/boot/bzImage");
    }
    let off = u16::from_le_bytes([image[0x20e], image[0x20f]]) as usize + 0x200;
    let rest = image
        .get(off..)
        .context("the bzImage's kernel_version offset points past its end")?;
    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    let version = String::from_utf8_lossy(&rest[..end]);
    match version.split_whitespace().next() {
        Some(release) if !release.is_empty() => Ok(release.to_string()),
        _ => bail!("the bzImage carries no kernel version string"),
    }
}

/// Finds `lib/modules/<release>` given either an `INSTALL_MOD_PATH` root or that dir itself.
fn modules_for(dir: &Path, release: &str) -> Result<PathBuf> {
    let nested = dir.join("lib/modules").join(release);
    if nested.is_dir() {
        return Ok(nested);
    }
    if dir.file_name().is_some_and(|n| n == release) && dir.is_dir() {
        return Ok(dir.to_path_buf());
    }
    bail!(
        "--modules {}: no lib/modules/{release} in it; install them with \
         `make modules_install INSTALL_MOD_PATH={}` (the image's release is {release})",
        dir.display(),
        dir.display()
    )
}

/// Stages `image` (and its modules) under `staging` and returns the tree to boot.
pub fn stage(image: &Path, modules: Option<&Path>, staging: &Path) -> Result<KernelTree> {
    let bytes = std::fs::read(image)
        .with_context(|| format!("--kernel {}: cannot read the image", image.display()))?;
    let release = image_release(&bytes).with_context(|| format!("--kernel {}", image.display()))?;
    let root = staging.join(&release);
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("boot"))?;
    let vmlinuz = root.join("boot").join(format!("vmlinuz-{release}"));
    std::fs::write(&vmlinuz, &bytes)?;
    if let Some(dir) = modules {
        let src = modules_for(dir, &release)?;
        let src = src.canonicalize()?;
        std::fs::create_dir_all(root.join("lib/modules"))?;
        std::os::unix::fs::symlink(&src, root.join("lib/modules").join(&release))?;
    }
    Ok(KernelTree {
        root,
        vmlinuz,
        release,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_bzimage(version: &str) -> Vec<u8> {
        let mut img = vec![0u8; 0x1000];
        img[0x202..0x206].copy_from_slice(b"HdrS");
        let at: u16 = 0x600;
        img[0x20e..0x210].copy_from_slice(&at.to_le_bytes());
        let off = at as usize + 0x200;
        img[off..off + version.len()].copy_from_slice(version.as_bytes());
        img
    }

    #[test]
    fn reads_the_release_from_the_setup_header() {
        let img = fake_bzimage("6.13.0-rc1-bpf+ (dev@box) #3 SMP PREEMPT_DYNAMIC");
        assert_eq!(image_release(&img).unwrap(), "6.13.0-rc1-bpf+");
    }

    #[test]
    fn rejects_what_is_not_a_bzimage() {
        let err = image_release(&[0u8; 0x1000]).unwrap_err().to_string();
        assert!(err.contains("not an x86 bzImage"), "{err}");
    }

    #[test]
    fn stages_image_and_modules_where_vng_looks() {
        let d = tempfile::tempdir().unwrap();
        let image = d.path().join("bzImage");
        std::fs::write(&image, fake_bzimage("6.13.0-x #1")).unwrap();
        let mods = d.path().join("mods");
        std::fs::create_dir_all(mods.join("lib/modules/6.13.0-x/kernel")).unwrap();
        let tree = stage(&image, Some(&mods), &d.path().join("stage")).unwrap();
        assert_eq!(tree.release, "6.13.0-x");
        assert!(tree.vmlinuz.ends_with("6.13.0-x/boot/vmlinuz-6.13.0-x"));
        assert!(tree.root.join("lib/modules/6.13.0-x/kernel").is_dir());
        let err = stage(&image, Some(d.path()), &d.path().join("s2")).unwrap_err();
        assert!(
            format!("{err:#}").contains("make modules_install"),
            "{err:#}"
        );
    }

    #[test]
    fn paths_and_versions_are_told_apart() {
        assert!(is_path("arch/x86/boot/bzImage"));
        assert!(!is_path("6.1"));
    }
}
