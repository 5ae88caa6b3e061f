//! The rule that blames only the change. A test that fails at head runs again at head, N times
//! (`--reruns N`), each in a fresh boot: passing in any of them makes it flaky. Failing in all,
//! it runs at the base N times: the base passing every time (its first run included) makes a
//! regression, failing every time a failure the base already had, a mix flaky. A skip counts as
//! not failing. A test only head has that fails every time at head is a regression too: the
//! base had nothing failing there.
use super::model::Category;
use crate::results::report::Outcome;

/// What deciding a test needs next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Done(Category),
    /// One more run at head (a fresh boot, filtered to the test).
    RerunHead,
    /// One more run at the base.
    RerunBase,
}

/// What the runs so far say about one test on one kernel: its outcome in the base's and head's
/// whole runs (`None`: that side has no such test), then the reruns at head and at base, each
/// side owed `reruns` of them once head's first run failed.
pub fn classify(
    base: Option<Outcome>,
    head: Option<Outcome>,
    head_reruns: &[Outcome],
    base_reruns: &[Outcome],
    reruns: usize,
) -> Next {
    let failed = |o: &Outcome| *o == Outcome::Fail;
    let Some(head) = head else {
        return Next::Done(Category::Removed);
    };
    if !failed(&head) {
        return Next::Done(match base {
            None => Category::New,
            Some(Outcome::Fail) => Category::Fixed,
            Some(_) => Category::Unchanged,
        });
    }
    if !head_reruns.iter().all(failed) {
        return Next::Done(Category::Flaky);
    }
    if head_reruns.len() < reruns {
        return Next::RerunHead;
    }
    let Some(base) = base else {
        return Next::Done(Category::Regression);
    };
    let base_runs: Vec<Outcome> = std::iter::once(base)
        .chain(base_reruns.iter().copied())
        .collect();
    let fails = base_runs.iter().filter(|o| failed(o)).count();
    if fails > 0 && fails < base_runs.len() {
        return Next::Done(Category::Flaky);
    }
    if base_reruns.len() < reruns {
        return Next::RerunBase;
    }
    Next::Done(if fails == 0 {
        Category::Regression
    } else {
        Category::StillFailing
    })
}
