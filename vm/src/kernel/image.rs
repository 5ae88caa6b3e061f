//! Kernels the user built (`--kernel path/to/bzImage [--modules DIR]`): staged as a tree that
//! vng understands (`boot/vmlinuz-<release>` beside `lib/modules/<release>`).
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::kernel::bootable::Bootable;
use crate::kernel::pins::check_release;

/// `--kernel` is a path when it contains a slash; otherwise a pin version. A file in the
/// current directory is `./NAME`: a file that happens to be called `6.1` never shadows the pin.
pub fn is_path(kernel: &str) -> bool {
    kernel.contains('/')
}

/// The largest image bpfvm reads: a bzImage is 10-20 MB; anything far larger is not one (an
/// ELF `vmlinux`, a disk image, `/dev/zero`).
const MAX_IMAGE: u64 = 256 << 20;

/// Reads the image at `path`: a regular file of at most [`MAX_IMAGE`] bytes.
fn read_image(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let shown = path.display();
    // O_NONBLOCK: a FIFO must not block the open.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .with_context(|| format!("--kernel {shown}: cannot read the image"))?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        bail!("--kernel {shown} is not a regular file; pass the bzImage (arch/x86/boot/bzImage)");
    }
    let mut bytes = Vec::new();
    file.take(MAX_IMAGE + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_IMAGE {
        bail!(
            "--kernel {shown} is larger than {} MiB, far more than a bzImage; pass \
             arch/x86/boot/bzImage",
            MAX_IMAGE >> 20
        );
    }
    if bytes.starts_with(b"\x7fELF") {
        bail!(
            "--kernel {shown} is an ELF file (vmlinux?); pass the bzImage, arch/x86/boot/bzImage"
        );
    }
    Ok(bytes)
}

/// The release string an x86 bzImage carries in its setup header (`make kernelrelease`).
pub fn image_release(image: &[u8]) -> Result<String> {
    // boot protocol: "HdrS" at 0x202; kernel_version (u16 at 0x20e) points 0x200 before the
    // NUL-terminated "6.1.0-rc1 (user@host) #1 SMP ..." string.
    if image.get(0x202..0x206) != Some(b"HdrS") {
        bail!("not an x86 bzImage (no \"HdrS\" boot header); pass arch/x86/boot/bzImage");
    }
    let Some(&[lo, hi]) = image.get(0x20e..0x210) else {
        bail!("the bzImage ends inside its setup header (a truncated file?); pass a complete arch/x86/boot/bzImage");
    };
    let off = u16::from_le_bytes([lo, hi]) as usize + 0x200;
    let rest = image
        .get(off..)
        .context("the bzImage's kernel_version offset points past its end")?;
    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    let version = String::from_utf8_lossy(&rest[..end]);
    let Some(release) = version.split_whitespace().next() else {
        bail!("the bzImage carries no kernel version string");
    };
    // It names the staged tree and reaches vng's shell line and the guest: the pins' rules.
    check_release(release).context("the bzImage's kernel version string")?;
    Ok(release.to_string())
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

/// Written last into a staged tree: a tree without it was left by a run that died.
const COMPLETE: &str = ".bpfvm-complete";

/// Stages `image` (and its modules) under `staging` and returns the tree to boot.
///
/// The tree's directory is named for the release and a hash of the image and the modules'
/// path, so a run never removes or rewrites a tree another run may be booting; staging itself
/// happens under `staging/.lock` in a temporary directory renamed into place.
pub fn stage(image: &Path, modules: Option<&Path>, staging: &Path) -> Result<Bootable> {
    let bytes = read_image(image)?;
    let release = image_release(&bytes).with_context(|| format!("--kernel {}", image.display()))?;
    let modules = match modules {
        Some(dir) => Some(modules_for(dir, &release)?.canonicalize()?),
        None => None,
    };
    let root = staging.join(format!("{release}-{}", key(&bytes, modules.as_deref())));
    let tree = Bootable {
        vmlinuz: root.join("boot").join(format!("vmlinuz-{release}")),
        root,
        release,
    };
    if tree.root.join(COMPLETE).is_file() {
        return Ok(tree);
    }
    std::fs::create_dir_all(staging).with_context(|| format!("create {}", staging.display()))?;
    // Polled, so that Ctrl-C ends the wait while another run stages.
    let _lock = crate::support::wait::lock_dir(staging, || {})?;
    if tree.root.join(COMPLETE).is_file() {
        return Ok(tree);
    }
    // Under the lock, temporary directories and trees without the marker are what runs that
    // died left behind; nobody boots them.
    remove_leftovers(staging)?;
    if tree.root.exists() {
        std::fs::remove_dir_all(&tree.root)
            .with_context(|| format!("remove the incomplete {}", tree.root.display()))?;
    }
    let tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .tempdir_in(staging)
        .with_context(|| format!("create a temporary directory in {}", staging.display()))?;
    let boot = tmp.path().join("boot");
    std::fs::create_dir_all(&boot)?;
    std::fs::write(boot.join(format!("vmlinuz-{}", tree.release)), &bytes)
        .with_context(|| format!("write the staged image into {}", boot.display()))?;
    if let Some(src) = &modules {
        let dir = tmp.path().join("lib/modules");
        std::fs::create_dir_all(&dir)?;
        std::os::unix::fs::symlink(src, dir.join(&tree.release))?;
    }
    std::fs::write(tmp.path().join(COMPLETE), b"")?;
    std::fs::rename(tmp.keep(), &tree.root)
        .with_context(|| format!("move the staged kernel to {}", tree.root.display()))?;
    Ok(tree)
}

fn remove_leftovers(staging: &Path) -> Result<()> {
    for e in std::fs::read_dir(staging)?.flatten() {
        if e.file_name().to_string_lossy().starts_with(".tmp-") {
            std::fs::remove_dir_all(e.path())
                .with_context(|| format!("remove the leftover {}", e.path().display()))?;
        }
    }
    Ok(())
}

/// 12 hex digits of sha256(image, modules path): which build a staged tree holds.
fn key(image: &[u8], modules: Option<&Path>) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(image);
    if let Some(m) = modules {
        h.update(m.as_os_str().as_encoded_bytes());
    }
    hex::encode(h.finalize())[..12].to_string()
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
        assert!(tree.vmlinuz.ends_with("boot/vmlinuz-6.13.0-x"));
        assert!(tree.vmlinuz.is_file());
        assert!(tree.root.join("lib/modules/6.13.0-x/kernel").is_dir());
        let err = stage(&image, Some(d.path()), &d.path().join("s2")).unwrap_err();
        assert!(
            format!("{err:#}").contains("make modules_install"),
            "{err:#}"
        );
    }

    #[test]
    fn a_header_cut_short_is_an_error_not_a_panic() {
        let img = fake_bzimage("6.13.0 #1");
        let err = image_release(&img[..0x20f]).unwrap_err().to_string();
        assert!(err.contains("truncated"), "{err}");
    }

    proptest::proptest! {
        /// Any prefix of a good image, and any bytes at all, give a release or an error.
        #[test]
        fn truncated_images_never_panic(cut in 0usize..0x1000) {
            let img = fake_bzimage("6.13.0-rc1 #1");
            let _ = image_release(&img[..cut]);
        }

        #[test]
        fn random_images_never_panic(
            mut bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..0x1200),
            hdrs in proptest::bool::ANY,
        ) {
            if hdrs && bytes.len() >= 0x206 {
                bytes[0x202..0x206].copy_from_slice(b"HdrS");
            }
            let _ = image_release(&bytes);
        }
    }

    #[test]
    fn runs_staging_one_image_at_once_all_get_the_complete_tree() {
        let d = tempfile::tempdir().unwrap();
        let image = d.path().join("bzImage");
        std::fs::write(&image, fake_bzimage("6.13.0-x #1")).unwrap();
        let staging = d.path().join("stage");
        let trees: Vec<Bootable> = std::thread::scope(|s| {
            let runs: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        let mut trees: Vec<Bootable> = (0..10)
                            .map(|_| stage(&image, None, &staging).unwrap())
                            .collect();
                        trees.pop()
                    })
                })
                .collect();
            runs.into_iter()
                .map(|r| r.join().unwrap().unwrap())
                .collect()
        });
        assert!(trees.iter().all(|t| t == &trees[0]));
        assert_eq!(
            std::fs::read(&trees[0].vmlinuz).unwrap(),
            std::fs::read(&image).unwrap()
        );
        let names: Vec<String> = std::fs::read_dir(&staging)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != ".lock")
            .collect();
        assert_eq!(names.len(), 1, "one tree, no temporary left: {names:?}");
    }

    #[test]
    fn a_half_staged_tree_is_staged_again_and_a_complete_one_is_kept() {
        let d = tempfile::tempdir().unwrap();
        let image = d.path().join("bzImage");
        std::fs::write(&image, fake_bzimage("6.13.0-x #1")).unwrap();
        let staging = d.path().join("stage");
        let tree = stage(&image, None, &staging).unwrap();
        // A complete tree is reused in place (a run may be booting it).
        let marker = tree.root.join("in-use");
        std::fs::write(&marker, b"").unwrap();
        assert_eq!(stage(&image, None, &staging).unwrap(), tree);
        assert!(marker.exists());
        // Killed half-way: the image is cut short and the marker missing.
        std::fs::write(&tree.vmlinuz, b"cut").unwrap();
        std::fs::remove_file(tree.root.join(COMPLETE)).unwrap();
        std::fs::create_dir_all(staging.join(".tmp-dead")).unwrap();
        assert_eq!(stage(&image, None, &staging).unwrap(), tree);
        assert_eq!(
            std::fs::read(&tree.vmlinuz).unwrap(),
            std::fs::read(&image).unwrap()
        );
        assert!(!staging.join(".tmp-dead").exists());
    }

    #[test]
    fn paths_and_versions_are_told_apart() {
        assert!(is_path("arch/x86/boot/bzImage"));
        assert!(is_path("./bzImage"));
        assert!(!is_path("6.1"));
    }

    #[test]
    fn a_release_with_shell_syntax_or_a_path_is_refused() {
        for bad in ["6.1$(id>pwned)", "6.1`id`", "../../etc", "6.1;id", "6.1/x"] {
            let img = fake_bzimage(&format!("{bad} #1"));
            let err = format!("{:#}", image_release(&img).unwrap_err());
            assert!(err.contains("kernel version string"), "{bad}: {err}");
        }
    }

    #[test]
    fn what_is_not_a_bzimage_file_is_refused_before_reading_it_whole() {
        let d = tempfile::tempdir().unwrap();
        for (path, want) in [
            (std::path::PathBuf::from("/dev/zero"), "not a regular file"),
            (d.path().to_path_buf(), "not a regular file"),
        ] {
            let err = format!("{:#}", read_image(&path).unwrap_err());
            assert!(err.contains(want), "{err}");
        }
        let elf = d.path().join("vmlinux");
        std::fs::write(&elf, b"\x7fELF\x02\x01").unwrap();
        assert!(format!("{:#}", read_image(&elf).unwrap_err()).contains("ELF"));
        let big = d.path().join("big");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_IMAGE + 1)
            .unwrap();
        assert!(format!("{:#}", read_image(&big).unwrap_err()).contains("larger than 256 MiB"));
    }
}
