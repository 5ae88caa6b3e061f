//! POSIX shell quoting, for guest scripts and for commands shown to the user.

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
}
