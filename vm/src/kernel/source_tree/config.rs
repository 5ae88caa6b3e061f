//! The config a kernel tree is built with, and the check that the built config kept what the
//! suite needs. The base is every symbol at its Kconfig default, as vmtest.sh's olddefconfig
//! over its fragments leaves it; the fragments are merged over it by the tree's own
//! `scripts/kconfig/merge_config.sh` (alldefconfig with the fragments as `KCONFIG_ALLCONFIG`),
//! in this order, later values winning:
//!
//! 1. `kernels/tree/boot.config`: what virtme-ng needs to boot a kernel without modules;
//! 2. the tree's `tools/testing/selftests/bpf/config`, `config.vm` and `config.<arch>` (what the
//!    kernel's BPF selftests need, the files and the order vmtest.sh merges), without their
//!    module lines: bpfvm builds everything in;
//! 3. `kernels/tree/suite.config`: what this suite needs;
//! 4. the user's `--kconfig` fragments.
//!
//! Kconfig drops a value whose dependencies are not met, silently (scripts/kconfig/confdata.c
//! writes what `sym_calc_value` computed). So after the merge every line of 1, 3 and 4 is
//! checked against the final `.config`; a line of 2 that did not survive is only reported.
use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Result};

pub(crate) const BOOT: &str = include_str!("../../../../kernels/tree/boot.config");
pub(crate) const SUITE: &str = include_str!("../../../../kernels/tree/suite.config");
pub(crate) const SELFTESTS_EXTRA: &str = include_str!("../../../../kernels/tree/selftests.config");

/// The fragments the selftests keep the options they need in, relative to the tree, in the
/// order vmtest.sh concatenates them: the common one, the VM's (6.8 and later) and the host
/// architecture's (`config.x86_64`, `config.aarch64`: a tree is built for the host's).
pub(crate) fn selftests_fragments() -> [String; 3] {
    let dir = "tools/testing/selftests/bpf";
    [
        format!("{dir}/config"),
        format!("{dir}/config.vm"),
        format!("{dir}/config.{}", std::env::consts::ARCH),
    ]
}

/// One requested value: `CONFIG_X=v`, or `# CONFIG_X is not set` (value `n`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Want {
    pub(crate) name: String,
    pub(crate) value: String,
}

impl Want {
    /// The line as a fragment writes it.
    pub(crate) fn line(&self) -> String {
        if self.value == "n" {
            format!("# CONFIG_{} is not set", self.name)
        } else {
            format!("CONFIG_{}={}", self.name, self.value)
        }
    }
}

/// A fragment line: one want, or alternatives of which the tree knows one (`A=y|B=y`, for an
/// option renamed between releases). `origin` is `file:line`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Line {
    pub(crate) alternatives: Vec<Want>,
    pub(crate) origin: String,
}

fn parse_want(s: &str) -> Option<Want> {
    let s = s.trim();
    if let Some(rest) = s.strip_prefix("# CONFIG_") {
        let name = rest.strip_suffix(" is not set")?;
        return valid_name(name).then(|| Want {
            name: name.to_string(),
            value: "n".into(),
        });
    }
    let (name, value) = s.strip_prefix("CONFIG_")?.split_once('=')?;
    (valid_name(name) && !value.is_empty()).then(|| Want {
        name: name.to_string(),
        value: value.to_string(),
    })
}

/// A symbol may have lower case letters, as `FONT_8x16`
/// (lib/fonts/Kconfig), which the selftests' `config.x86_64` sets.
fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Parses a fragment: `CONFIG_X=v`, `# CONFIG_X is not set`, alternatives joined by `|`,
/// comments and blank lines. Anything else is an error naming `file:line`.
pub(crate) fn parse_fragment(text: &str, file: &str) -> Result<Vec<Line>> {
    let mut lines = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let origin = format!("{file}:{}", n + 1);
        let t = raw.trim();
        if t.is_empty() {
            continue;
        }
        if t.starts_with('#') && !t.ends_with(" is not set") {
            continue;
        }
        let alternatives: Option<Vec<Want>> = t.split('|').map(parse_want).collect();
        match alternatives {
            Some(alternatives) => lines.push(Line {
                alternatives,
                origin,
            }),
            None => bail!(
                "{origin}: `{t}` is not a config line; write CONFIG_NAME=value or \
                 `# CONFIG_NAME is not set`"
            ),
        }
    }
    Ok(lines)
}

/// The lines of the suite's own fragments (`boot.config`, `selftests.config`,
/// `suite.config`): what every tree's final config must keep.
pub(crate) fn suite_lines() -> Result<Vec<Line>> {
    let mut lines = parse_fragment(BOOT, "kernels/tree/boot.config")?;
    lines.extend(parse_fragment(
        SELFTESTS_EXTRA,
        "kernels/tree/selftests.config",
    )?);
    lines.extend(parse_fragment(SUITE, "kernels/tree/suite.config")?);
    Ok(lines)
}

/// Refuses a `--kconfig` line that cannot work at any commit, before anything is built: one
/// that sets an option the suite's own `suite` lines require to another value (merged after
/// them, it wins, and every commit's config would be found to lose the suite's option: 125
/// after a full configure, at every step of a bisect), and `=m` (a tree's modules are never
/// built or staged in the guest: the option would pass the config check and never load).
pub(crate) fn check_user(user: &[Line], suite: &[Line]) -> Result<()> {
    for line in user {
        for want in &line.alternatives {
            if want.value == "m" {
                bail!(
                    "{}: `{}`: bpfvm builds and stages no modules of a tree (the guest boots \
                     its bzImage alone), so the option would never load; write CONFIG_{}=y",
                    line.origin,
                    want.line(),
                    want.name
                );
            }
            let required = suite.iter().find_map(|s| {
                s.alternatives
                    .iter()
                    .find(|r| r.name == want.name && r.value != want.value)
                    .map(|r| (r, &s.origin))
            });
            if let Some((r, origin)) = required {
                bail!(
                    "{}: `{}` contradicts `{}` ({origin}), which bpfvm needs: every commit's \
                     config would lose it; remove the line",
                    line.origin,
                    want.line(),
                    r.line()
                );
            }
        }
    }
    Ok(())
}

/// A `.config` as name -> value; `# CONFIG_X is not set` reads as `n`.
pub(crate) fn parse_config(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(parse_want)
        .map(|w| (w.name, w.value))
        .collect()
}

/// A selftests fragment without its `=m` lines: bpfvm builds no in-tree module, and such an
/// option built in instead (`TEST_BPF`) would run its thousand tests at every boot.
pub(crate) fn selftests_kept(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim().ends_with("=m"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// What the tree's Kconfig files declare: each symbol's file:line and its `depends on` lines.
#[derive(Debug, Default)]
pub(crate) struct Symbols {
    declared: BTreeMap<String, Declared>,
}

#[derive(Debug, Clone, Default)]
struct Declared {
    at: String,
    depends: Vec<String>,
}

impl Symbols {
    /// Reads every `Kconfig*` file under `tree` (about 1,700 on 6.12; well under a second).
    pub(crate) fn read(tree: &Path) -> Result<Symbols> {
        let mut s = Symbols::default();
        let mut stack = vec![tree.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir)?.flatten() {
                let Ok(kind) = e.file_type() else { continue };
                let name = e.file_name();
                let name = name.to_string_lossy();
                if kind.is_dir() && !name.starts_with('.') {
                    stack.push(e.path());
                } else if kind.is_file() && name.starts_with("Kconfig") {
                    let rel = e.path().strip_prefix(tree).unwrap_or(&e.path()).to_owned();
                    let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                    s.add(&rel.to_string_lossy(), &text);
                }
            }
        }
        Ok(s)
    }

    /// Adds the entries of one Kconfig file.
    pub(crate) fn add(&mut self, file: &str, text: &str) {
        let mut current: Option<String> = None;
        for (n, line) in text.lines().enumerate() {
            let t = line.trim();
            let word = t.split_whitespace().next().unwrap_or("");
            match word {
                "config" | "menuconfig" => {
                    let name = t[word.len()..].trim().to_string();
                    let entry = self.declared.entry(name.clone()).or_default();
                    if entry.at.is_empty() {
                        entry.at = format!("{file}:{}", n + 1);
                    }
                    current = Some(name);
                }
                "choice" | "endchoice" | "menu" | "endmenu" | "if" | "endif" | "source"
                | "comment" => current = None,
                "depends" => {
                    if let (Some(name), Some(dep)) = (&current, t.strip_prefix("depends on")) {
                        if let Some(d) = self.declared.get_mut(name) {
                            d.depends.push(dep.trim().to_string());
                        }
                    }
                }
                _ => {}
            }
        }
    }

    pub(crate) fn knows(&self, name: &str) -> bool {
        self.declared.contains_key(name)
    }

    /// Why an option may have been dropped: where it is declared and what it depends on.
    pub(crate) fn explain(&self, name: &str) -> String {
        match self.declared.get(name) {
            None => "this tree declares no such option (no `config` entry in any Kconfig)".into(),
            Some(d) if d.depends.is_empty() => {
                format!("declared at {}, which lists no `depends on`", d.at)
            }
            Some(d) => format!("{} depends on: {}", d.at, d.depends.join("; ")),
        }
    }
}

/// The want of each line that this tree declares (the first alternative when it declares
/// none, so that the check names it).
pub(crate) fn resolve(lines: &[Line], symbols: &Symbols) -> Vec<(Want, String)> {
    lines
        .iter()
        .map(|l| {
            let want = l
                .alternatives
                .iter()
                .find(|w| symbols.knows(&w.name))
                .unwrap_or(&l.alternatives[0]);
            (want.clone(), l.origin.clone())
        })
        .collect()
}

/// Writes wants as a fragment file's text.
pub(crate) fn fragment_text(wants: &[(Want, String)]) -> String {
    wants.iter().map(|(w, _)| w.line() + "\n").collect()
}

/// One want the final config does not meet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lost {
    pub(crate) want: Want,
    pub(crate) origin: String,
    /// What the final `.config` says (`None`: absent, its dependencies unmet).
    pub(crate) got: Option<String>,
}

/// The wants `config` does not meet. `n` is met by an absent option too.
pub(crate) fn lost(wants: &[(Want, String)], config: &BTreeMap<String, String>) -> Vec<Lost> {
    wants
        .iter()
        .filter_map(|(want, origin)| {
            let got = config.get(&want.name);
            let met = match got {
                Some(v) => *v == want.value,
                None => want.value == "n",
            };
            (!met).then(|| Lost {
                want: want.clone(),
                origin: origin.clone(),
                got: got.cloned(),
            })
        })
        .collect()
}

/// The error for wants the final config lost, each with why.
pub(crate) fn lost_error(lost: &[Lost], symbols: &Symbols) -> String {
    let mut s = String::from(
        "the kernel config lost options bpfvm needs (Kconfig drops a value whose dependencies \
         are not met):\n",
    );
    for l in lost {
        let got = l
            .got
            .as_deref()
            .map_or("absent".to_string(), |v| format!("={v}"));
        s += &format!(
            "  {} ({}): the final .config has it {got}; {}\n",
            l.want.line(),
            l.origin,
            symbols.explain(&l.want.name)
        );
    }
    s += "fix: add the options it depends on to a fragment of yours (--kconfig FILE), or drop the \
          line from your fragment if it is yours";
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_fragments_parse() {
        for (text, name) in [(BOOT, "boot.config"), (SUITE, "suite.config")] {
            let lines = parse_fragment(text, name).unwrap();
            assert!(lines.len() > 10, "{name}");
        }
        let extra = parse_fragment(SELFTESTS_EXTRA, "selftests.config").unwrap();
        let extra: Vec<&str> = extra
            .iter()
            .flat_map(|l| l.alternatives.iter().map(|w| w.name.as_str()))
            .collect();
        assert_eq!(
            extra,
            [
                "MODULES",
                "MODULE_UNLOAD",
                "NAMESPACES",
                "NET_NS",
                "KALLSYMS_ALL",
                "INTEGRITY"
            ]
        );
        let suite = parse_fragment(SUITE, "suite.config").unwrap();
        let names: Vec<&str> = suite
            .iter()
            .flat_map(|l| l.alternatives.iter().map(|w| w.name.as_str()))
            .collect();
        for need in [
            "BPF_SYSCALL",
            "DEBUG_INFO_BTF",
            "MITIGATION_RETPOLINE",
            "RETPOLINE",
        ] {
            assert!(names.contains(&need), "{need}");
        }
    }

    /// A `--kconfig` line against a line the suite needs, or `=m`, is refused up front
    /// naming both lines; an option the suite leaves alone passes.
    #[test]
    fn a_user_line_against_the_suites_or_a_module_is_refused() {
        let suite = suite_lines().unwrap();
        let user = |text: &str| {
            let lines = parse_fragment(text, "mine.config").unwrap();
            check_user(&lines, &suite).map_err(|e| e.to_string())
        };
        let e = user(
            "CONFIG_DEBUG_KERNEL=y
# CONFIG_BPF_JIT is not set
",
        )
        .unwrap_err();
        assert!(
            e.starts_with("mine.config:2: `# CONFIG_BPF_JIT is not set` contradicts `CONFIG_BPF_JIT=y` (kernels/tree/suite.config:"),
            "{e}"
        );
        let e = user(
            "CONFIG_TEST_BPF=m
",
        )
        .unwrap_err();
        assert!(
            e.contains("mine.config:1") && e.contains("CONFIG_TEST_BPF=y"),
            "{e}"
        );
        user(
            "CONFIG_BPF_JIT=y
CONFIG_DEBUG_KERNEL=y
# CONFIG_DEBUG_INFO_REDUCED is not set
",
        )
        .unwrap();
    }

    #[test]
    fn fragment_lines_and_errors() {
        let lines = parse_fragment(
            "# a comment\n\nCONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C=y|CONFIG_D=y\nCONFIG_E=\"x\"\n",
            "f",
        )
        .unwrap();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[1].alternatives[0].value, "n");
        assert_eq!(lines[2].alternatives.len(), 2);
        assert_eq!(lines[2].origin, "f:5");
        assert_eq!(lines[3].alternatives[0].value, "\"x\"");
        let err = parse_fragment("CONFIG_A=y\nBPF=y\n", "mine.config")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("mine.config:2") && err.contains("BPF=y"),
            "{err}"
        );
        assert!(parse_fragment("CONFIG_A-B=y\n", "f").is_err());
        assert!(parse_fragment("CONFIG_FONT_8x16=y\n", "f").is_ok());
        assert!(parse_fragment("CONFIG_A=\n", "f").is_err());
    }

    #[test]
    fn module_lines_leave_the_selftests_fragment() {
        let text = "CONFIG_BPF=y\nCONFIG_MODULES=y\nCONFIG_EXPERT=y\nCONFIG_TEST_BPF=m\nCONFIG_XDP_SOCKETS=y\n";
        assert_eq!(
            selftests_kept(text),
            "CONFIG_BPF=y\nCONFIG_MODULES=y\nCONFIG_EXPERT=y\nCONFIG_XDP_SOCKETS=y\n"
        );
    }

    fn symbols() -> Symbols {
        let mut s = Symbols::default();
        s.add(
            "lib/Kconfig.debug",
            "config DEBUG_INFO_BTF\n\tbool \"BTF\"\n\tdepends on BPF_SYSCALL\n\tdepends on PAHOLE_VERSION >= 116\n\nmenu \"x\"\n\tdepends on FOO\nconfig MITIGATION_RETPOLINE\n\tbool\n",
        );
        s
    }

    #[test]
    fn an_alternative_the_tree_knows_is_chosen() {
        let lines = parse_fragment(
            "CONFIG_MITIGATION_RETPOLINE=y|CONFIG_RETPOLINE=y\nCONFIG_RETPOLINE=y|CONFIG_X=y\n",
            "s",
        )
        .unwrap();
        let wants = resolve(&lines, &symbols());
        assert_eq!(wants[0].0.name, "MITIGATION_RETPOLINE");
        // None known: the first, so that the check names it.
        assert_eq!(wants[1].0.name, "RETPOLINE");
    }

    #[test]
    fn a_dropped_option_is_named_with_its_dependencies() {
        let wants = resolve(
            &parse_fragment("CONFIG_DEBUG_INFO_BTF=y\n# CONFIG_MODULES is not set\nCONFIG_HZ=250\nCONFIG_BPF=y\n", "suite.config").unwrap(),
            &symbols(),
        );
        let config = parse_config("CONFIG_BPF=y\nCONFIG_HZ=1000\n# CONFIG_DEBUG_INFO is not set\n");
        let lost = lost(&wants, &config);
        let names: Vec<&str> = lost.iter().map(|l| l.want.name.as_str()).collect();
        // MODULES absent meets "is not set"; BPF is met.
        assert_eq!(names, ["DEBUG_INFO_BTF", "HZ"]);
        let msg = lost_error(&lost, &symbols());
        assert!(msg.contains("CONFIG_DEBUG_INFO_BTF=y (suite.config:1): the final .config has it absent; lib/Kconfig.debug:1 depends on: BPF_SYSCALL; PAHOLE_VERSION >= 116"), "{msg}");
        assert!(
            msg.contains("CONFIG_HZ=250 (suite.config:3): the final .config has it =1000"),
            "{msg}"
        );
        assert!(msg.contains("--kconfig"), "{msg}");
        // A menu's depends on is not the option's.
        assert!(!symbols().explain("MITIGATION_RETPOLINE").contains("FOO"));
    }

    #[test]
    fn a_config_reads_set_and_unset_options() {
        let c = parse_config("#\n# comment\nCONFIG_A=y\n# CONFIG_B is not set\nCONFIG_S=\"a b\"\n");
        assert_eq!(c.get("A").unwrap(), "y");
        assert_eq!(c.get("B").unwrap(), "n");
        assert_eq!(c.get("S").unwrap(), "\"a b\"");
    }
}
