//! POSIX shell quoting, for guest scripts and for commands shown to the user, and exit
//! statuses as a shell reports them.

/// Quotes one word so `sh` reads it back unchanged.
pub fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_=./:,+@%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Quotes and joins words into one command line.
pub fn join<S: AsRef<str>>(words: &[S]) -> String {
    words
        .iter()
        .map(|w| quote(w.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A command line for display: `ENV=.. prog args..`. An env value ending in `:$PATH` keeps
/// `$PATH` expandable.
pub fn display(envs: &[(&str, String)], prog: &str, args: &[String]) -> String {
    let mut parts: Vec<String> = envs
        .iter()
        .map(|(k, v)| match v.strip_suffix(":$PATH") {
            Some(prefix) => format!("{k}={}:\"$PATH\"", quote(prefix)),
            None => format!("{k}={}", quote(v)),
        })
        .collect();
    parts.push(quote(prog));
    parts.extend(args.iter().map(|a| quote(a)));
    parts.join(" ")
}

/// "exit status 3", "signal 6 (SIGABRT)": a shell exit status in words.
pub fn status_words(rc: i32) -> String {
    let names = [
        (4, "SIGILL"),
        (6, "SIGABRT"),
        (7, "SIGBUS"),
        (8, "SIGFPE"),
        (9, "SIGKILL"),
        (11, "SIGSEGV"),
        (15, "SIGTERM"),
    ];
    match rc - 128 {
        sig @ 1..=64 => match names.iter().find(|(n, _)| *n == sig) {
            Some((_, name)) => format!("signal {sig} ({name})"),
            None => format!("signal {sig}"),
        },
        _ => format!("exit status {rc}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_only_what_the_shell_would_split_or_expand() {
        assert_eq!(
            join(&["--append", "a b", "it's", "$HOME", ""]),
            r"--append 'a b' 'it'\''s' '$HOME' ''"
        );
        assert_eq!(quote("/usr/bin/x"), "/usr/bin/x");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// What the guest script does with a `--filter` or a `vm-run` argument: `sh` gets the
        /// word back byte for byte, so `$(...)`, `;`, backquotes and globs are never run.
        #[test]
        fn sh_reads_any_quoted_word_back_unchanged(word in "[^\\x00]{0,40}") {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf '%s' {}", quote(&word)))
                .output()
                .unwrap();
            proptest::prop_assert!(out.status.success());
            proptest::prop_assert_eq!(String::from_utf8_lossy(&out.stdout), word);
        }
    }

    #[test]
    fn shell_metacharacters_are_never_run() {
        let t = tempfile::tempdir().unwrap();
        let pwned = t.path().join("pwned");
        let p = pwned.display();
        for word in [
            format!("$(touch {p})"),
            format!("`touch {p}`"),
            format!("x; touch {p}"),
            format!("x' ; touch {p}; '"),
            format!("x\ntouch {p}"),
            format!("x && touch {p} #"),
        ] {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf '%s' {}", quote(&word)))
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout), word);
            assert!(!pwned.exists(), "{word} ran");
        }
    }

    #[test]
    fn displayed_commands_keep_path_expandable() {
        assert_eq!(
            display(&[("PATH", "/t/bin:$PATH".into())], "cargo", &["a b".into()]),
            "PATH=/t/bin:\"$PATH\" cargo 'a b'"
        );
    }
}
