//! `--write`: the page of current figures, `docs/measured.md`. Each mode of bench-suite owns
//! one section of it between two markers and rewrites that section whole, with when, where and
//! how it was measured; the rest of the page is left as it is. Figures on the page are thus
//! always a command's output, and how they came to be is in the commit log.
use std::process::Command;

use anyhow::{bail, Context, Result};
use bpfvm_host::support::output::Events;
use bpfvm_host::support::paths::workspace_root;

/// The page, relative to the workspace.
const PAGE: &str = "docs/measured.md";

/// Writes `table` as section `name` of the page, headed by the date, the commit, the host, the
/// accelerator (`accel`) and `command`.
pub(super) fn write(
    name: &str,
    command: &str,
    accel: &str,
    table: &str,
    events: &Events,
) -> Result<()> {
    let path = workspace_root().join(PAGE);
    let text = std::fs::read_to_string(&path).with_context(|| format!("read {PAGE}"))?;
    let head = format!(
        "Measured {} UTC at {}; host: {}, {} CPUs; accelerator: {accel}.\n\
         Command: `{command}`",
        output("date", &["-u", "+%Y-%m-%d %H:%M"])?,
        commit()?,
        bpfvm_host::flows::bench::host_cpu(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let text = replace(&text, name, &format!("{head}\n\n{}", table.trim_end()))?;
    bpfvm_host::support::fs::write_atomic(&path, text.as_bytes())?;
    events.note(format!("wrote the `{name}` section of {}", path.display()));
    Ok(())
}

/// The section's first and last lines.
fn markers(name: &str) -> (String, String) {
    (
        format!("<!-- bench-suite {name}: written by the command below; edit nothing here -->"),
        format!("<!-- end bench-suite {name} -->"),
    )
}

/// `text` with section `name` holding `body`: replaced where the page has it, else appended.
fn replace(text: &str, name: &str, body: &str) -> Result<String> {
    let (start, end) = markers(name);
    let section = format!("{start}\n{body}\n{end}");
    match (text.find(&start), text.find(&end)) {
        (Some(a), Some(b)) if a < b => {
            Ok(format!("{}{section}{}", &text[..a], &text[b + end.len()..]))
        }
        (None, None) => Ok(format!("{}\n\n{section}\n", text.trim_end())),
        _ => bail!(
            "{PAGE} has a broken `{name}` section (one of its markers is missing or they are \
             out of order): restore it from git (`git checkout {PAGE}`) and run again"
        ),
    }
}

/// The short commit, and whether the work tree differs from it.
fn commit() -> Result<String> {
    let head = output("git", &["rev-parse", "--short", "HEAD"])?;
    let dirty = !output("git", &["status", "--porcelain", "--untracked-files=no"])?.is_empty();
    Ok(match dirty {
        true => format!("{head} with uncommitted changes"),
        false => head,
    })
}

fn output(program: &str, args: &[&str]) -> Result<String> {
    let o = Command::new(program)
        .args(args)
        .current_dir(workspace_root())
        .output()
        .with_context(|| format!("run {program}"))?;
    if !o.status.success() {
        bail!("{program} {} failed: {}", args.join(" "), o.status);
    }
    Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_is_replaced_whole_and_the_rest_of_the_page_kept() {
        let page = "# Measured\n\nintro\n";
        let one = replace(page, "warm", "table 1").unwrap();
        assert!(
            one.starts_with("# Measured\n\nintro\n\n<!-- bench-suite warm"),
            "{one}"
        );
        let both = replace(&one, "fresh", "first run").unwrap();
        let again = replace(&both, "warm", "table 2").unwrap();
        assert!(
            !again.contains("table 1") && again.contains("table 2"),
            "{again}"
        );
        assert!(
            again.contains("first run") && again.contains("intro"),
            "{again}"
        );
        assert!(
            again.find("table 2").unwrap() < again.find("first run").unwrap(),
            "the section stays where it was: {again}"
        );
        assert_eq!(replace(&again, "warm", "table 2").unwrap(), again);
    }

    #[test]
    fn a_page_with_half_a_section_is_refused() {
        let (start, end) = markers("warm");
        for broken in [
            format!("{start}\nx\n"),
            format!("x\n{end}\n"),
            format!("{end}\n{start}\n"),
        ] {
            let e = replace(&broken, "warm", "t").unwrap_err().to_string();
            assert!(e.contains("git checkout docs/measured.md"), "{e}");
        }
    }
}
