//! The kernel source tree behind `--kernel-tree DIR`: checked before anything is built, and
//! the key that says whether its sources changed since the last build.
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

/// A checked source tree.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    pub(crate) dir: PathBuf,
    /// What `make kernelversion` prints (see [`kernelversion`]).
    pub(crate) kernelversion: String,
    /// `HEAD` and whether the work tree differs from it, for a git tree.
    pub(crate) git: Option<Git>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Git {
    pub(crate) commit: String,
    pub(crate) dirty: bool,
}

/// Opens and checks `dir`: a kernel tree (top-level `Makefile` with `VERSION`/`PATCHLEVEL`,
/// `Kbuild`, `scripts/kconfig/merge_config.sh`) with `arch/x86`, on an x86_64 host, without an
/// in-tree build (make refuses `O=` beside one, and bpfvm never touches the tree's `.config`).
/// A read-only tree is fine: everything is written under the build directory.
pub(crate) fn open(dir: &Path) -> Result<Source> {
    let shown = dir.display();
    let dir = dir
        .canonicalize()
        .with_context(|| format!("--kernel-tree {shown}: no such directory"))?;
    if !dir.is_dir() {
        bail!("--kernel-tree {shown} is not a directory; pass the top directory of a kernel source tree");
    }
    let makefile = std::fs::read_to_string(dir.join("Makefile")).unwrap_or_default();
    let Some(kernelversion) = kernelversion(&makefile) else {
        bail!(
            "--kernel-tree {shown} is not a kernel source tree (no top-level Makefile with \
             VERSION and PATCHLEVEL); pass the tree's top directory (the one with Kbuild and \
             arch/)"
        );
    };
    for needed in ["Kbuild", "scripts/kconfig/merge_config.sh", "kernel/bpf"] {
        if !dir.join(needed).exists() {
            bail!("--kernel-tree {shown} has no {needed}: not a complete kernel source tree");
        }
    }
    if std::env::consts::ARCH != "x86_64" {
        bail!(
            "--kernel-tree: bpfvm builds and boots x86_64 kernels, and this host is {}",
            std::env::consts::ARCH
        );
    }
    if !dir.join("arch/x86/Kconfig").is_file() {
        bail!(
            "--kernel-tree {shown} has no arch/x86: a tree for another architecture; bpfvm \
             builds x86_64 kernels"
        );
    }
    if let Some(found) = in_tree_build(&dir) {
        bail!(
            "--kernel-tree {shown} holds an in-tree build ({found}); make refuses to build out \
             of tree (O=) beside it, and bpfvm never touches your .config. Use a clean \
             worktree (`git -C {shown} worktree add ../linux-bpfvm HEAD`) or run `make \
             mrproper` in the tree"
        );
    }
    let git = git_state(&dir)?;
    Ok(Source {
        dir,
        kernelversion,
        git,
    })
}

/// What an in-tree build left, if anything (what the top-level Makefile's `outputmakefile`
/// target checks before an `O=` build: `.config`, `include/config` and
/// `arch/$(SRCARCH)/include/generated`, the last also left by `make headers`), with the
/// architecture an in-tree `.config` is for when it is not x86.
fn in_tree_build(dir: &Path) -> Option<String> {
    let config = dir.join(".config");
    if config.exists() {
        let text = std::fs::read_to_string(&config).unwrap_or_default();
        let arch = ["ARM64", "ARM", "RISCV", "S390", "PPC", "LOONGARCH"]
            .into_iter()
            .find(|a| text.contains(&format!("\nCONFIG_{a}=y")));
        return Some(match arch {
            Some(a) => format!(".config, configured for {}", a.to_lowercase()),
            None => ".config".into(),
        });
    }
    ["include/config", "arch/x86/include/generated"]
        .into_iter()
        .find(|p| dir.join(p).exists())
        .map(str::to_string)
}

/// `make kernelversion`, from the Makefile's own formula: VERSION.PATCHLEVEL.SUBLEVEL plus
/// EXTRAVERSION (`KERNELVERSION` in the top-level Makefile).
pub(crate) fn kernelversion(makefile: &str) -> Option<String> {
    let var = |name: &str| {
        makefile.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == name).then(|| v.trim().to_string())
        })
    };
    let version = var("VERSION").filter(|v| v.parse::<u32>().is_ok())?;
    let patchlevel = var("PATCHLEVEL").filter(|v| v.parse::<u32>().is_ok())?;
    let mut s = format!("{version}.{patchlevel}");
    if let Some(sub) = var("SUBLEVEL").filter(|v| !v.is_empty()) {
        s += &format!(".{sub}");
    }
    s += &var("EXTRAVERSION").unwrap_or_default();
    Some(s)
}

fn git(dir: &Path, args: &[&str]) -> Result<std::process::Output> {
    // --no-optional-locks: a read-only tree must not need the index written. The variables
    // that point git at another repository, index or work tree would key other sources than
    // the tree's.
    let mut cmd = Command::new("git");
    for var in [
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_EXTERNAL_DIFF",
        "GIT_DIFF_OPTS",
    ] {
        cmd.env_remove(var);
    }
    cmd.arg("--no-optional-locks")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .with_context(|| format!("running git {}", args.join(" ")))
}

/// `HEAD` and the dirty state when `dir` is the top of a git work tree.
fn git_state(dir: &Path) -> Result<Option<Git>> {
    let Ok(top) = git(dir, &["rev-parse", "--show-toplevel"]) else {
        return Ok(None);
    };
    if !top.status.success() || Path::new(String::from_utf8_lossy(&top.stdout).trim()) != dir {
        return Ok(None);
    }
    let head = git(dir, &["rev-parse", "HEAD"])?;
    if !head.status.success() {
        return Ok(None);
    }
    let status = git(dir, &["status", "--porcelain", "--untracked-files=normal"])?;
    Ok(Some(Git {
        commit: String::from_utf8_lossy(&head.stdout).trim().to_string(),
        dirty: !status.stdout.is_empty(),
    }))
}

/// What the build's sources are, as a hash. For a git tree: `HEAD`, `git diff HEAD` (no
/// external diff driver nor textconv filter: what is hashed is the bytes), the untracked
/// files (path and content), the files git does not diff (assume-unchanged, skip-worktree:
/// path and content) and the ignored files that are there (path, size, modification time:
/// `.git/info/exclude` can hide a source file from `git status`); an untracked or ignored
/// symlink to a directory by the files under it. Otherwise every file's
/// path, size and modification time (what make itself compares), symlinked directories
/// followed, `.git` and other dot-directories left out.
pub(crate) fn content_key(src: &Source) -> Result<String> {
    let mut h = Sha256::new();
    match &src.git {
        Some(g) => {
            h.update(g.commit.as_bytes());
            let diff = git(
                &src.dir,
                &["diff", "--no-ext-diff", "--no-textconv", "--binary", "HEAD"],
            )?;
            if !diff.status.success() {
                bail!("git diff HEAD failed in {}", src.dir.display());
            }
            h.update(&diff.stdout);
            let listed = |args: &[&str]| -> Result<Vec<String>> {
                let out = git(&src.dir, args)?;
                if !out.status.success() {
                    bail!("git {} failed in {}", args.join(" "), src.dir.display());
                }
                Ok(out
                    .stdout
                    .split(|&b| b == 0)
                    .filter(|p| !p.is_empty())
                    .map(|p| String::from_utf8_lossy(p).into_owned())
                    .collect())
            };
            let untracked = listed(&["ls-files", "-z", "--others", "--exclude-standard"])?;
            // `-v`: a lower-case tag is assume-unchanged, `S` skip-worktree.
            let hidden: Vec<String> = listed(&["ls-files", "-z", "-v"])?
                .into_iter()
                .filter_map(|l| {
                    let (tag, path) = l.split_once(' ')?;
                    (tag == "S" || tag.chars().all(|c| c.is_ascii_lowercase()))
                        .then(|| path.to_string())
                })
                .collect();
            for (kind, paths) in [("untracked", &untracked), ("hidden", &hidden)] {
                h.update(kind.as_bytes());
                for rel in paths {
                    hash_content(&src.dir.join(rel), rel, &mut h)?;
                }
            }
            // A tracked symlink is hashed as its target's name: one that leads out of the tree
            // would bring sources the key does not see.
            for entry in listed(&["ls-files", "-z", "-s"])? {
                let Some(path) = entry
                    .strip_prefix("120000 ")
                    .and_then(|e| e.split_once('\t'))
                else {
                    continue;
                };
                let path = path.1;
                if let Ok(target) = src.dir.join(path).canonicalize() {
                    if !target.starts_with(&src.dir) {
                        bail!(
                            "--kernel-tree {}: the tracked symlink {path} leads out of the tree \
                             (to {}); bpfvm's cache key covers only the tree's own files. \
                             Replace the link with what it points to, or build the kernel \
                             yourself and pass --kernel path/to/bzImage",
                            src.dir.display(),
                            target.display()
                        );
                    }
                }
            }
            let ignored = listed(&[
                "ls-files",
                "-z",
                "--others",
                "--ignored",
                "--exclude-standard",
            ])?;
            h.update(b"ignored");
            for rel in ignored {
                hash_file_metadata(&src.dir.join(&rel), &rel, &mut h)?;
            }
        }
        None => hash_metadata(&src.dir, &mut h)?,
    }
    Ok(hex::encode(h.finalize()))
}

/// An untracked or hidden file by path and content. git lists a symlink as one file, never
/// what lies behind it: a link is hashed as its target's name and, when it leads to a
/// directory, as the files under it ([`hash_metadata`]), so that an edit behind it changes
/// the key. A dangling link is its target's name alone.
fn hash_content(path: &Path, rel: &str, h: &mut Sha256) -> Result<()> {
    h.update(rel.as_bytes());
    if let Ok(target) = std::fs::read_link(path) {
        h.update(b"\0link\0");
        h.update(target.as_os_str().as_encoded_bytes());
    }
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => hash_metadata(path, h),
        Ok(_) => {
            h.update(std::fs::read(path).with_context(|| format!("read {}", path.display()))?);
            Ok(())
        }
        Err(_) => Ok(()),
    }
}

/// An ignored file by path, size and modification time; a symlink to a directory by the
/// files under it.
fn hash_file_metadata(path: &Path, rel: &str, h: &mut Sha256) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    h.update(rel.as_bytes());
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => hash_metadata(path, h)?,
        Ok(meta) => h.update(
            format!("\0{}\0{}.{}\n", meta.len(), meta.mtime(), meta.mtime_nsec()).as_bytes(),
        ),
        Err(_) => {}
    }
    Ok(())
}

/// Every file under `dir` by path, size and modification time. Symlinks are followed (make
/// reads through them), each directory once (a link cycle ends there), and a link's target
/// is hashed too.
fn hash_metadata(dir: &Path, h: &mut Sha256) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let mut files = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let meta = std::fs::metadata(&d).with_context(|| format!("read {}", d.display()))?;
        if !seen.insert((meta.dev(), meta.ino())) {
            continue;
        }
        for e in std::fs::read_dir(&d).with_context(|| format!("read {}", d.display()))? {
            let e = e?;
            let path = e.path();
            let rel = path.strip_prefix(dir).unwrap_or(&path).to_owned();
            let link = std::fs::read_link(&path).ok();
            // A dangling link is hashed as the link it is.
            let meta = match std::fs::metadata(&path) {
                Ok(m) => m,
                Err(_) => e.metadata()?,
            };
            if meta.is_dir() {
                if !e.file_name().to_string_lossy().starts_with('.') {
                    stack.push(path);
                }
                if let Some(target) = link {
                    files.push((rel, 0, 0, 0, Some(target)));
                }
                continue;
            }
            files.push((rel, meta.len(), meta.mtime(), meta.mtime_nsec(), link));
        }
    }
    files.sort();
    for (rel, len, s, ns, link) in files {
        h.update(rel.as_os_str().as_encoded_bytes());
        h.update(format!("\0{len}\0{s}.{ns}\0{link:?}\n").as_bytes());
    }
    Ok(())
}

/// The commit `rev` names in the git tree `tree`.
pub(crate) fn verify_rev(tree: &Path, rev: &str) -> Result<String> {
    let verify = git(
        tree,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{rev}^{{commit}}"),
        ],
    )?;
    if !verify.status.success() {
        bail!(
            "--against {rev}: not a pin, a kernel tree, a bzImage, nor a commit of the git tree {}",
            tree.display()
        );
    }
    Ok(String::from_utf8_lossy(&verify.stdout).trim().to_string())
}

pub(crate) fn checkout_ref(tree: &Path, rev: &str, root: &Path) -> Result<PathBuf> {
    let commit = verify_rev(tree, rev)?;
    let dest = root.join(&commit);
    const COMPLETE: &str = ".bpfvm-complete";
    if dest.join(COMPLETE).is_file() {
        return Ok(dest);
    }
    std::fs::create_dir_all(root).with_context(|| format!("create {}", root.display()))?;
    if dest.exists() {
        std::fs::remove_dir_all(&dest)
            .with_context(|| format!("remove the incomplete {}", dest.display()))?;
    }
    let tmp = tempfile::Builder::new().prefix(".tmp-").tempdir_in(root)?;
    duct::cmd!("git", "-C", tree, "archive", "--format=tar", &commit)
        .pipe(duct::cmd!("tar", "-x", "-C", tmp.path()))
        .stderr_capture()
        .run()
        .with_context(|| {
            format!(
                "git archive {commit} | tar -x into {}",
                tmp.path().display()
            )
        })?;
    std::fs::write(tmp.path().join(COMPLETE), commit.as_bytes())?;
    std::fs::rename(tmp.keep(), &dest)
        .with_context(|| format!("move the checkout to {}", dest.display()))?;
    Ok(dest)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest directory `open` accepts as a kernel tree.
    pub(crate) fn fake_tree(dir: &Path) {
        std::fs::write(
            dir.join("Makefile"),
            "# SPDX\nVERSION = 6\nPATCHLEVEL = 12\nSUBLEVEL = 118\nEXTRAVERSION =\nNAME = Baby Opossum Posse\n",
        )
        .unwrap();
        std::fs::write(dir.join("Kbuild"), "").unwrap();
        for d in ["scripts/kconfig", "kernel/bpf", "arch/x86"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        std::fs::write(dir.join("scripts/kconfig/merge_config.sh"), "").unwrap();
        std::fs::write(dir.join("arch/x86/Kconfig"), "").unwrap();
    }

    #[test]
    fn kernelversion_follows_the_makefile() {
        let m = "VERSION = 6\nPATCHLEVEL = 13\nSUBLEVEL = 0\nEXTRAVERSION = -rc1\n";
        assert_eq!(kernelversion(m).unwrap(), "6.13.0-rc1");
        assert_eq!(
            kernelversion("VERSION = 6\nPATCHLEVEL = 1\nSUBLEVEL =\n").unwrap(),
            "6.1"
        );
        assert!(kernelversion("all:\n\techo hi\n").is_none());
        assert!(kernelversion("VERSION = six\nPATCHLEVEL = 1\n").is_none());
    }

    #[test]
    fn bad_trees_are_refused_naming_the_problem() {
        let d = tempfile::tempdir().unwrap();
        let err = |p: &Path| format!("{:#}", open(p).unwrap_err());
        assert!(err(&d.path().join("nope")).contains("no such directory"));
        assert!(err(d.path()).contains("is not a kernel source tree"));
        fake_tree(d.path());
        std::fs::remove_dir_all(d.path().join("arch/x86")).unwrap();
        assert!(err(d.path()).contains("another architecture"));
        fake_tree(d.path());
        std::fs::write(d.path().join(".config"), "#\nCONFIG_ARM64=y\n").unwrap();
        let e = err(d.path());
        assert!(
            e.contains("in-tree build (.config, configured for arm64)"),
            "{e}"
        );
        assert!(e.contains("mrproper") && e.contains("worktree add"), "{e}");
        std::fs::remove_file(d.path().join(".config")).unwrap();
        let s = open(d.path()).unwrap();
        assert_eq!(s.kernelversion, "6.12.118");
    }

    fn git_tree(dir: &Path) -> impl Fn(&[&str]) {
        fake_tree(dir);
        let dir = dir.to_path_buf();
        let sh = move |args: &[&str]| {
            let ok = Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@t", "-C"])
                .arg(&dir)
                .args(args)
                .output()
                .unwrap()
                .status
                .success();
            assert!(ok, "git {args:?}");
        };
        sh(&["init", "-q"]);
        sh(&["add", "."]);
        sh(&["commit", "-q", "-m", "base"]);
        sh
    }

    /// What git can be told to hide from `git diff` and `git status` still changes the key:
    /// an external diff driver that prints nothing, a file marked assume-unchanged or
    /// skip-worktree, a file listed in `.git/info/exclude`.
    #[test]
    fn what_git_hides_still_changes_the_key() {
        let d = tempfile::tempdir().unwrap();
        let sh = git_tree(d.path());
        let key = || content_key(&open(d.path()).unwrap()).unwrap();
        sh(&["config", "diff.external", "true"]);
        std::fs::write(d.path().join(".gitattributes"), "*.c diff=none\n").unwrap();
        sh(&["config", "diff.none.textconv", "true"]);
        sh(&["add", ".gitattributes"]);
        sh(&["commit", "-q", "-m", "attributes"]);
        let k0 = key();
        std::fs::write(d.path().join("Kbuild"), "obj-y += x.o\n").unwrap();
        let k1 = key();
        assert_ne!(k0, k1, "an edit behind an external diff driver");
        sh(&["update-index", "--assume-unchanged", "Kbuild"]);
        std::fs::write(d.path().join("Kbuild"), "obj-y += y.o\n").unwrap();
        let k2 = key();
        assert_ne!(k1, k2, "an edit to an assume-unchanged file");
        sh(&[
            "update-index",
            "--no-assume-unchanged",
            "--skip-worktree",
            "Kbuild",
        ]);
        std::fs::write(d.path().join("Kbuild"), "obj-y += z.o\n").unwrap();
        assert_ne!(k2, key(), "an edit to a skip-worktree file");
        std::fs::write(d.path().join(".git/info/exclude"), "kernel/bpf/hidden.c\n").unwrap();
        let k3 = key();
        std::fs::write(d.path().join("kernel/bpf/hidden.c"), "int x;").unwrap();
        assert_ne!(k3, key(), "a file .git/info/exclude hides");
    }

    /// In a git tree, an untracked or ignored symlink to a directory is keyed by the files
    /// behind it: an edit there changes the key (git lists the link, never its files).
    #[test]
    fn an_edit_behind_an_untracked_or_ignored_symlinked_directory_changes_the_key() {
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("linux");
        std::fs::create_dir(&tree).unwrap();
        let sh = git_tree(&tree);
        std::fs::write(tree.join(".gitignore"), "/ignored-link\n").unwrap();
        sh(&["add", ".gitignore"]);
        sh(&["commit", "-q", "-m", "ignore"]);
        let key = || content_key(&open(&tree).unwrap()).unwrap();
        for link in ["untracked-link", "ignored-link"] {
            let outside = d.path().join(format!("{link}-target"));
            std::fs::create_dir(&outside).unwrap();
            std::fs::write(outside.join("filter.h"), "a").unwrap();
            std::os::unix::fs::symlink(&outside, tree.join(link)).unwrap();
            let before = key();
            assert_eq!(before, key());
            std::fs::write(outside.join("filter.h"), "ab").unwrap();
            assert_ne!(before, key(), "an edit behind {link}");
        }
    }

    /// In a tree that is not a git repository, a symlinked directory's files are keyed.
    #[test]
    fn a_symlinked_directory_of_a_plain_tree_is_followed() {
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("linux");
        std::fs::create_dir(&tree).unwrap();
        fake_tree(&tree);
        let outside = d.path().join("bpf-src");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("bloom_filter.c"), "a").unwrap();
        std::fs::remove_dir(tree.join("kernel/bpf")).unwrap();
        std::os::unix::fs::symlink(&outside, tree.join("kernel/bpf")).unwrap();
        let src = Source {
            git: None,
            ..open(&tree).unwrap()
        };
        let a = content_key(&src).unwrap();
        std::fs::write(outside.join("bloom_filter.c"), "ab").unwrap();
        assert_ne!(a, content_key(&src).unwrap());
    }

    #[test]
    fn the_key_of_a_plain_tree_changes_with_a_file_and_only_then() {
        let d = tempfile::tempdir().unwrap();
        fake_tree(d.path());
        let s = open(d.path()).unwrap();
        let src = Source { git: None, ..s };
        let a = content_key(&src).unwrap();
        assert_eq!(a, content_key(&src).unwrap());
        std::fs::write(d.path().join("kernel/bpf/bloom_filter.c"), "x").unwrap();
        let b = content_key(&src).unwrap();
        assert_ne!(a, b);
        std::fs::write(d.path().join("kernel/bpf/bloom_filter.c"), "xy").unwrap();
        assert_ne!(b, content_key(&src).unwrap());
    }

    #[test]
    fn the_key_of_a_git_tree_follows_head_the_diff_and_untracked_files() {
        let d = tempfile::tempdir().unwrap();
        let _ = git_tree(d.path());
        let clean = open(d.path()).unwrap();
        let git = clean.git.clone().expect("a git tree");
        assert!(!git.dirty);
        let k0 = content_key(&clean).unwrap();
        std::fs::write(d.path().join("Kbuild"), "obj-y += x.o\n").unwrap();
        let edited = open(d.path()).unwrap();
        assert!(edited.git.as_ref().unwrap().dirty);
        let k1 = content_key(&edited).unwrap();
        assert_ne!(k0, k1);
        std::fs::write(d.path().join("new.c"), "int x;").unwrap();
        let k2 = content_key(&open(d.path()).unwrap()).unwrap();
        assert_ne!(k1, k2);
        assert_eq!(k2, content_key(&open(d.path()).unwrap()).unwrap());
        // The first commit, checked out beside it: without the later edits, made once.
        let refs = d.path().join("refs");
        let base = checkout_ref(d.path(), "HEAD", &refs).unwrap();
        assert_eq!(std::fs::read_to_string(base.join("Kbuild")).unwrap(), "");
        assert!(!base.join("new.c").exists());
        assert_eq!(checkout_ref(d.path(), "HEAD", &refs).unwrap(), base);
        let err = checkout_ref(d.path(), "no-such-ref", &refs)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not a pin, a kernel tree, a bzImage, nor a commit"),
            "{err}"
        );
    }
}
