//! `kernels list`, the same for `bpfvm kernels` and `cargo xtask kernels list`.
use std::process::ExitCode;

/// Prints [`list_lines`].
pub fn list() -> anyhow::Result<ExitCode> {
    for line in list_lines()? {
        bpfvm_host::ui::print_stdout(&line);
    }
    Ok(ExitCode::SUCCESS)
}

/// `kernels list`: each pin and where it is cached, then each cached kernel tree build
/// (`--kernel-tree`), most recently used first.
pub fn list_lines() -> anyhow::Result<Vec<String>> {
    let mut lines = Vec::new();
    for arch in bpfvm_host::domain::arch::Arch::EVERY {
        for pin in bpfvm_host::kernel::pins::pins_for(arch)? {
            let cached = bpfvm_host::kernel::pins::cached(&pin)
                .map_or("not cached".to_string(), |t| {
                    format!("cached at {}", t.root.display())
                });
            lines.push(format!(
                "{:<6} {:<7} {:<28} {}  ({cached})",
                pin.version,
                pin.arch.name(),
                pin.release,
                pin.description
            ));
        }
    }
    let trees =
        bpfvm_host::kernel::source_tree::list(&bpfvm_host::kernel::source_tree::cache_root());
    if !trees.is_empty() {
        lines.push(format!(
            "kernel tree builds in {} (least recently used removed past BPFVM_TREE_CACHE_GB, default 20):",
            bpfvm_host::kernel::source_tree::cache_root().display()
        ));
    }
    for t in trees {
        let what = match &t.stamp {
            Some(s) => format!(
                "{} from {}{}, built in {} s",
                s.release,
                s.tree,
                match &s.commit {
                    Some(c) => format!(
                        " at {}{}",
                        &c[..c.len().min(12)],
                        if s.dirty { " (dirty)" } else { "" }
                    ),
                    None => String::new(),
                },
                s.build_seconds
            ),
            None => "no complete build (a build failed or was interrupted)".into(),
        };
        lines.push(format!(
            "  {:>6.1} GB  {what}  ({})",
            t.bytes as f64 / 1e9,
            t.slot.dir.display()
        ));
    }
    Ok(lines)
}
