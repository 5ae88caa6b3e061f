//! A private apt: its own sources.list, lists and cache under `cache_dir()/apt/`, so fetching
//! kernels needs no root and never touches the host's apt state.
use super::pin::{Package, Pin, Source};
use crate::domain::arch::Arch;
use crate::support::output::Events;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Keyring every source is checked against (Debian package `debian-archive-keyring`).
pub(super) const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// The sources.list text for a pin's sources.
pub(super) fn sources_list(sources: &[Source]) -> String {
    sources
        .iter()
        .map(|s| {
            format!(
                "deb [signed-by={KEYRING}] {} {} {}\n",
                s.uri,
                s.suite,
                s.components.join(" ")
            )
        })
        .collect()
}

/// apt state for one set of sources.
#[derive(Debug, Clone)]
pub(super) struct Apt {
    pub dir: PathBuf,
    pub sources_list: String,
    /// The architecture of the packages it downloads.
    pub arch: Arch,
    /// Running as root: apt would drop to `_apt` for downloads, which cannot write our
    /// private (root-owned) directories; keep it as root instead.
    pub as_root: bool,
}

impl Apt {
    /// The private apt for a pin: `cache_root/apt/<suites>-<hash of sources.list>/`, shared by
    /// pins with the same sources.
    pub(super) fn for_pin(cache_root: &Path, pin: &Pin) -> Apt {
        use sha2::{Digest, Sha256};
        let text = sources_list(&pin.sources);
        let suites: Vec<&str> = pin.sources.iter().map(|s| s.suite.as_str()).collect();
        let hash = hex::encode(Sha256::digest(text.as_bytes()));
        // Each architecture keeps its own lists: `apt-get update` for one drops the other's.
        let arch = match pin.arch {
            Arch::X86_64 => String::new(),
            a => format!("-{}", a.debian()),
        };
        Apt {
            dir: cache_root
                .join("apt")
                .join(format!("{}-{}{arch}", suites.join("+"), &hash[..8])),
            sources_list: text,
            arch: pin.arch,
            as_root: unsafe { libc::geteuid() } == 0,
        }
    }

    fn sources_path(&self) -> PathBuf {
        self.dir.join("sources.list")
    }

    /// The configuration file `APT_CONFIG` names. apt reads it before anything else, so the
    /// host's configuration directories it points away from are never read (`-o` options come
    /// too late for that: apt reads `Dir::Etc::Parts` before it parses its command line).
    fn config_path(&self) -> PathBuf {
        self.dir.join("apt.conf")
    }

    /// The private configuration: the host's apt.conf, apt.conf.d, preferences and trusted
    /// keys replaced by empty private directories and /dev/null (sources are checked against
    /// [`KEYRING`] through `signed-by`).
    pub(super) fn config_text(&self) -> String {
        let d = &self.dir;
        let mut text = String::new();
        for (key, value) in [
            ("Dir::Etc::Main", PathBuf::from("/dev/null")),
            ("Dir::Etc::Parts", d.join("apt.conf.d")),
            ("Dir::Etc::Preferences", PathBuf::from("/dev/null")),
            ("Dir::Etc::PreferencesParts", d.join("preferences.d")),
            ("Dir::Etc::Trusted", PathBuf::from("/dev/null")),
            ("Dir::Etc::TrustedParts", d.join("trusted.gpg.d")),
        ] {
            text.push_str(&format!("{key} \"{}\";\n", value.display()));
        }
        text
    }

    /// `tool` with [`Apt::command_line`], [`Apt::config_path`] as `APT_CONFIG`, and a fixed
    /// locale so its messages can be parsed.
    pub(super) fn command(&self, tool: &str, args: &[&str]) -> Command {
        let argv = self.command_line(tool, args);
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env("APT_CONFIG", self.config_path())
            .env("LC_ALL", "C")
            .env("DEBIAN_FRONTEND", "noninteractive");
        cmd
    }

    /// The `-o` options that make apt-get / apt-cache use only this private state.
    pub(super) fn options(&self) -> Vec<String> {
        let d = &self.dir;
        let mut o = vec![
            format!("Dir::Etc::SourceList={}", self.sources_path().display()),
            "Dir::Etc::SourceParts=/dev/null".to_string(),
            format!("Dir::State::Lists={}", d.join("lists").display()),
            format!("Dir::Cache={}", d.join("cache").display()),
            // No dpkg database: nothing is installed, and a non-root user cannot lock the host's.
            "Dir::State::status=/dev/null".to_string(),
            format!("APT::Architecture={}", self.arch.debian()),
            format!("APT::Architectures={}", self.arch.debian()),
            // Only the Packages indexes: no translations, no AppStream metadata.
            "Acquire::Languages=none".to_string(),
            "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false".to_string(),
            // A mirror snapshot's Release file may be past its Valid-Until (sid's was, by 24
            // days, on the development machines' registry). Its signature is still checked,
            // and every .deb is checked against the pin's sha256, so an old index can
            // never hand us other bytes: the date check protects nothing here.
            "Acquire::Check-Valid-Until=false".to_string(),
            "Acquire::Check-Date=false".to_string(),
        ];
        if self.as_root {
            o.push("APT::Sandbox::User=root".to_string());
        }
        o.into_iter().flat_map(|x| ["-o".to_string(), x]).collect()
    }

    /// The full argument list for `apt-get`/`apt-cache` with `args` after the options.
    pub(super) fn command_line(&self, tool: &str, args: &[&str]) -> Vec<String> {
        let mut v = vec![tool.to_string()];
        v.extend(self.options());
        v.extend(args.iter().map(|s| s.to_string()));
        v
    }

    /// Writes sources.list and creates the directories apt expects.
    fn prepare(&self) -> Result<()> {
        for sub in [
            "lists/partial",
            "cache/archives/partial",
            "apt.conf.d",
            "preferences.d",
            "trusted.gpg.d",
        ] {
            std::fs::create_dir_all(self.dir.join(sub))
                .with_context(|| format!("creating {}", self.dir.join(sub).display()))?;
        }
        for (path, text) in [
            (self.sources_path(), self.sources_list.clone()),
            (self.config_path(), self.config_text()),
        ] {
            if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                std::fs::write(&path, text)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
        Ok(())
    }

    /// `apt-get update` on the private state; any failed index is an error.
    pub(super) fn update(&self, events: &Events) -> Result<()> {
        self.prepare()?;
        if !Path::new(KEYRING).exists() {
            bail!("{KEYRING} is missing: install the Debian package `debian-archive-keyring`");
        }
        events.step(format!(
            "updating the package lists of {}",
            self.dir.file_name().unwrap_or_default().to_string_lossy()
        ));
        run(self, "apt-get", &["--error-on=any", "update"], None, events)
            .context("apt-get update of the private kernel sources failed")?;
        Ok(())
    }

    /// Downloads `name=version` into `dir` (apt names the file itself).
    pub(super) fn download(&self, pkg: &Package, dir: &Path, events: &Events) -> Result<Output> {
        self.prepare()?;
        run_raw(
            self,
            "apt-get",
            &["download", &pkg.spec()],
            Some(dir),
            events,
        )
    }

    /// `SHA256:` of `name=version` from the signed Packages index.
    pub(super) fn sha256(&self, name: &str, version: &str, events: &Events) -> Result<String> {
        let out = run(
            self,
            "apt-cache",
            &["show", &format!("{name}={version}")],
            None,
            events,
        )?;
        parse_show_sha256(&out, name, version)
            .with_context(|| format!("apt-cache show {name}={version} has no SHA256 field"))
    }

    /// Every package name the lists know.
    pub(super) fn pkgnames(&self, events: &Events) -> Result<Vec<String>> {
        let out = run(self, "apt-cache", &["pkgnames"], None, events)?;
        Ok(out
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect())
    }

    /// `(name, version)` of every real package version among `names`.
    pub(super) fn madison(
        &self,
        names: &[String],
        events: &Events,
    ) -> Result<Vec<(String, String)>> {
        if names.is_empty() {
            return Ok(vec![]);
        }
        let mut args = vec!["madison"];
        args.extend(names.iter().map(String::as_str));
        let out = run(self, "apt-cache", &args, None, events)?;
        Ok(parse_madison(&out))
    }
}

/// What a command printed.
pub(super) struct Output {
    pub ok: bool,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs an apt tool, returns its output whatever the exit status.
pub(super) fn run_raw(
    apt: &Apt,
    tool: &str,
    args: &[&str],
    cwd: Option<&Path>,
    events: &Events,
) -> Result<Output> {
    apt.prepare()?;
    let argv = apt.command_line(tool, args);
    events.command(format!(
        "APT_CONFIG={} {}",
        shell_words(&[apt.config_path().display().to_string()]),
        shell_words(&argv)
    ));
    let mut cmd = apt.command(tool, args);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let out = crate::support::wait::output(&cmd).map_err(|e| {
        let missing = e
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound);
        if missing {
            anyhow::anyhow!(
                "`{tool}` not found: install the Debian package `apt` (it provides apt-get and apt-cache)"
            )
        } else {
            e.context(format!("running {tool}"))
        }
    })?;
    Ok(Output {
        ok: out.status.success(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// Runs an apt tool; a non-zero exit is an error carrying its stderr.
fn run(
    apt: &Apt,
    tool: &str,
    args: &[&str],
    cwd: Option<&Path>,
    events: &Events,
) -> Result<String> {
    let out = run_raw(apt, tool, args, cwd, events)?;
    if !out.ok {
        bail!(
            "{tool} {} exited with {}:\n{}",
            args.join(" "),
            out.code.map_or("a signal".to_string(), |c| c.to_string()),
            out.stderr.trim()
        );
    }
    Ok(out.stdout)
}

/// Quotes an argv for display so it can be pasted into a shell.
pub(super) fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:+,@%".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Does apt's error output say the package/version is not (any longer) on the mirror?
pub(super) fn says_not_on_mirror(stderr: &str) -> bool {
    stderr.lines().any(|l| {
        (l.contains("Version '") && l.contains("was not found"))
            || l.contains("Unable to locate package")
            || l.contains("Can't select version")
            || (l.contains("Failed to fetch")
                && (l.contains(" 404 ") || l.contains("404  Not Found")))
            || l.contains("has no installation candidate")
    })
}

/// The SHA256 of the stanza for `name`/`version` in `apt-cache show` output.
pub(super) fn parse_show_sha256(show: &str, name: &str, version: &str) -> Option<String> {
    show.split("\n\n").find_map(|stanza| {
        let field = |f: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(f).map(|v| v.trim().to_string()))
        };
        (field("Package:")? == name && field("Version:")? == version)
            .then(|| field("SHA256:"))
            .flatten()
            .map(|s| s.to_ascii_lowercase())
    })
}

/// `apt-cache madison` lines: ` name | version | uri suite/component arch Packages`.
pub(super) fn parse_madison(out: &str) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = out
        .lines()
        .filter_map(|l| {
            let mut f = l.split('|').map(str::trim);
            let (name, version, from) = (f.next()?, f.next()?, f.next()?);
            (from.ends_with("Packages") && !name.is_empty() && !version.is_empty())
                .then(|| (name.to_string(), version.to_string()))
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    fn apt(as_root: bool) -> Apt {
        Apt {
            dir: PathBuf::from("/c/apt/bookworm-x"),
            sources_list: String::new(),
            arch: Arch::X86_64,
            as_root,
        }
    }

    #[test]
    fn sources_list_text() {
        let s = sources_list(&[
            Source {
                uri: "http://deb.debian.org/debian".into(),
                suite: "bookworm".into(),
                components: vec!["main".into()],
            },
            Source {
                uri: "http://deb.debian.org/debian-security".into(),
                suite: "bookworm-security".into(),
                components: vec!["main".into(), "contrib".into()],
            },
        ]);
        assert_eq!(
            s,
            "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main\n\
             deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bookworm-security main contrib\n"
        );
    }

    #[test]
    fn command_line_is_private() {
        let argv = apt(false).command_line("apt-get", &["download", "a=1"]);
        let s = argv.join(" ");
        assert!(s.starts_with("apt-get -o Dir::Etc::SourceList=/c/apt/bookworm-x/sources.list "));
        for want in [
            "-o Dir::Etc::SourceParts=/dev/null",
            "-o Dir::State::Lists=/c/apt/bookworm-x/lists",
            "-o Dir::Cache=/c/apt/bookworm-x/cache",
            "-o Dir::State::status=/dev/null",
        ] {
            assert!(s.contains(want), "{want} missing in {s}");
        }
        assert!(s.ends_with(" download a=1"));
        assert!(!s.contains("Sandbox"));
        assert!(apt(true)
            .options()
            .join(" ")
            .contains("-o APT::Sandbox::User=root"));
        // every option is a separate -o pair
        let o = apt(true).options();
        assert!(o.chunks(2).all(|c| c[0] == "-o" && c[1].contains('=')));
    }

    /// The command carries `APT_CONFIG` naming the private file, which points every host
    /// configuration directory away; `apt-config dump` run that way shows none of the host's
    /// `/etc/apt/apt.conf.d` (Debian's apt ships `01autoremove` there, setting
    /// `APT::NeverAutoRemove`).
    #[test]
    fn apt_reads_only_the_private_configuration() {
        let t = tempfile::tempdir().unwrap();
        let a = Apt {
            dir: t.path().join("apt"),
            ..apt(false)
        };
        let cmd = a.command("apt-config", &["dump"]);
        let env: Vec<_> = cmd.get_envs().collect();
        let conf = t.path().join("apt/apt.conf");
        assert!(
            env.contains(&(OsStr::new("APT_CONFIG"), Some(conf.as_os_str()))),
            "{env:?}"
        );
        let text = a.config_text();
        for want in [
            "Dir::Etc::Main \"/dev/null\";".to_string(),
            format!("Dir::Etc::Parts \"{}/apt/apt.conf.d\";", t.path().display()),
            "Dir::Etc::Preferences \"/dev/null\";".to_string(),
            format!(
                "Dir::Etc::PreferencesParts \"{}/apt/preferences.d\";",
                t.path().display()
            ),
            format!(
                "Dir::Etc::TrustedParts \"{}/apt/trusted.gpg.d\";",
                t.path().display()
            ),
        ] {
            assert!(text.contains(&want), "{want} missing in {text}");
        }
        let host = Command::new("apt-config").arg("dump").output().unwrap();
        assert!(
            String::from_utf8_lossy(&host.stdout).contains("APT::NeverAutoRemove"),
            "precondition: the host's apt.conf.d sets APT::NeverAutoRemove"
        );
        let private = run_raw(&a, "apt-config", &["dump"], None, &Events::silent()).unwrap();
        assert!(private.ok, "{}", private.stderr);
        assert!(
            !private.stdout.contains("APT::NeverAutoRemove"),
            "{}",
            private.stdout
        );
        let parts = format!("Dir::Etc::parts \"{}/apt/apt.conf.d\";", t.path().display());
        assert!(private.stdout.contains(&parts), "{}", private.stdout);
    }

    #[test]
    fn detects_left_mirror() {
        assert!(says_not_on_mirror(
            "E: Version '6.1.192-1' for 'linux-image-6.1.0-57-cloud-amd64-unsigned' was not found"
        ));
        assert!(says_not_on_mirror("E: Unable to locate package nosuchpkg"));
        assert!(says_not_on_mirror(
            "E: Failed to fetch http://deb.debian.org/debian-security/pool/updates/main/l/linux/x.deb  404  Not Found [IP: 1.2.3.4 80]"
        ));
        assert!(!says_not_on_mirror("E: Could not resolve 'deb.debian.org'"));
    }

    #[test]
    fn parses_show_and_madison() {
        let show =
            "Package: a\nVersion: 1\nSHA256: AA\n\nPackage: a\nVersion: 2\nSize: 3\nSHA256: bb\n";
        assert_eq!(parse_show_sha256(show, "a", "2").unwrap(), "bb");
        assert_eq!(parse_show_sha256(show, "a", "1").unwrap(), "aa");
        assert_eq!(parse_show_sha256(show, "a", "3"), None);
        let m = "linux-binary-7.2.13+deb14-cloud-amd64 |   7.2.13-1 | http://deb.debian.org/debian sid/main amd64 Packages\n\
                 linux-image-x |  1.0-1 | http://deb.debian.org/debian bookworm/main Sources\n";
        assert_eq!(
            parse_madison(m),
            vec![(
                "linux-binary-7.2.13+deb14-cloud-amd64".to_string(),
                "7.2.13-1".to_string()
            )]
        );
    }

    #[test]
    fn quotes_for_display() {
        let v = vec![
            "apt-get".to_string(),
            "-o".into(),
            "a b".into(),
            "x'y".into(),
        ];
        assert_eq!(shell_words(&v), r"apt-get -o 'a b' 'x'\''y'");
    }
}
