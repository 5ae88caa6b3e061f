//! What make sees besides the sources and the config: bpfvm runs it with a clean environment
//! (so nothing of the user's shell changes the kernel behind the cache key's back), refuses the
//! variables kbuild would read rather than drop them silently, puts the tools make resolves
//! into the key, and shows every build the same paths so that ccache shares its objects across
//! trees and checkouts.
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Result};

/// Variables the kernel's Makefiles read from the environment that change what is built
/// (the top-level Makefile: `ARCH`, `CROSS_COMPILE`, `LLVM`, `CC`, `K*FLAGS`, `LOCALVERSION`,
/// `PAHOLE`, ...; scripts/kconfig: `KCONFIG_*` and `CONFIG_`, the symbols' prefix; `KBUILD_*`
/// throughout).
const REFUSED: &[&str] = &[
    "ARCH",
    "SUBARCH",
    "SRCARCH",
    "CROSS_COMPILE",
    "LLVM",
    "LLVM_IAS",
    "CC",
    "LD",
    "AR",
    "NM",
    "OBJCOPY",
    "OBJDUMP",
    "READELF",
    "STRIP",
    "HOSTCC",
    "HOSTCXX",
    "HOSTCFLAGS",
    "HOSTCXXFLAGS",
    "HOSTLDFLAGS",
    "HOSTLDLIBS",
    "KCFLAGS",
    "KCPPFLAGS",
    "KAFLAGS",
    "KRUSTFLAGS",
    "LOCALVERSION",
    "PAHOLE",
    "PAHOLE_FLAGS",
    "RUSTC",
    "BINDGEN",
];
const REFUSED_PREFIXES: &[&str] = &["KBUILD_", "KCONFIG_", "CONFIG_"];

/// What the clean environment keeps: where the tools are, and those of ccache's settings that
/// say where its cache is, how big, or whether to use it (none changes an object). C messages
/// are added, for the error lines bpfvm picks out.
const KEPT: &[&str] = &[
    "PATH",
    "HOME",
    "TMPDIR",
    "CCACHE_DIR",
    "CCACHE_MAXSIZE",
    "CCACHE_TEMPDIR",
    "CCACHE_UMASK",
    "CCACHE_DISABLE",
    "CCACHE_RECACHE",
    "CCACHE_READONLY",
    "CCACHE_LOGFILE",
    "CCACHE_NOSTATS",
];

/// ccache's other settings change what a build makes behind the cache key's back
/// (`CCACHE_PREFIX`, `CCACHE_COMPILER`, `CCACHE_COMPILERCHECK=none` reusing another
/// compiler's objects, `CCACHE_SLOPPINESS`, ...): refused, as kbuild's are.
const CCACHE: &str = "CCACHE_";

/// ccache reads no configuration file (its cache directory's or `HOME`'s `ccache.conf`,
/// `/etc/ccache.conf`), which could set the same: the one it is given instead is empty.
const CCACHE_CONFIG: (&str, &str) = ("CCACHE_CONFIGPATH", "/dev/null");

/// The variables of `vars` that would change the kernel make builds, each with its value.
pub(crate) fn refused(vars: impl IntoIterator<Item = (String, String)>) -> Vec<String> {
    let mut found: Vec<String> = vars
        .into_iter()
        .filter(|(k, v)| {
            let kbuild =
                REFUSED.contains(&k.as_str()) || REFUSED_PREFIXES.iter().any(|p| k.starts_with(p));
            let ccache = k.starts_with(CCACHE) && !KEPT.contains(&k.as_str());
            // make passes variable assignments in MAKEFLAGS on (`make KCFLAGS=-DX` above us);
            // its options (-j, --jobserver-auth) change nothing built.
            let assigns = matches!(k.as_str(), "MAKEFLAGS" | "GNUMAKEFLAGS" | "MFLAGS")
                && v.split_whitespace()
                    .any(|w| w.contains('=') && !w.starts_with('-'));
            kbuild || ccache || assigns || k == "MAKEFILES"
        })
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    found.sort();
    found
}

/// Refuses to build when the environment holds a variable kbuild would read.
pub(crate) fn check() -> Result<()> {
    let found = refused(
        std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned()))),
    );
    if !found.is_empty() {
        bail!(
            "--kernel-tree: the environment sets what kbuild would read: {}. bpfvm builds a tree \
             with gcc in a clean environment, so that its cache key covers everything make \
             reads; unset them (`env -u NAME ...`), or build the kernel yourself and pass \
             --kernel path/to/bzImage",
            found.join(" ")
        );
    }
    Ok(())
}

/// The clean environment make runs in, from this process's variables.
pub(crate) fn clean() -> Vec<(String, String)> {
    kept(std::env::vars())
}

/// The clean environment make runs in, from the variables `vars`.
fn kept(vars: impl IntoIterator<Item = (String, String)>) -> Vec<(String, String)> {
    let mut kept: Vec<(String, String)> = vars
        .into_iter()
        .filter(|(k, _)| KEPT.contains(&k.as_str()))
        .collect();
    kept.push(("LC_ALL".into(), "C".into()));
    kept.push((CCACHE_CONFIG.0.into(), CCACHE_CONFIG.1.into()));
    kept
}

/// The tools make resolves on `PATH` and runs: the compiler, the linker, pahole (the BTF),
/// make itself, and the parser generators. A build with another is another build.
const TOOLS: &[(&str, &str)] = &[
    ("gcc", "--version"),
    ("ld", "--version"),
    ("pahole", "--version"),
    ("make", "--version"),
    ("bison", "--version"),
    ("flex", "--version"),
];

/// Each tool's path and the first line of its version, one per line.
pub(crate) fn toolchain() -> String {
    TOOLS
        .iter()
        .map(|(tool, arg)| {
            let path = which(tool).map_or("not found".into(), |p| p.display().to_string());
            let version = Command::new(tool)
                .arg(arg)
                .env("LC_ALL", "C")
                .output()
                .map(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .lines()
                        .next()
                        .unwrap_or("")
                        .to_string()
                })
                .unwrap_or_default();
            format!("{tool} {path}: {version}\n")
        })
        .collect()
}

pub(crate) fn which(cmd: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(cmd))
        .find(|p| p.is_file())
}

/// Where every build sees its tree and its output directory, whatever their real paths: the
/// compiler's command lines, the include paths and the debug info are then the same for a
/// tree and a checkout of another commit of it, and ccache finds the other's objects.
pub(crate) const SRC: &str = "/run/bpfvm/src";
pub(crate) const OUT: &str = "/run/bpfvm/out";

/// A command run on a tree (make, or a script of the tree's) in the clean environment, with
/// `tree` at [`SRC`] and `out` at [`OUT`] in a mount namespace of its own where bpfvm is root;
/// elsewhere at their own paths (ccache then shares nothing across paths). `argv` names them
/// through [`SRC`] and [`OUT`] either way: [`Mapped::arg`] rewrites them.
pub(crate) struct Mapped {
    tree: PathBuf,
    out: PathBuf,
    namespace: bool,
}

impl Mapped {
    pub(crate) fn new(tree: &Path, out: &Path) -> Mapped {
        // SAFETY: geteuid has no preconditions.
        let namespace = unsafe { libc::geteuid() } == 0 && which("unshare").is_some();
        Mapped {
            tree: tree.to_path_buf(),
            out: out.to_path_buf(),
            namespace,
        }
    }

    /// `s` with [`SRC`] and [`OUT`] as this command sees them.
    pub(crate) fn arg(&self, s: &str) -> String {
        if self.namespace {
            s.to_string()
        } else {
            self.unmap(s)
        }
    }

    /// The command running `argv` in the clean environment, from the output directory.
    pub(crate) fn command(&self, argv: &[&str]) -> Command {
        let mut cmd = Command::new("env");
        cmd.arg("-i");
        for (k, v) in clean() {
            cmd.arg(format!("{k}={v}"));
        }
        let argv: Vec<String> = argv.iter().map(|a| self.arg(a)).collect();
        if self.namespace {
            // The bind mounts live and die with this namespace; the mount points are empty
            // directories on the host.
            cmd.args([
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-ec",
            ])
            .arg(format!(
                "mkdir -p {SRC} {OUT}; mount --bind \"$1\" {SRC}; mount --bind \"$2\" {OUT}; \
                     cd {OUT}; shift 2; exec \"$@\""
            ))
            .arg("sh")
            .arg(&self.tree)
            .arg(&self.out);
        } else {
            cmd.current_dir(&self.out);
        }
        cmd.args(argv);
        cmd
    }

    /// How a user would type it, at the real paths.
    pub(crate) fn shown(&self, argv: &[&str]) -> String {
        let words: Vec<String> = argv
            .iter()
            .map(|a| crate::support::shell::quote(&self.unmap(a)))
            .collect();
        format!("cd {} && {}", self.out.display(), words.join(" "))
    }

    /// `s` (a line of make's output, an argument) with the mapped paths put back to the real
    /// ones.
    pub(crate) fn unmap(&self, line: &str) -> String {
        line.replace(SRC, &self.tree.display().to_string())
            .replace(OUT, &self.out.display().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn what_kbuild_reads_is_refused_and_the_rest_passes() {
        let found = refused(vars(&[
            ("LLVM", "1"),
            ("KCFLAGS", "-DX"),
            ("KCONFIG_CONFIG", "other.config"),
            ("KBUILD_BUILD_USER", "me"),
            ("LOCALVERSION", "-x"),
            ("MAKEFLAGS", "-j4 --jobserver-auth=3,4"),
            ("PATH", "/usr/bin"),
            ("CCACHE_DIR", "/c"),
            ("HOME", "/root"),
        ]));
        assert_eq!(
            found,
            [
                "KBUILD_BUILD_USER=me",
                "KCFLAGS=-DX",
                "KCONFIG_CONFIG=other.config",
                "LLVM=1",
                "LOCALVERSION=-x"
            ]
        );
        assert_eq!(
            refused(vars(&[("MAKEFLAGS", "KCFLAGS=-DX -j2")])),
            ["MAKEFLAGS=KCFLAGS=-DX -j2"]
        );
    }

    /// ccache's settings that change objects are refused; those of where its cache is pass
    /// into make's environment, and no ccache.conf is read there.
    #[test]
    fn ccache_settings_that_change_objects_are_refused_and_no_config_file_is_read() {
        let found = refused(vars(&[
            ("CCACHE_PREFIX", "distcc"),
            ("CCACHE_COMPILER", "/opt/gcc-12/bin/gcc"),
            ("CCACHE_COMPILERCHECK", "none"),
            ("CCACHE_CONFIGPATH", "/home/me/ccache.conf"),
            ("CCACHE_DIR", "/c"),
            ("CCACHE_MAXSIZE", "20G"),
        ]));
        assert_eq!(
            found,
            [
                "CCACHE_COMPILER=/opt/gcc-12/bin/gcc",
                "CCACHE_COMPILERCHECK=none",
                "CCACHE_CONFIGPATH=/home/me/ccache.conf",
                "CCACHE_PREFIX=distcc"
            ]
        );
        let env = kept(vars(&[
            ("CCACHE_DIR", "/c"),
            ("CCACHE_SLOPPINESS", "time_macros"),
            ("HOME", "/root"),
        ]));
        assert_eq!(
            env,
            vars(&[
                ("CCACHE_DIR", "/c"),
                ("HOME", "/root"),
                ("LC_ALL", "C"),
                ("CCACHE_CONFIGPATH", "/dev/null")
            ])
        );
    }

    #[test]
    fn make_runs_with_a_clean_environment() {
        let d = tempfile::tempdir().unwrap();
        let m = Mapped {
            tree: d.path().join("tree"),
            out: d.path().to_path_buf(),
            namespace: false,
        };
        std::env::set_var("KCFLAGS_TEST_NOT_KEPT", "1");
        let out = m.command(&["sh", "-c", "env"]).output().unwrap();
        let env = String::from_utf8_lossy(&out.stdout);
        assert!(env.contains("LC_ALL=C") && env.contains("PATH="), "{env}");
        assert!(!env.contains("KCFLAGS_TEST_NOT_KEPT"), "{env}");
        assert_eq!(
            m.arg(&format!("O={OUT}")),
            format!("O={}", d.path().display())
        );
    }

    #[test]
    fn the_toolchain_names_each_tool_with_its_path() {
        let t = toolchain();
        assert_eq!(t.lines().count(), TOOLS.len());
        assert!(t.starts_with("gcc "), "{t}");
    }
}
