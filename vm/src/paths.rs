//! Where things live: the project checkout and the per-user cache.
use std::path::PathBuf;

/// The root of the bpfvm checkout (the workspace holding `vm/`).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("vm/ sits inside the workspace")
        .to_path_buf()
}

/// `$XDG_CACHE_HOME/bpfvm`, or `~/.cache/bpfvm`: kernels, the virtme-ng venv, built tools.
pub fn cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
            PathBuf::from(home).join(".cache")
        });
    base.join("bpfvm")
}

/// The workspace's `target/` directory (honours `CARGO_TARGET_DIR`).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}
