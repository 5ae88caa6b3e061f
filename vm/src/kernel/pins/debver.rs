//! Debian version ordering (`dpkg --compare-versions`), so `bump` can pick the newest package
//! without shelling out. Follows deb-version(7): `[epoch:]upstream[-revision]`, compared part by
//! part; within a part, non-digit runs compare with `~` before everything (even the end) and
//! letters before other characters, digit runs compare numerically.
use std::cmp::Ordering;

/// Compares two Debian version strings the way dpkg does.
pub(super) fn compare(a: &str, b: &str) -> Ordering {
    let (ea, ua, ra) = split(a);
    let (eb, ub, rb) = split(b);
    ea.cmp(&eb)
        .then_with(|| compare_part(ua, ub))
        .then_with(|| compare_part(ra, rb))
}

fn split(v: &str) -> (u64, &str, &str) {
    let (epoch, rest) = match v.split_once(':') {
        Some((e, rest)) if !e.is_empty() && e.bytes().all(|c| c.is_ascii_digit()) => {
            (e.parse().unwrap_or(0), rest)
        }
        _ => (0, v),
    };
    match rest.rsplit_once('-') {
        Some((upstream, revision)) => (epoch, upstream, revision),
        None => (epoch, rest, ""),
    }
}

/// Weight of one character in a non-digit run: `~` sorts first, then the end of the run, then
/// letters, then everything else.
fn order(c: Option<u8>) -> i32 {
    match c {
        Some(b'~') => -1,
        None => 0,
        Some(c) if c.is_ascii_digit() => 0,
        Some(c) if c.is_ascii_alphabetic() => c as i32,
        Some(c) => c as i32 + 256,
    }
}

fn compare_part(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        // Non-digit prefix.
        while (i < a.len() && !a[i].is_ascii_digit()) || (j < b.len() && !b[j].is_ascii_digit()) {
            let ca = a.get(i).copied().filter(|c| !c.is_ascii_digit());
            let cb = b.get(j).copied().filter(|c| !c.is_ascii_digit());
            let (oa, ob) = (order(ca), order(cb));
            if oa != ob {
                return oa.cmp(&ob);
            }
            if ca.is_some() {
                i += 1;
            }
            if cb.is_some() {
                j += 1;
            }
        }
        // Digit run, numerically (leading zeros ignored).
        while i < a.len() && a[i] == b'0' {
            i += 1;
        }
        while j < b.len() && b[j] == b'0' {
            j += 1;
        }
        let si = i;
        let sj = j;
        while i < a.len() && a[i].is_ascii_digit() {
            i += 1;
        }
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        let (da, db) = (&a[si..i], &b[sj..j]);
        let ord = da.len().cmp(&db.len()).then_with(|| da.cmp(db));
        if ord != Ordering::Equal {
            return ord;
        }
    }
    Ordering::Equal
}

#[cfg(test)]
mod tests {
    use super::compare;
    use std::cmp::Ordering::*;

    #[test]
    fn orders_like_dpkg() {
        let cases = [
            ("6.1.192-3", "6.1.170-1", Greater),
            ("6.1.192-3", "6.1.192-3", Equal),
            ("6.1.192-3", "6.1.192-10", Less),
            ("1.0~rc1-1", "1.0-1", Less),
            ("1.0-1", "1.0+deb12u1-1", Less),
            ("1:0.9", "2.0", Greater),
            ("1.0", "1.0-0", Equal),
            ("1.0a", "1.0", Greater),
            ("1.0a", "1.0+", Less),
            ("1.0~", "1.0", Less),
            ("1.0~~", "1.0~", Less),
            ("6.12.115-1+deb13u1", "6.12.115-1", Greater),
            ("010", "10", Equal),
            ("7.2.13-1", "7.2.9-1", Greater),
        ];
        for (a, b, want) in cases {
            assert_eq!(compare(a, b), want, "{a} vs {b}");
            assert_eq!(compare(b, a), want.reverse(), "{b} vs {a}");
        }
    }
}
