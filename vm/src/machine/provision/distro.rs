//! The host's distribution: the package list and the rustc-web route are Debian's, so other
//! distributions get told what differs.
use super::LLVM_PREFIX;

/// The host's distribution, from os-release(5).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Distro {
    /// `ID`: "debian", "ubuntu", ...
    pub id: String,
    /// `VERSION_CODENAME`: "bookworm", "noble", ...
    pub codename: String,
    /// `PRETTY_NAME`, for messages.
    pub pretty: String,
    /// `VERSION_ID`: "12", "24.04"; Debian's testing and unstable have none.
    pub version_id: String,
}

impl Distro {
    pub fn is_debian(&self) -> bool {
        self.id == "debian"
    }

    /// Debian's testing or unstable (sid): a Debian without a release number.
    pub fn is_debian_unreleased(&self) -> bool {
        self.is_debian() && self.version_id.is_empty()
    }
}

/// Parses os-release(5): `KEY=value` lines, values optionally quoted.
pub fn parse_os_release(text: &str) -> Distro {
    let mut d = Distro::default();
    for line in text.lines() {
        let Some((k, v)) = line.trim().split_once('=') else {
            continue;
        };
        let v = v.trim().trim_matches(|c| c == '"' || c == '\'').to_string();
        match k {
            "ID" => d.id = v,
            "VERSION_CODENAME" => d.codename = v,
            "PRETTY_NAME" => d.pretty = v,
            "VERSION_ID" => d.version_id = v,
            _ => {}
        }
    }
    if d.pretty.is_empty() {
        d.pretty = if d.id.is_empty() {
            "unknown Linux".into()
        } else {
            d.id.clone()
        };
    }
    d
}

/// The host's distribution (`/etc/os-release`, else `/usr/lib/os-release`).
pub fn host_distro() -> Distro {
    ["/etc/os-release", "/usr/lib/os-release"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|t| parse_os_release(&t))
        .unwrap_or_default()
}

/// A hint for Debian packages other distributions do not carry (the package list is Debian's).
pub fn package_hint(missing: &[&str], distro: &Distro) -> Option<String> {
    let llvm = LLVM_PREFIX.trim_start_matches("/usr/lib/");
    let dev = format!("{llvm}-dev");
    (!distro.is_debian() && missing.contains(&dev.as_str())).then(|| {
        format!(
            "{dev} is not in {}'s archive: add LLVM's apt repository \
             (suite llvm-toolchain-{}-{}) first, as ci/github-runner-setup.sh does",
            distro.pretty,
            distro.codename,
            llvm.trim_start_matches("llvm-")
        )
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::machine::provision) const UBUNTU: &str =
        "PRETTY_NAME=\"Ubuntu 24.04.3 LTS\"\nNAME=\"Ubuntu\"\nVERSION_ID=\"24.04\"\n\
                          VERSION_CODENAME=noble\nID=ubuntu\nID_LIKE=debian\n";
    pub(in crate::machine::provision) const DEBIAN: &str =
        "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\n\
                          VERSION_ID=\"12\"\nVERSION_CODENAME=bookworm\nID=debian\n";
    /// Debian unstable's (base-files in sid, 2026-12): no VERSION_ID.
    pub(in crate::machine::provision) const SID: &str =
        "PRETTY_NAME=\"Debian GNU/Linux forky/sid\"\nNAME=\"Debian GNU/Linux\"\n\
                          VERSION_CODENAME=forky\nID=debian\n";

    #[test]
    fn os_release_parsing() {
        let u = parse_os_release(UBUNTU);
        assert_eq!(
            u,
            Distro {
                id: "ubuntu".into(),
                codename: "noble".into(),
                pretty: "Ubuntu 24.04.3 LTS".into(),
                version_id: "24.04".into(),
            }
        );
        assert!(!u.is_debian(), "ID_LIKE=debian does not make Ubuntu Debian");
        assert!(parse_os_release(DEBIAN).is_debian());
        assert!(!parse_os_release(DEBIAN).is_debian_unreleased());
        assert!(parse_os_release(SID).is_debian_unreleased());
        assert!(!u.is_debian_unreleased());
        assert_eq!(parse_os_release("ID='arch'\n").pretty, "arch");
        assert_eq!(parse_os_release("").pretty, "unknown Linux");
    }

    #[test]
    fn llvm_hint_names_the_suite_off_debian_only() {
        let (u, d) = (parse_os_release(UBUNTU), parse_os_release(DEBIAN));
        let h = package_hint(&["kmod", "llvm-22-dev"], &u).expect("hint on Ubuntu");
        assert!(h.contains("llvm-toolchain-noble-22"), "{h}");
        assert_eq!(package_hint(&["kmod"], &u), None);
        assert_eq!(package_hint(&["llvm-22-dev"], &d), None);
    }
}
