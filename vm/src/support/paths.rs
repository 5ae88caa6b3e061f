//! Where things live: the project checkout and the per-user cache.
//!
//! [`check_env`] (every command) and [`check_target_dir`] (VM commands) run before any work: the cache and target directories end up in PATH (the
//! venv's and tools' `bin/`), on vng's command line and in virtme-ng's `--rwdir`, which takes
//! only paths of `[a-zA-Z0-9_+ /.-]` (`_SAFE_PATH_PATTERN` in virtme-ng 1.42's
//! `virtme/commands/run.py`); a path that cannot work there is refused up front, naming the
//! character and the variable that moves it.
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// The root of the bpfvm checkout (the workspace holding `vm/`).
///
/// Where cargo runs us (`cargo xtask`, `cargo test`) it sets `CARGO_MANIFEST_DIR` at run time to
/// a member of the workspace, whose parent is the root: that is where the checkout is now. The
/// path compiled in is where it was when this crate was built, and cargo does not rebuild a
/// checkout that was moved or renamed (nor a crate another worktree sharing the target directory
/// built), so it can name a directory that is gone or another checkout. The run-time path
/// counts only where it holds this very file: as a cargo runner for someone else's crate, the
/// variable names their package.
pub fn workspace_root() -> PathBuf {
    root_from(std::env::var_os("CARGO_MANIFEST_DIR"))
}

/// [`workspace_root`], given `CARGO_MANIFEST_DIR` at run time.
fn root_from(manifest_dir: Option<OsString>) -> PathBuf {
    let at_run_time = manifest_dir
        .and_then(|dir| Some(Path::new(&dir).parent()?.to_path_buf()))
        .filter(|root| root.join(file!()).is_file());
    at_run_time.unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("vm/ sits inside the workspace")
            .to_path_buf()
    })
}

/// Fails, before any work, on an environment the cache or target directory cannot come from.
pub fn check_env() -> Result<()> {
    cache_dir_from(std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME"))?;
    check_target_dir(&target_dir())
}

/// `$XDG_CACHE_HOME/bpfvm`, or `$HOME/.cache/bpfvm`: kernels, the virtme-ng venv, built tools.
pub fn cache_dir() -> PathBuf {
    cache_dir_from(std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME"))
        .expect("the CLI calls paths::check_env before any work")
}

/// The XDG Base Directory spec: an unset, empty or relative `XDG_CACHE_HOME` is ignored
/// ("If an implementation encounters a relative path in any of these variables it should
/// consider the path invalid and ignore it"), and `$HOME/.cache` is used instead.
fn cache_dir_from(xdg: Option<OsString>, home: Option<OsString>) -> Result<PathBuf> {
    let (base, var) = match xdg.map(PathBuf::from).filter(|p| p.is_absolute()) {
        Some(xdg) => (xdg, "XDG_CACHE_HOME"),
        None => match home.map(PathBuf::from).filter(|p| p.is_absolute()) {
            Some(home) => (home.join(".cache"), "HOME"),
            None => bail!(
                "neither HOME nor XDG_CACHE_HOME is an absolute directory, so bpfvm has no cache \
                 (kernels, virtme-ng, tools); set one, e.g. XDG_CACHE_HOME=/var/cache"
            ),
        },
    };
    let dir = base.join("bpfvm");
    check_chars(
        &dir,
        var,
        |c| c != ':' && !c.is_control(),
        "':' (it separates PATH entries, where the cache's bin/ goes) or a control character",
    )?;
    Ok(dir)
}

/// A name for the checkout at `root` that no other checkout has: a hash of its path (made
/// canonical when it can be), for what a checkout keeps apart from the others under a target
/// directory that `CARGO_TARGET_DIR` may make theirs too.
pub fn checkout_id(root: &Path) -> String {
    use sha2::{Digest, Sha256};
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let digest = Sha256::digest(root.as_os_str().as_encoded_bytes());
    format!("checkout-{}", &hex::encode(digest)[..12])
}

/// The workspace's `target/` directory (honours `CARGO_TARGET_DIR`).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// Fails on a target directory a VM cannot use: the VM's output directory is under it and
/// reaches vng's `--rwdir`.
pub fn check_target_dir(dir: &Path) -> Result<()> {
    let var = if std::env::var_os("CARGO_TARGET_DIR").is_some() {
        "CARGO_TARGET_DIR"
    } else {
        "CARGO_TARGET_DIR (the default is the checkout's target/)"
    };
    seen_by_the_guest(
        dir,
        "the build directory",
        &format!("set {var} to a directory elsewhere (under /home or /tmp)"),
    )?;
    check_chars(
        dir,
        var,
        |c| c.is_ascii_alphanumeric() || "_+ /.-".contains(c),
        "characters other than letters, digits and _ + space / . - (virtme-ng's --rwdir takes \
         no others)",
    )
}

/// The host directories virtme-ng's guest init mounts an empty tmpfs over (or the kernel's
/// own filesystems): a host path under one is not the guest's. virtme/guest/virtme-init,
/// `mount_kernel_filesystems`, and virtme-ng-init, which does the same.
pub const HIDDEN_FROM_THE_GUEST: &[&str] = &[
    "/run",
    "/dev",
    "/proc",
    "/sys",
    "/var/log",
    "/var/tmp",
    "/var/cache",
    "/var/spool/rsyslog",
    "/var/lib/portables",
    "/var/lib/machines",
    "/var/lib/private",
    "/var/lib/apt",
    "/var/lib/snapd/cookie",
    "/var/lib/sudo",
];

/// Refuses `path` (what the guest must read or write: the build directory, the directory a
/// command runs in) when the guest cannot see it, naming why and `fix`.
pub fn seen_by_the_guest(path: &Path, what: &str, fix: &str) -> Result<()> {
    let abs = path
        .canonicalize()
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_path_buf());
    if let Some(hidden) = HIDDEN_FROM_THE_GUEST.iter().find(|h| abs.starts_with(h)) {
        bail!(
            "{what} {} is under {hidden}, which virtme-ng's guest covers with an empty tmpfs: \
             the guest would not see it; {fix}",
            abs.display()
        );
    }
    Ok(())
}

/// The current directory, where a command runs in the guest (`vm-run`, `bpfvm exec`,
/// `bpfvm shell`), refused when the guest cannot see it.
pub fn guest_cwd() -> Result<PathBuf> {
    let cwd = std::env::current_dir().context("the current directory")?;
    seen_by_the_guest(
        &cwd,
        "the current directory",
        "the guest works there: run from a directory elsewhere",
    )?;
    Ok(cwd)
}

fn check_chars(dir: &Path, var: &str, ok: impl Fn(char) -> bool, refused: &str) -> Result<()> {
    let Some(text) = dir.to_str() else {
        bail!(
            "{} is not UTF-8; set {var} to a directory whose path is",
            dir.display()
        );
    };
    if let Some(c) = text.chars().find(|&c| !ok(c)) {
        bail!(
            "{text:?} holds the character {c:?}; bpfvm cannot use a directory whose path holds \
             {refused}: set {var} to another directory"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A checkout moved after it was built answers with where it is now; a run-time
    /// `CARGO_MANIFEST_DIR` that is not a member of a bpfvm checkout (a user's crate, as a cargo
    /// runner) or none at all gives the compiled-in root.
    #[test]
    fn the_root_is_where_the_checkout_is_now() {
        let compiled = root_from(None);
        assert!(compiled.join("vm/Cargo.toml").is_file(), "{compiled:?}");
        let moved = tempfile::tempdir().unwrap();
        let this_file = moved.path().join(file!());
        std::fs::create_dir_all(this_file.parent().unwrap()).unwrap();
        std::fs::write(&this_file, "").unwrap();
        assert_eq!(
            root_from(Some(moved.path().join("xtask").into())),
            moved.path()
        );
        let users_crate = tempfile::tempdir().unwrap();
        assert_eq!(root_from(Some(users_crate.path().into())), compiled);
        assert_eq!(root_from(Some("/".into())), compiled);
    }

    fn cache(xdg: Option<&str>, home: Option<&str>) -> Result<PathBuf> {
        cache_dir_from(xdg.map(Into::into), home.map(Into::into))
    }

    #[test]
    fn the_cache_follows_the_xdg_spec() {
        assert_eq!(
            cache(Some("/x"), Some("/h")).unwrap(),
            Path::new("/x/bpfvm")
        );
        assert_eq!(
            cache(None, Some("/h")).unwrap(),
            Path::new("/h/.cache/bpfvm")
        );
        assert_eq!(
            cache(Some(""), Some("/h")).unwrap(),
            Path::new("/h/.cache/bpfvm")
        );
        // A relative XDG_CACHE_HOME is invalid and ignored, as the spec says.
        assert_eq!(
            cache(Some("rel/x"), Some("/h")).unwrap(),
            Path::new("/h/.cache/bpfvm")
        );
    }

    #[test]
    fn no_home_is_an_error_not_root() {
        for home in [None, Some(""), Some("relative")] {
            let e = cache(None, home).unwrap_err().to_string();
            assert!(e.contains("neither HOME nor XDG_CACHE_HOME"), "{e}");
            assert!(e.contains("set one"), "{e}");
        }
        assert_eq!(cache(Some("/x"), None).unwrap(), Path::new("/x/bpfvm"));
    }

    #[test]
    fn a_cache_path_that_breaks_path_is_refused_naming_the_variable() {
        let e = cache(Some("/a:b"), Some("/h")).unwrap_err().to_string();
        assert!(e.contains("\"/a:b/bpfvm\" holds the character ':'"), "{e}");
        assert!(e.contains("set XDG_CACHE_HOME to another directory"), "{e}");
        let e = cache(None, Some("/h\nx")).unwrap_err().to_string();
        assert!(e.contains("'\\n'") && e.contains("set HOME"), "{e}");
        cache(Some("/with space"), None).unwrap();
    }

    #[test]
    fn a_target_dir_vng_cannot_mount_is_refused() {
        check_target_dir(Path::new("/work/my proj/target")).unwrap();
        for (dir, c) in [
            ("/t=x", "'='"),
            ("/t,x", "','"),
            ("/t:x", "':'"),
            ("/t\tx", "'\\t'"),
        ] {
            let e = check_target_dir(Path::new(dir)).unwrap_err().to_string();
            assert!(
                e.contains(&format!("holds the character {c}")),
                "{dir}: {e}"
            );
            assert!(e.contains("CARGO_TARGET_DIR"), "{e}");
        }
    }

    /// Each directory virtme-ng hides from the guest is refused, naming it; others pass.
    #[test]
    fn a_path_the_guest_cannot_see_is_refused() {
        for hidden in HIDDEN_FROM_THE_GUEST {
            let p = Path::new(hidden).join("bpfvm-checkout/target");
            let e = seen_by_the_guest(&p, "the build directory", "move it").unwrap_err();
            assert!(
                e.to_string()
                    .contains(&format!("/bpfvm-checkout/target is under {hidden}, which")),
                "{e}"
            );
        }
        for ok in [
            "/tmp/x/target",
            "/home/u/src/bpfvm/target",
            "/var/lib/x",
            "/variable",
        ] {
            seen_by_the_guest(Path::new(ok), "the build directory", "").unwrap();
        }
    }
}
