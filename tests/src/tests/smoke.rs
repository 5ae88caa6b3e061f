//! The guest is what the pin says, and BPF works in it at all.
use aya::maps::HashMap;

/// The runner passes the pin's `uname -r`; outside bpfvm there is nothing to compare with.
#[test]
fn guest_runs_the_pinned_kernel() {
    let Ok(expected) = std::env::var(bpfvm_common::protocol::EXPECT_RELEASE_ENV) else {
        crate::skip!("not booted by bpfvm (BPFVM_EXPECT_RELEASE unset)");
    };
    let uts = nix_uname();
    assert_eq!(uts, expected, "guest kernel release differs from the pin");
}

#[test]
fn tests_run_as_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "Debian kernels set unprivileged_bpf_disabled: tests need root"
    );
}

#[test]
fn bpf_jit_is_enabled() {
    let v = std::fs::read_to_string("/proc/sys/net/core/bpf_jit_enable")
        .expect("read /proc/sys/net/core/bpf_jit_enable");
    assert_ne!(
        v.trim(),
        "0",
        "the BPF JIT is off: benchmarks would measure the interpreter"
    );
}

#[test]
fn hash_map_insert_lookup_remove_through_aya() {
    crate::sys::raise_memlock();
    let mut map: HashMap<_, u32, u64> = HashMap::create(1000, 0).expect("create hash map");
    for k in 0..800u32 {
        map.insert(k, u64::from(k) * 3, 0).expect("insert");
    }
    for k in 0..800u32 {
        assert_eq!(map.get(&k, 0).expect("lookup"), u64::from(k) * 3);
    }
    assert_eq!(map.keys().count(), 800);
    map.remove(&7).expect("remove");
    assert!(map.get(&7, 0).is_err(), "key 7 still present after remove");
}

fn nix_uname() -> String {
    // SAFETY: uname fills a zeroed utsname; release is NUL-terminated.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        assert_eq!(libc::uname(&mut u), 0);
        std::ffi::CStr::from_ptr(u.release.as_ptr())
            .to_string_lossy()
            .into_owned()
    }
}
