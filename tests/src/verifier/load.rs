//! One `BPF_PROG_LOAD` per program with a log buffer of its own, at `BPF_LOG_STATS`.
//!
//! Why not aya's own load: aya 0.14 loads a program with an empty log buffer first and asks
//! for a log only when that load fails (`retry_with_verifier_logs`, aya/src/sys/bpf.rs), so a
//! program that verifies comes back without the statistics lines. And aya keeps the relocated
//! instructions, the object's BTF fd and the func/line info private to `ProgramData`.
//!
//! So this module does what `EbpfLoader::load` and `load_program` (aya/src/bpf.rs,
//! aya/src/programs/mod.rs) do, with aya's own pieces wherever they are public: aya creates
//! the maps (`EbpfLoader::load`, with the kernel BTF `object::load` passes), and aya-obj's
//! `relocate_btf`, `relocate_maps`, `relocate_calls` and `sanitize_functions` prepare the
//! instructions with those maps' fds, as aya does. Hand-written here: the object BTF's
//! `BPF_BTF_LOAD` (aya's `load_btf` is private) and the `BPF_PROG_LOAD` attr (aya's
//! `bpf_load_program` is private), field for field as aya fills them. The guest test
//! `tests::verifier` checks that this load and aya's verify the same instructions.
use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

use anyhow::{anyhow, bail, Context, Result};
use aya::maps::{Map, MapData};
use aya_obj::btf::{Btf, BtfKind};
use aya_obj::generated::{bpf_attach_type, bpf_cmd, bpf_prog_type, BPF_F_SLEEPABLE};
use aya_obj::{Function, Object, ProgramSection};

use crate::sys::{bpf, zeroed_attr};
use bpfvm_common::bench;

/// `BPF_LOG_STATS` (include/linux/bpf_verifier.h): only the statistics lines and the error
/// messages, not every instruction (what veristat asks for by default).
const BPF_LOG_STATS: u32 = 4;
/// The log buffer: the statistics lines and an error message fit many times over.
const LOG_SIZE: usize = 64 * 1024;

/// An object whose maps exist and whose programs are relocated against them, ready to load.
pub struct Prepared {
    obj: Object,
    /// Keeps aya's maps (and their fds, which the instructions now hold) alive.
    _ebpf: aya::Ebpf,
    btf_fd: Option<OwnedFd>,
    /// Section index -> ELF section name (`fentry/<function>` names an attach target).
    sections: HashMap<usize, String>,
}

/// What one load gave back.
pub struct Loaded {
    /// The program, or the errno of a refused load.
    pub fd: Result<OwnedFd, io::Error>,
    pub log: String,
    /// The helpers the instructions loaded call (ids, each once), and how many calls of
    /// `bpf_loop` they make.
    pub helpers: Vec<i32>,
    pub bpf_loop_calls: u64,
}

/// Creates `bytes`' maps (through aya) and relocates its programs against them.
pub fn prepare(bytes: &[u8]) -> Result<Prepared> {
    let ebpf = crate::object::load(bytes)?;
    let mut obj = Object::parse(bytes).map_err(|e| anyhow!("parse BPF object: {e}"))?;
    let features = aya::features();
    let btf_fd = match features.btf() {
        Some(btf_features) => match obj
            .fixup_and_sanitize_btf(btf_features)
            .map_err(|e| anyhow!("object BTF: {e}"))?
        {
            Some(btf) => {
                Some(load_btf(&btf.to_bytes()).context("BPF_BTF_LOAD of the object's BTF")?)
            }
            None => None,
        },
        None => None,
    };
    if let Some(kernel) = crate::object::kernel_btf() {
        obj.relocate_btf(kernel)
            .map_err(|e| anyhow!("CO-RE relocation: {e}"))?;
    }
    let fds = map_fds(&ebpf);
    let maps: Vec<(String, aya_obj::Map)> = obj.maps.drain().collect();
    let mut with_fds = Vec::new();
    for (name, map) in &maps {
        // aya leaves out the global-data maps a kernel without them cannot create.
        if let Some(&fd) = fds.get(name.as_str()) {
            with_fds.push((name.as_str(), fd, map));
        }
    }
    let text: HashSet<usize> = obj.functions.keys().map(|(section, _)| *section).collect();
    obj.relocate_maps(with_fds.into_iter(), &text)
        .map_err(|e| anyhow!("map relocation: {e}"))?;
    obj.relocate_calls(&text)
        .map_err(|e| anyhow!("call relocation: {e}"))?;
    obj.sanitize_functions(features);
    Ok(Prepared {
        obj,
        _ebpf: ebpf,
        btf_fd,
        sections: section_names(bytes)?,
    })
}

impl Prepared {
    /// The object's programs, sorted.
    pub fn programs(&self) -> Vec<String> {
        let mut names: Vec<String> = self.obj.programs.keys().cloned().collect();
        names.sort();
        names
    }

    /// Loads program `name` once, with a log buffer at `BPF_LOG_STATS`. `Err` when it cannot
    /// even be asked for (a program type not handled here, an attach target the kernel's BTF
    /// lacks): the program was not loaded.
    pub fn load(&self, name: &str) -> Result<Loaded> {
        let prog = &self.obj.programs[name];
        let function: &Function = &self.obj.functions[&prog.function_key()];
        let kind = self.kind(&prog.section, prog.section_index)?;
        let name = CString::new(name.as_bytes()).context("program name")?;
        let kernel_version = prog.kernel_version.unwrap_or_else(|| {
            aya::util::KernelVersion::current().map_or(0, aya::util::KernelVersion::code)
        });
        let func_info = function.func_info.func_info_bytes();
        let line_info = function.line_info.line_info_bytes();
        let mut log = vec![0u8; LOG_SIZE];
        let mut attr = zeroed_attr();
        // SAFETY: plain integers and pointers into buffers that outlive the syscall.
        unsafe {
            let u = &mut attr.__bindgen_anon_3;
            if aya::features().bpf_name() {
                let bytes = name.as_bytes();
                let len = bytes.len().min(u.prog_name.len() - 1);
                for (d, s) in u.prog_name.iter_mut().zip(&bytes[..len]) {
                    *d = *s as _;
                }
            }
            u.prog_flags = kind.flags;
            u.prog_type = kind.prog_type as u32;
            if let Some(a) = kind.expected_attach_type {
                u.expected_attach_type = a as u32;
            }
            u.insns = function.instructions.as_ptr() as u64;
            u.insn_cnt = function.instructions.len() as u32;
            u.license = prog.license.as_ptr() as u64;
            u.kern_version = kernel_version;
            if let Some(btf) = &self.btf_fd {
                u.prog_btf_fd = btf.as_raw_fd() as u32;
                if function.line_info_rec_size > 0 {
                    u.line_info = line_info.as_ptr() as u64;
                    u.line_info_cnt = function.line_info.len() as u32;
                    u.line_info_rec_size = function.line_info_rec_size as u32;
                }
                if function.func_info_rec_size > 0 {
                    u.func_info = func_info.as_ptr() as u64;
                    u.func_info_cnt = function.func_info.len() as u32;
                    u.func_info_rec_size = function.func_info_rec_size as u32;
                }
            }
            if let Some(id) = kind.attach_btf_id {
                u.attach_btf_id = id;
            }
            u.log_level = BPF_LOG_STATS;
            u.log_buf = log.as_mut_ptr() as u64;
            u.log_size = log.len() as u32;
        }
        // SAFETY: the kernel reads `insn_cnt` instructions, the license string, the func and
        // line info records (counts and sizes as set), and writes at most `log_size` bytes of
        // log; every buffer lives past the call.
        let fd = unsafe { bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr) }
            // SAFETY: a new fd that we now own.
            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let bpf_loop = aya_obj::generated::bpf_func_id::BPF_FUNC_loop as i32;
        let calls: Vec<i32> = function
            .instructions
            .iter()
            .filter(|i| i.code == 0x85 && i.src_reg() == 0)
            .map(|i| i.imm)
            .collect();
        let mut helpers = calls.clone();
        helpers.sort_unstable();
        helpers.dedup();
        Ok(Loaded {
            fd,
            log: String::from_utf8_lossy(&log[..end]).into_owned(),
            helpers,
            bpf_loop_calls: calls.iter().filter(|&&c| c == bpf_loop).count() as u64,
        })
    }

    /// The program type and attach attributes of `section`, as aya's `load` of that program
    /// type sets them (aya/src/programs/*.rs).
    fn kind(&self, section: &ProgramSection, index: usize) -> Result<Kind> {
        use bpf_prog_type::*;
        let plain = |prog_type| Kind {
            prog_type,
            expected_attach_type: None,
            attach_btf_id: None,
            flags: 0,
        };
        Ok(match section {
            ProgramSection::SocketFilter => plain(BPF_PROG_TYPE_SOCKET_FILTER),
            ProgramSection::SchedClassifier => plain(BPF_PROG_TYPE_SCHED_CLS),
            ProgramSection::KProbe | ProgramSection::KRetProbe => plain(BPF_PROG_TYPE_KPROBE),
            ProgramSection::TracePoint => plain(BPF_PROG_TYPE_TRACEPOINT),
            ProgramSection::RawTracePoint => plain(BPF_PROG_TYPE_RAW_TRACEPOINT),
            ProgramSection::FEntry { sleepable } | ProgramSection::FExit { sleepable } => {
                let attach = if matches!(section, ProgramSection::FEntry { .. }) {
                    bpf_attach_type::BPF_TRACE_FENTRY
                } else {
                    bpf_attach_type::BPF_TRACE_FEXIT
                };
                Kind {
                    prog_type: BPF_PROG_TYPE_TRACING,
                    expected_attach_type: Some(attach),
                    attach_btf_id: Some(self.attach_btf_id(index)?),
                    flags: if *sleepable { BPF_F_SLEEPABLE } else { 0 },
                }
            }
            other => bail!(
                "bpfvm's verifier statistics do not load {other:?} programs (socket filters, \
                 tc classifiers, kprobes, tracepoints, raw tracepoints, fentry and fexit)"
            ),
        })
    }

    /// The kernel BTF id of the function a `fentry/<function>` section names (what aya's
    /// `FEntry::load` looks up with the name the caller passes).
    fn attach_btf_id(&self, index: usize) -> Result<u32> {
        let section = self.sections.get(&index).map(String::as_str).unwrap_or("");
        let Some((_, function)) = section.split_once('/') else {
            bail!("section `{section}` names no attach target (`fentry/<function>`)");
        };
        // x86_64's syscall wrapper in the section is this architecture's in the kernel.
        let own;
        let function = match function.strip_prefix(bench::X86_SYSCALL_PREFIX) {
            Some(name) => {
                own = format!("{}{name}", bench::SYSCALL_PREFIX);
                own.as_str()
            }
            None => function,
        };
        let kernel: &Btf = crate::object::kernel_btf()
            .context("feature absent: the kernel has no BTF (/sys/kernel/btf/vmlinux)")?;
        kernel
            .id_by_type_name_kind(function, BtfKind::Func)
            .map_err(|e| anyhow!("feature absent: attach target `{function}`: {e}"))
    }
}

struct Kind {
    prog_type: bpf_prog_type,
    expected_attach_type: Option<bpf_attach_type>,
    attach_btf_id: Option<u32>,
    flags: u32,
}

/// `BPF_BTF_LOAD` of an object's BTF, as aya's private `load_btf` does it.
fn load_btf(raw: &[u8]) -> io::Result<OwnedFd> {
    let mut attr = zeroed_attr();
    // SAFETY: a pointer and a length into `raw`, which outlives the call.
    unsafe {
        let u = &mut attr.__bindgen_anon_7;
        u.btf = raw.as_ptr() as u64;
        u.btf_size = raw.len() as u32;
    }
    // SAFETY: the kernel reads `btf_size` bytes of `raw`; no log buffer is passed.
    let fd = unsafe { bpf(bpf_cmd::BPF_BTF_LOAD, &mut attr) }?;
    // SAFETY: a new fd that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// The fd of each map aya created, by name.
fn map_fds(ebpf: &aya::Ebpf) -> HashMap<&str, RawFd> {
    ebpf.maps()
        .map(|(name, map)| (name, map_data(map).fd().as_fd().as_raw_fd()))
        .collect()
}

/// The `MapData` inside any `Map` (aya 0.14 has no accessor for the enum).
fn map_data(map: &Map) -> &MapData {
    macro_rules! each {
        ($($v:ident),+ $(,)?) => {
            match map { $(Map::$v(m) => m,)+ }
        };
    }
    each!(
        Array,
        ArrayOfMaps,
        BloomFilter,
        CgroupArray,
        CgroupStorage,
        CgrpStorage,
        CpuMap,
        DevMap,
        DevMapHash,
        HashMap,
        HashOfMaps,
        InodeStorage,
        LpmTrie,
        LruHashMap,
        PerCpuArray,
        PerCpuCgroupStorage,
        PerCpuHashMap,
        PerCpuLruHashMap,
        PerfEventArray,
        ProgramArray,
        Queue,
        ReusePortSockArray,
        RingBuf,
        SockHash,
        SockMap,
        SkStorage,
        Stack,
        StackTraceMap,
        Unsupported,
        XskMap,
    )
}

/// Section index -> name, from the ELF (aya-obj keeps only the parsed section kind).
fn section_names(bytes: &[u8]) -> Result<HashMap<usize, String>> {
    use object::{Object as _, ObjectSection as _};
    let file = object::File::parse(bytes).context("parse the object's ELF")?;
    Ok(file
        .sections()
        .filter_map(|s| Some((s.index().0, s.name().ok()?.to_string())))
        .collect())
}
