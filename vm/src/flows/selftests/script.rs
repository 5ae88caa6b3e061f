//! The guest script of `selftests`: what the selftests expect of their machine, then
//! `test_progs` once per selected test and `test_maps`, each marked in the kernel log.
use std::fmt::Write as _;
use std::path::Path;

use crate::machine::guest;
use crate::results::upstream::{
    END, JSON_DIR, START, TESTMOD, TEST_MAPS, TEST_MAPS_OUT, TEST_MAPS_RC, TEST_PROGS,
    TEST_PROGS_ALL, TEST_PROGS_LIST, TEST_PROGS_OUT,
};
use crate::support::shell::quote;

/// The script: from the build directory `build` (test_progs opens its BPF objects and
/// `bpf_testmod.ko` from its working directory), with `config` as the running kernel's
/// `/boot/config-$(uname -r)`, runs the tests `pattern` selects (`test_progs -t`), and
/// `test_maps` when `maps`; each test's `--json-summary` too when `json` (its test_progs has
/// the option).
///
/// Why one `test_progs` per test: it keeps each test's output until the test ends
/// (`stdio_hijack`, test_progs.c), so its output cannot tell when a test started; a run per
/// test, between two kernel log markers, blames a splat on the test that was running. A run
/// costs its start (the `bpf_testmod.ko` reload) once per test.
pub(crate) fn script(
    out: &Path,
    build: &Path,
    config: &Path,
    pattern: Option<&str>,
    maps: bool,
    json: bool,
) -> String {
    let mut s = guest::preamble(out);
    let b = quote(&build.display().to_string());
    writeln!(s, "cd {b} || exit 1").unwrap();
    // What the selftests expect: tracefs (kprobe and tracepoint tests), the kernel's config
    // where libbpf looks for it for `__kconfig` externs (the guest sees the host's /boot), and
    // no locked-memory limit (kernels before 5.11 charge maps to it).
    s.push_str(
        "bpfvm_mounted /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null\n\
         mount -t tmpfs tmpfs /boot\n",
    );
    writeln!(
        s,
        "cp {} \"/boot/config-$(uname -r)\"",
        quote(&config.display().to_string())
    )
    .unwrap();
    s.push_str("ulimit -l unlimited\n");
    // Loaded before the first marker, so that its taints (O: out of tree, E: unsigned) are the
    // boot's, not a splat of a test; test_progs reloads it itself.
    writeln!(
        s,
        "insmod bpf_testmod.ko > \"$OUT/{TESTMOD}\" 2>&1; echo $? >> \"$OUT/{TESTMOD}\""
    )
    .unwrap();
    writeln!(
        s,
        "./test_progs -l > \"$OUT/{TEST_PROGS_ALL}\" 2> \"$OUT/{TEST_PROGS_ALL}.stderr\""
    )
    .unwrap();
    match pattern {
        Some(p) => writeln!(
            s,
            "./test_progs -l -t {} > \"$OUT/{TEST_PROGS_LIST}\" 2>> \"$OUT/{TEST_PROGS_ALL}.stderr\"",
            quote(p)
        )
        .unwrap(),
        None => writeln!(s, "cp \"$OUT/{TEST_PROGS_ALL}\" \"$OUT/{TEST_PROGS_LIST}\"").unwrap(),
    }
    let summary = match json {
        true => {
            writeln!(s, "mkdir -p \"$OUT/{JSON_DIR}\"").unwrap();
            format!(" -J \"$OUT/{JSON_DIR}/$t.json\"")
        }
        false => String::new(),
    };
    s.push_str("bpfvm_mark phase tests\n");
    // `-a NAME` selects the test of that exact name (a glob without wildcards), all its subtests.
    writeln!(
        s,
        "while IFS= read -r t; do\n  \
           bpfvm_mark test start \"{TEST_PROGS}/$t\"\n  \
           echo \"{START}$t\"\n  \
           ./test_progs -a \"$t\"{summary} 2>&1 < /dev/null\n  \
           echo \"{END}$t $?\"\n  \
           bpfvm_mark test end \"{TEST_PROGS}/$t\"\n\
         done < \"$OUT/{TEST_PROGS_LIST}\" | tee \"$OUT/{TEST_PROGS_OUT}\""
    )
    .unwrap();
    if maps {
        writeln!(
            s,
            "bpfvm_mark test start {TEST_MAPS}\n\
             ./test_maps > \"$OUT/{TEST_MAPS_OUT}\" 2>&1 < /dev/null; echo $? > \"$OUT/{TEST_MAPS_RC}\"\n\
             bpfvm_mark test end {TEST_MAPS}"
        )
        .unwrap();
    }
    s.push_str("bpfvm_mark phase shutdown\n");
    guest::epilogue(&mut s, "0");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_selected_test_runs_alone_between_its_markers() {
        let s = script(
            Path::new("/o"),
            Path::new("/c/build"),
            Path::new("/k/boot/config-6.1"),
            Some("bloom_filter_map,bpf_loop"),
            true,
            false,
        );
        assert!(s.contains("cd /c/build || exit 1\n"));
        assert!(s.contains("cp /k/boot/config-6.1 \"/boot/config-$(uname -r)\"\n"));
        assert!(
            s.contains("./test_progs -l -t bloom_filter_map,bpf_loop > \"$OUT/test_progs.list\"")
        );
        let insmod = s.find("insmod bpf_testmod.ko").unwrap();
        let first_mark = s.find("bpfvm_mark phase tests").unwrap();
        assert!(insmod < first_mark, "the module's taints are the boot's");
        assert!(s.contains("bpfvm_mark test start \"test_progs/$t\"\n  echo \"bpfvm-selftest start $t\"\n  ./test_progs -a \"$t\""));
        assert!(s.contains("./test_maps > \"$OUT/test_maps.out\""));
        assert!(
            !s.contains(" -J "),
            "no --json-summary where test_progs lacks it"
        );
        let without = script(
            Path::new("/o"),
            Path::new("/b"),
            Path::new("/c"),
            None,
            false,
            true,
        );
        assert!(without.contains("cp \"$OUT/test_progs.all\" \"$OUT/test_progs.list\"\n"));
        assert!(!without.contains("test_maps"));
        assert!(without.contains("./test_progs -a \"$t\" -J \"$OUT/test_progs.json/$t.json\" 2>&1"));
    }
}
