//! Which kernel a command boots, parsed once: `--kernel`, `--kernel-tree`, `--modules`,
//! `--kconfig`, the `BPFVM_KERNEL` default and `bench-vm --against` all go through here, and
//! every flow takes the [`KernelChoice`] it made.
//!
//! One rule tells a path from a name everywhere: a value with a `/` is a path (a directory is
//! a source tree, a file an image); a value without is a pin (or, for `--against` beside a
//! git tree, a git ref). A file called `6.1` in the current directory never shadows the pin:
//! it is `./6.1`.
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use crate::domain::arch::Arch;
use crate::domain::options::defaults;
use crate::kernel::pins::{self, Pin};
use crate::kernel::source_tree;

/// The environment variable that names the kernel when `--kernel` and `--kernel-tree` do not.
pub const ENV: &str = "BPFVM_KERNEL";

/// What `--kernel all` names: every pinned kernel.
pub const ALL: &str = "all";

/// One kernel to boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelChoice {
    /// A pinned Debian kernel (`kernels/<version>.toml`).
    Pin(Pin),
    /// A kernel image the user built, with its modules (`INSTALL_MOD_PATH`) if any.
    Image {
        path: PathBuf,
        modules: Option<PathBuf>,
    },
    /// A kernel source tree, configured and built by bpfvm.
    Tree { dir: PathBuf, kconfig: Vec<PathBuf> },
    /// A commit of a git source tree (`--against REV` beside `--kernel-tree`), checked out
    /// beside it and built like a tree.
    TreeRef {
        dir: PathBuf,
        rev: String,
        kconfig: Vec<PathBuf>,
    },
}

impl KernelChoice {
    /// The kernel's architecture: a pin's own; an image or a tree is x86_64's.
    pub fn arch(&self) -> Arch {
        match self {
            KernelChoice::Pin(p) => p.arch,
            _ => Arch::X86_64,
        }
    }

    /// How the user named it, for messages.
    pub fn shown(&self) -> String {
        match self {
            KernelChoice::Pin(p) if p.arch == Arch::X86_64 => p.version.clone(),
            KernelChoice::Pin(p) => format!("{} ({})", p.version, p.arch),
            KernelChoice::Image { path, .. } => path.display().to_string(),
            KernelChoice::Tree { dir, .. } => dir.display().to_string(),
            KernelChoice::TreeRef { dir, rev, .. } => format!("{rev} of {}", dir.display()),
        }
    }
}

/// The kernel options as the command line and the environment gave them, before parsing.
#[derive(Debug, Clone, Default)]
pub struct KernelArgs {
    /// `--kernel`, when given on the command line.
    pub kernel: Option<String>,
    /// `BPFVM_KERNEL`: a default, never in conflict with an explicit option.
    pub env: Option<String>,
    pub modules: Option<PathBuf>,
    pub kernel_tree: Option<PathBuf>,
    pub kconfig: Vec<PathBuf>,
    /// `--arch`: `x86_64`, `arm64`, `all` or a list; the host's when not given.
    pub arch: Option<String>,
}

impl KernelArgs {
    /// The options with `BPFVM_KERNEL` read from the environment (empty counts as unset).
    pub fn with_env(mut self) -> Self {
        self.env = std::env::var(ENV).ok().filter(|v| !v.trim().is_empty());
        self
    }

    /// The one kernel these options name (`all` and lists are refused).
    pub fn one(&self) -> Result<KernelChoice> {
        let value = self.value();
        if self.kernel_tree.is_none() && (value == ALL || value.contains(',')) {
            bail!(
                "--kernel {value}: this command boots one kernel; name one pin (e.g. --kernel \
                 6.1), an image or a tree (`all` and lists are for vm-test and bpfvm test)"
            );
        }
        if self.arches()?.len() > 1 {
            bail!(
                "--arch {}: this command boots one kernel; name one architecture (`all` and \
                 lists are for vm-test)",
                self.arch.as_deref().unwrap_or_default()
            );
        }
        let mut all = self.many()?;
        Ok(all.remove(0))
    }

    /// The kernels these options name: `all` (every pin, oldest first), a comma-separated
    /// list of pins, or one kernel.
    pub fn many(&self) -> Result<Vec<KernelChoice>> {
        let arches = self.arches()?;
        let pins_only = arches.iter().any(|a| !a.boots_host_root());
        if pins_only && (self.kernel_tree.is_some() || self.value().contains('/')) {
            bail!(
                "--arch {}: kernels of another architecture boot from pins only (`cargo xtask \
                 kernels list`); an image or a tree is booted as x86_64: leave --arch out",
                self.arch.as_deref().unwrap_or_default()
            );
        }
        if let Some(dir) = &self.kernel_tree {
            if self.kernel.is_some() {
                bail!("--kernel and --kernel-tree name two kernels; give one");
            }
            if self.modules.is_some() {
                bail!("--modules is for a kernel image you built (--kernel PATH); a tree's kernel is built with everything in");
            }
            return Ok(vec![KernelChoice::Tree {
                dir: dir.clone(),
                kconfig: self.kconfig.clone(),
            }]);
        }
        if !self.kconfig.is_empty() {
            bail!("--kconfig is merged into a tree's config: it needs --kernel-tree DIR");
        }
        let value = self.value();
        if value.contains('/') {
            return Ok(vec![image(Path::new(&value), self.modules.clone())?]);
        }
        if self.modules.is_some() {
            bail!("--modules is for a kernel image you built (--kernel PATH); pinned kernels bring their own");
        }
        let mut choices = vec![];
        for arch in arches {
            let names: Vec<String> = if value == ALL {
                pins::pins_for(arch)?
                    .into_iter()
                    .map(|p| p.version)
                    .collect()
            } else {
                value.split(',').map(|k| k.trim().to_string()).collect()
            };
            if names.iter().any(String::is_empty) {
                bail!("--kernel {value:?}: an empty kernel in the list (e.g. --kernel 6.1,6.12)");
            }
            for n in &names {
                choices.push(pin(n, arch)?);
            }
        }
        Ok(choices)
    }

    /// `--arch`, parsed; the host's when not given (or empty, as an unset input of the
    /// Action leaves `BPFVM_ARCH`).
    fn arches(&self) -> Result<Vec<Arch>> {
        match self.arch.as_deref().map(str::trim) {
            Some(a) if !a.is_empty() => Arch::parse_list(a),
            _ => Ok(vec![Arch::host()]),
        }
    }

    /// `--kernel`, else `BPFVM_KERNEL`, else the default pin.
    fn value(&self) -> String {
        self.kernel
            .clone()
            .or_else(|| self.env.clone())
            .unwrap_or_else(|| defaults::KERNEL.to_string())
    }
}

/// A pin of `arch` by name; a file of that name in the current directory is named in the
/// error.
fn pin(name: &str, arch: Arch) -> Result<KernelChoice> {
    pins::resolve_for(name, arch)
        .map(KernelChoice::Pin)
        .map_err(|e| {
            if Path::new(name).exists() {
                e.context(format!(
                "`{name}` is read as a pin; for the file or directory of that name, pass ./{name}"
            ))
            } else {
                e
            }
        })
}

fn image(path: &Path, modules: Option<PathBuf>) -> Result<KernelChoice> {
    if path.is_dir() {
        bail!(
            "--kernel {}: a directory; pass a kernel image (arch/x86/boot/bzImage), or a source \
             tree with --kernel-tree {}",
            path.display(),
            path.display()
        );
    }
    Ok(KernelChoice::Image {
        path: path.to_path_buf(),
        modules,
    })
}

/// Kernel A of `bench-vm --against BASE`, where B is `b`: by the same rule as `--kernel`,
/// a path (a source tree or an image), a pin, or a git ref of B's tree (built with B's
/// fragments).
pub fn against(base: &str, b: &KernelChoice) -> Result<KernelChoice> {
    let tree_of_b = match b {
        KernelChoice::Tree { dir, kconfig } | KernelChoice::TreeRef { dir, kconfig, .. } => {
            Some((dir, kconfig))
        }
        _ => None,
    };
    if base.contains('/') {
        let path = Path::new(base);
        if path.is_dir() {
            if !source_tree::is_tree(path) {
                bail!("--against {base}: a directory, but not a kernel source tree (no top-level Makefile with VERSION and PATCHLEVEL)");
            }
            return Ok(KernelChoice::Tree {
                dir: path.to_path_buf(),
                kconfig: tree_of_b.map(|(_, k)| k.clone()).unwrap_or_default(),
            });
        }
        return image(path, None).map_err(|e| anyhow::anyhow!("--against: {e:#}"));
    }
    if let Ok(p) = pins::resolve(base) {
        return Ok(KernelChoice::Pin(p));
    }
    match tree_of_b {
        Some((dir, kconfig)) => {
            source_tree::verify_rev(dir, base)?;
            Ok(KernelChoice::TreeRef {
                dir: dir.clone(),
                rev: base.to_string(),
                kconfig: kconfig.clone(),
            })
        }
        None => bail!(
            "--against {base}: not a pin (see `cargo xtask kernels list`); a kernel tree or a \
             bzImage is a path (./{base}); a git ref needs --kernel-tree"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(kernel: Option<&str>, env: Option<&str>, tree: Option<&Path>) -> KernelArgs {
        KernelArgs {
            kernel: kernel.map(str::to_string),
            env: env.map(str::to_string),
            kernel_tree: tree.map(Path::to_path_buf),
            ..KernelArgs::default()
        }
    }

    #[test]
    fn every_architecture_gives_its_own_pins_and_one_names_one() {
        let of = |kernel: &str, arch: &str| {
            KernelArgs {
                arch: Some(arch.into()),
                ..args(Some(kernel), None, None)
            }
            .many()
            .unwrap()
            .into_iter()
            .map(|c| match c {
                KernelChoice::Pin(p) => (p.version, p.arch),
                other => panic!("{other:?}"),
            })
            .collect::<Vec<_>>()
        };
        assert_eq!(of("6.12", "arm64"), [("6.12".to_string(), Arch::Arm64)]);
        let all = of("all", "all");
        let arm = pins::pins_for(Arch::Arm64).unwrap().len();
        assert_eq!(all.len(), pins::pins().unwrap().len() + arm);
        assert!(all.iter().filter(|(_, a)| *a == Arch::Arm64).count() == arm && arm >= 2);
        // 5.10 has no arm64 pin: the error lists the ones there are.
        let e = KernelArgs {
            arch: Some("arm64".into()),
            ..args(Some("5.10"), None, None)
        }
        .many()
        .unwrap_err();
        assert!(format!("{e:#}").contains("6.1, 6.12"), "{e:#}");
    }

    #[test]
    fn an_environment_default_never_conflicts_with_an_explicit_tree() {
        let d = tempfile::tempdir().unwrap();
        let got = args(None, Some("6.12"), Some(d.path())).one().unwrap();
        assert_eq!(
            got,
            KernelChoice::Tree {
                dir: d.path().to_path_buf(),
                kconfig: vec![]
            }
        );
        let explicit = args(Some("6.1"), None, Some(d.path())).one().unwrap_err();
        assert!(explicit.to_string().contains("two kernels"), "{explicit}");
    }

    #[test]
    fn the_environment_names_the_pin_and_the_option_overrides_it() {
        let pin_of = |c: KernelChoice| match c {
            KernelChoice::Pin(p) => p.version,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            pin_of(args(None, Some("6.12"), None).one().unwrap()),
            "6.12"
        );
        assert_eq!(
            pin_of(args(Some("6.1"), Some("6.12"), None).one().unwrap()),
            "6.1"
        );
        assert_eq!(
            pin_of(args(None, None, None).one().unwrap()),
            defaults::KERNEL
        );
        let pins_of = |v: &str| -> Vec<String> {
            args(Some(v), None, None)
                .many()
                .unwrap()
                .into_iter()
                .map(|c| c.shown())
                .collect()
        };
        assert_eq!(pins_of("6.1,6.12"), ["6.1", "6.12"]);
        let e = args(Some("6.1,"), None, None).many().unwrap_err();
        assert!(e.to_string().contains("an empty kernel in the list"), "{e}");
        let all = args(Some(ALL), None, None).many().unwrap();
        assert_eq!(all.len(), pins::pins().unwrap().len());
        assert!(args(Some(ALL), None, None).one().is_err());
    }

    /// `--kernel FILE` and `--against FILE` read a value the same way: a slash makes a path.
    #[test]
    fn kernel_and_against_agree_on_paths_and_names() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("bzImage");
        std::fs::write(&file, b"x").unwrap();
        let shown = file.display().to_string();
        let want = KernelChoice::Image {
            path: file.clone(),
            modules: None,
        };
        assert_eq!(args(Some(&shown), None, None).one().unwrap(), want);
        let b = args(None, None, None).one().unwrap();
        assert_eq!(against(&shown, &b).unwrap(), want);
        // Without a slash, a name: a pin, never the file of that name.
        let cwd_file = "Cargo.toml";
        let e = format!("{:#}", args(Some(cwd_file), None, None).one().unwrap_err());
        assert!(e.contains("pass ./Cargo.toml"), "{e}");
        let e = format!("{:#}", against(cwd_file, &b).unwrap_err());
        assert!(e.contains("not a pin") && e.contains("./Cargo.toml"), "{e}");
        // A directory given to --kernel points at --kernel-tree.
        let e = format!(
            "{:#}",
            args(Some(&d.path().display().to_string()), None, None)
                .one()
                .unwrap_err()
        );
        assert!(e.contains("--kernel-tree"), "{e}");
    }

    #[test]
    fn a_base_is_a_pin_an_image_a_tree_or_a_ref_of_bs_tree() {
        let b_pin = args(None, None, None).one().unwrap();
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("Makefile"), "VERSION = 6\nPATCHLEVEL = 12\n").unwrap();
        let shown = d.path().display().to_string();
        assert_eq!(
            against(&shown, &b_pin).unwrap(),
            KernelChoice::Tree {
                dir: d.path().to_path_buf(),
                kconfig: vec![]
            }
        );
        let empty = tempfile::tempdir().unwrap();
        let e = against(&empty.path().display().to_string(), &b_pin).unwrap_err();
        assert!(e.to_string().contains("not a kernel source tree"), "{e}");
        let e = against("v6.12", &b_pin).unwrap_err().to_string();
        assert!(e.contains("a git ref needs --kernel-tree"), "{e}");
        // Beside a tree, a name that is no pin is a ref of it, which must exist.
        let b_tree = KernelChoice::Tree {
            dir: d.path().to_path_buf(),
            kconfig: vec!["mine.config".into()],
        };
        let e = format!("{:#}", against("v6.12", &b_tree).unwrap_err());
        assert!(e.contains("nor a commit of the git tree"), "{e}");
    }

    #[test]
    fn modules_and_fragments_go_with_their_kernel_only() {
        let mut a = args(Some("6.1"), None, None);
        a.modules = Some("/tmp".into());
        assert!(a
            .one()
            .unwrap_err()
            .to_string()
            .contains("--modules is for a kernel image"));
        let mut a = args(Some("6.1"), None, None);
        a.kconfig = vec!["my.config".into()];
        assert!(a
            .one()
            .unwrap_err()
            .to_string()
            .contains("needs --kernel-tree"));
    }
}
