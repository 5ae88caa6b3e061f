//! The BPF objects built from `ebpf/` (one per feature), embedded at build time from
//! `$BPFVM_EBPF_DIR` (set by `cargo xtask`), and helpers to load them with aya.
//!
//! To add a feature: add `ebpf/src/<feature>.rs` as a `[[bin]]` of `ebpf/Cargo.toml`, then one
//! line in `with_objects!`. What an object needs from the kernel is read from the object itself
//! ([`uses`], `features::needed_by`), never listed by hand.
use anyhow::{anyhow, Context, Result};
use aya::programs::{Program, ProgramError, TestRun, TestRunOptions, TestRunResult};
use aya::{Btf, Ebpf, EbpfLoader, Endianness};
use std::sync::OnceLock;

/// Every BPF object `ebpf/` builds, declared once as `file_name: STATIC` (like aya's
/// integration tests, one `include_bytes_aligned!` each). Passes the list to `$callback`, a
/// macro: `declare!` makes the statics, [`all`] and [`NAMES`] from it, and the load and
/// verifier tests (`tests::ebpf`) make one test case per object of `loads`. The build fails
/// when the list and the `[[bin]]`s of `ebpf/Cargo.toml` disagree ([`EBPF_BINS`]).
macro_rules! with_objects {
    ($callback:ident) => {
        $callback! {
            // Every program loads without an attach target.
            loads {
                /// `ebpf/src/smoke.rs`: a socket filter writing into a BTF hash map and a BTF
                /// bloom filter.
                smoke: SMOKE,
                /// `ebpf/src/bloom_filter.rs`: socket filters peeking and pushing through
                /// array-of-maps slots.
                bloom_filter: BLOOM_FILTER,
                /// `ebpf/src/bpf_loop.rs`: socket filters calling `bpf_loop` (5.17), inlined or
                /// not.
                bpf_loop: BPF_LOOP,
                /// `ebpf/src/spin_lock.rs`: a BTF hash map whose value holds a `bpf_spin_lock`.
                spin_lock: SPIN_LOCK,
            }
            // Loaded by hand, program by program.
            by_hand {
                /// `ebpf/src/bench.rs`: the fentry programs of `cargo xtask bench-vm` (fentry
                /// programs need their attach target to load; the `bench --smoke` run exercises
                /// them).
                bench: BENCH,
                /// `ebpf/src/bpf_loop_reject.rs`: programs meant to fail verification
                /// (`tests::bpf_loop`).
                bpf_loop_reject: BPF_LOOP_REJECT,
            }
        }
    };
}
// For the load and verifier tests (`tests::ebpf`), only in the test build.
#[cfg(test)]
pub(crate) use with_objects;

/// The statics, [`all`] and [`NAMES`] of `with_objects!`' list.
macro_rules! declare {
    (
        loads { $($(#[$ldoc:meta])* $load:ident: $LOAD:ident,)* }
        by_hand { $($(#[$hdoc:meta])* $hand:ident: $HAND:ident,)* }
    ) => {
        $(
            $(#[$ldoc])*
            pub static $LOAD: &[u8] = aya::include_bytes_aligned!(concat!(
                env!("BPFVM_EBPF_DIR"),
                "/",
                stringify!($load)
            ));
        )*
        $(
            $(#[$hdoc])*
            pub static $HAND: &[u8] = aya::include_bytes_aligned!(concat!(
                env!("BPFVM_EBPF_DIR"),
                "/",
                stringify!($hand)
            ));
        )*

        /// Every object whose programs load without an attach target.
        pub fn all() -> Vec<Object> {
            vec![$(Object { name: stringify!($load), bytes: $LOAD }),*]
        }

        /// Every object's file name.
        const NAMES: &[&str] = &[$(stringify!($load),)* $(stringify!($hand),)*];
    };
}
with_objects!(declare);

/// The `[[bin]]`s of `ebpf/Cargo.toml`, one object each (build.rs).
const EBPF_BINS: &[&str] = include!(concat!(env!("OUT_DIR"), "/ebpf_bins.rs"));

const _: () = assert!(
    same_names(NAMES, EBPF_BINS),
    "the objects declared in tests/src/object.rs (`with_objects!`) differ from the [[bin]]s of \
     ebpf/Cargo.toml: declare each [[bin]] once in `with_objects!`, and nothing else"
);

/// Whether `a` and `b` hold the same names, in any order (a name declared twice does not
/// compile: its static would be declared twice).
const fn same_names(a: &[&str], b: &[&str]) -> bool {
    a.len() == b.len() && all_in(a, b) && all_in(b, a)
}

const fn all_in(a: &[&str], b: &[&str]) -> bool {
    let mut i = 0;
    while i < a.len() {
        let mut j = 0;
        while j < b.len() && !same(a[i], b[j]) {
            j += 1;
        }
        if j == b.len() {
            return false;
        }
        i += 1;
    }
    true
}

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The embedded object `name` of `with_objects!`' `loads` ([`all`]).
pub fn named(name: &str) -> Object {
    all()
        .into_iter()
        .find(|o| o.name == name)
        .unwrap_or_else(|| panic!("no object `{name}` in object::all()"))
}

/// An embedded object.
pub struct Object {
    pub name: &'static str,
    pub bytes: &'static [u8],
}

/// What an object asks of the kernel: the types of its maps (inner map templates included) and
/// the helpers its functions call, each sorted and once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uses {
    pub map_types: Vec<u32>,
    pub helpers: Vec<i32>,
}

/// Reads [`Uses`] from an object's ELF (aya's own parser; nothing is loaded).
pub fn uses(bytes: &[u8]) -> Result<Uses> {
    let obj = aya_obj::Object::parse(bytes).map_err(|e| anyhow!("parse BPF object: {e}"))?;
    let mut map_types: Vec<u32> = obj
        .maps
        .values()
        .flat_map(|m| [Some(m.map_type()), m.inner().map(|i| i.map_type())])
        .flatten()
        .collect();
    // `BPF_JMP | BPF_CALL` with src_reg 0 calls a helper; 1 and 2 are BPF and kernel functions.
    let mut helpers: Vec<i32> = obj
        .functions
        .values()
        .flat_map(|f| &f.instructions)
        .filter(|i| i.code == 0x85 && i.src_reg() == 0)
        .map(|i| i.imm)
        .collect();
    map_types.sort_unstable();
    map_types.dedup();
    helpers.sort_unstable();
    helpers.dedup();
    Ok(Uses { map_types, helpers })
}

/// Parses `bytes` and creates its maps (programs are not loaded yet). Each call creates its
/// own maps: tests never share kernel state through an object.
pub fn load(bytes: &[u8]) -> Result<Ebpf> {
    crate::sys::raise_memlock();
    EbpfLoader::new()
        .btf(kernel_btf())
        .load(bytes)
        .map_err(|e| anyhow!("{}", error_chain(&e)))
        .context("loading BPF object")
}

/// The running kernel's BTF, parsed once per process and only read afterwards. aya 0.14's
/// `Ebpf::load` parses `/sys/kernel/btf/vmlinux` (megabytes) twice per object, once in
/// `EbpfLoader::new`, which has no way around it. `vm-test` runs the tests with a copy at
/// `$BPFVM_KERNEL_BTF` and the sysfs file reading empty (vm/src/machine/guest.rs), so that the loader's
/// own parse fails at once and this copy is the only one parsed.
pub(crate) fn kernel_btf() -> Option<&'static Btf> {
    static BTF: OnceLock<Option<Btf>> = OnceLock::new();
    BTF.get_or_init(
        || match std::env::var_os(bpfvm_common::protocol::KERNEL_BTF_ENV) {
            Some(path) => Btf::parse_file(path, Endianness::default()).ok(),
            None => Btf::from_sys_fs().ok(),
        },
    )
    .as_ref()
}

/// Formats an error and its sources on one line each.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let cs = c.to_string();
        if !s.contains(&cs) {
            s.push_str(": ");
            s.push_str(&cs);
        }
        src = c.source();
    }
    s
}

/// Turns a program error into one that carries the whole verifier log.
pub fn program_error(name: &str, e: ProgramError) -> anyhow::Error {
    match e {
        ProgramError::LoadError { io_error, verifier_log } => anyhow!(
            "the verifier rejected program `{name}` (BPF_PROG_LOAD: {io_error}); verifier log:\n{verifier_log}"
        ),
        other => anyhow!("program `{name}`: {}", error_chain(&other)),
    }
}

/// Program types whose `load` takes no argument.
pub trait LoadProgram {
    fn load_program(&mut self) -> Result<(), ProgramError>;
}

macro_rules! argless_load {
    ($($t:ident),+ $(,)?) => {$(
        impl LoadProgram for aya::programs::$t {
            fn load_program(&mut self) -> Result<(), ProgramError> {
                self.load()
            }
        }
    )+};
}
argless_load!(
    SocketFilter,
    Xdp,
    SchedClassifier,
    KProbe,
    TracePoint,
    RawTracePoint,
    CgroupSkb,
    CgroupSock,
    CgroupSockAddr,
    CgroupSockopt,
    CgroupSysctl,
    CgroupDevice,
    SockOps,
    SkMsg,
    SkSkb,
    SkLookup,
    PerfEvent,
    FlowDissector,
);

/// Loads program `name` as a `T` and returns it. A verifier rejection's error holds the full
/// verifier log.
pub fn load_program<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T>
where
    T: LoadProgram + 'a,
    &'a mut T: TryFrom<&'a mut Program, Error = ProgramError>,
{
    let prog = ebpf
        .program_mut(name)
        .with_context(|| format!("no program `{name}` in the object"))?;
    let prog: &mut T = prog.try_into().map_err(|e| program_error(name, e))?;
    prog.load_program().map_err(|e| program_error(name, e))?;
    Ok(prog)
}

/// Loads any program whose type needs no attach target (BTF-attached kinds such as fentry
/// must be loaded by hand with their target). Used to check that the verifier accepts every
/// program of an object.
pub fn load_any(name: &str, prog: &mut Program) -> Result<()> {
    let r = match prog {
        Program::SocketFilter(p) => p.load(),
        Program::Xdp(p) => p.load(),
        Program::SchedClassifier(p) => p.load(),
        Program::KProbe(p) => p.load(),
        Program::TracePoint(p) => p.load(),
        Program::RawTracePoint(p) => p.load(),
        Program::CgroupSkb(p) => p.load(),
        Program::CgroupSock(p) => p.load(),
        Program::CgroupSockAddr(p) => p.load(),
        Program::CgroupSockopt(p) => p.load(),
        Program::CgroupSysctl(p) => p.load(),
        Program::CgroupDevice(p) => p.load(),
        Program::SockOps(p) => p.load(),
        Program::SkMsg(p) => p.load(),
        Program::SkSkb(p) => p.load(),
        Program::SkLookup(p) => p.load(),
        Program::PerfEvent(p) => p.load(),
        Program::FlowDissector(p) => p.load(),
        other => {
            return Err(anyhow!(
                "program `{name}` ({:?}) needs an attach target to load: load it by hand",
                other.prog_type()
            ))
        }
    };
    r.map_err(|e| program_error(name, e))
}

/// Runs a packet program (socket filter, tc classifier) once through `BPF_PROG_TEST_RUN` on 64
/// zero bytes: an skb test run needs at least an Ethernet header of data
/// (`bpf_prog_test_run_skb`, net/bpf/test_run.c: `size < ETH_HLEN` is EINVAL).
pub fn test_run_packet<P>(prog: &P) -> Result<TestRunResult>
where
    P: for<'d> TestRun<Opts<'d> = TestRunOptions<'d>, Result = TestRunResult>,
{
    prog.test_run(TestRunOptions {
        data_in: Some(&[0u8; 64]),
        ..Default::default()
    })
    .context("BPF_PROG_TEST_RUN")
}
