//! Raw `bpf(2)` for what aya 0.14 cannot express (bad attributes, batch commands, probes).
//!
//! Two layers: [`bpf`] and [`elem_cmd`] are `unsafe` (the kernel writes to whatever addresses
//! the attr holds); everything else here is safe, sizing its buffers from the map or the
//! program it passes. [`Elems`] is the one way tests issue element commands.
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

pub use aya_obj::generated::{bpf_attr, bpf_cmd, bpf_map_info, bpf_map_type, bpf_prog_type};

/// `ENOTSUPP` (524): the kernel-internal errno that batch commands return for unsupported maps.
pub const ENOTSUPP: i32 = 524;

/// Calls `bpf(cmd, attr, sizeof(attr))` and returns its result or the errno.
///
/// # Safety
///
/// Every pointer in `attr` that `cmd` uses must be 0 where the command allows NULL, or point
/// at memory that stays valid during the call for as many bytes as the kernel reads or writes
/// there, and that nothing else accesses meanwhile: the kernel derives those sizes from the
/// map or program (`key_size`, `value_size`, the number of possible CPUs, a batch `count`),
/// not from Rust, and writes through the pointers it is given.
pub unsafe fn bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<i64> {
    // SAFETY: `attr` is a valid bpf_attr of the size passed; the caller vouches for the
    // pointers inside it.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut bpf_attr,
            std::mem::size_of::<bpf_attr>(),
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A zeroed attr, the only valid starting point (the kernel rejects non-zero unused tails).
pub fn zeroed_attr() -> bpf_attr {
    // SAFETY: bpf_attr is a plain C union of integers; all-zero is valid.
    unsafe { std::mem::zeroed() }
}

/// A raw `BPF_MAP_{LOOKUP,UPDATE,DELETE,LOOKUP_AND_DELETE}_ELEM` or `BPF_MAP_GET_NEXT_KEY`:
/// `key` and `value` are addresses (0 for NULL); `value` is also `next_key`, the same union
/// member. Tests that need an attr the typed [`Elems`] cannot express (a value pointer on a
/// delete) call it directly.
///
/// # Safety
///
/// As for [`bpf`]: `key` and `value` are 0 or point at buffers of at least the sizes `cmd`
/// reads or writes on this map ([`Elems`] checks exactly that).
pub unsafe fn elem_cmd(
    cmd: bpf_cmd,
    map: BorrowedFd<'_>,
    key: u64,
    value: u64,
    flags: u64,
) -> io::Result<i64> {
    let mut attr = zeroed_attr();
    // SAFETY: plain integers into the element-command member of a zeroed union.
    unsafe {
        let e = &mut attr.__bindgen_anon_2;
        e.map_fd = map.as_raw_fd() as u32;
        e.key = key;
        e.__bindgen_anon_1.value = value;
        e.flags = flags;
    }
    // SAFETY: the caller vouches for `key` and `value`.
    unsafe { bpf(cmd, &mut attr) }
}

/// The element commands of one map through slices. The sizes the kernel copies come from the
/// map itself (`BPF_OBJ_GET_INFO_BY_FD`, read once), so a short buffer is an `InvalidInput`
/// error here, never a kernel write past its end. Raw because aya's typed maps check keys and
/// flags first, and the tests need the kernel's own answer (a NULL key on a keyed map, a key
/// on a keyless one, bad flags).
#[derive(Debug, Clone, Copy)]
pub struct Elems<'a> {
    fd: BorrowedFd<'a>,
    key_size: usize,
    /// What one value occupies in userspace (`bpf_map_value_size` in kernel/bpf/syscall.c).
    value_len: usize,
}

impl<'a> Elems<'a> {
    pub fn of(fd: BorrowedFd<'a>) -> io::Result<Self> {
        use bpf_map_type::*;
        let info = map_info(fd)?;
        let per_cpu = [
            BPF_MAP_TYPE_PERCPU_HASH,
            BPF_MAP_TYPE_LRU_PERCPU_HASH,
            BPF_MAP_TYPE_PERCPU_ARRAY,
            BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE_DEPRECATED,
        ]
        .iter()
        .any(|&t| t as u32 == info.type_);
        let value_size = info.value_size as usize;
        let value_len = if per_cpu {
            value_size.next_multiple_of(8) * aya::util::nr_cpus().map_err(|(_, e)| e)?
        } else {
            value_size
        };
        Ok(Self {
            fd,
            key_size: info.key_size as usize,
            value_len,
        })
    }

    /// `BPF_MAP_UPDATE_ELEM` (a push on keyless maps).
    pub fn update(&self, key: Option<&[u8]>, value: &[u8], flags: u64) -> io::Result<()> {
        let key = self.key(key)?;
        let value = self.value(value.as_ptr(), value.len())?;
        // SAFETY: both buffers hold what the kernel reads for this map; it writes neither.
        unsafe { elem_cmd(bpf_cmd::BPF_MAP_UPDATE_ELEM, self.fd, key, value, flags) }.map(drop)
    }

    /// `BPF_MAP_LOOKUP_ELEM` (a peek on keyless maps, which reads `value` instead).
    pub fn lookup(&self, key: Option<&[u8]>, value: &mut [u8], flags: u64) -> io::Result<()> {
        let key = self.key(key)?;
        let value = self.value(value.as_mut_ptr(), value.len())?;
        // SAFETY: `value` is exclusively borrowed and as long as the kernel writes.
        unsafe { elem_cmd(bpf_cmd::BPF_MAP_LOOKUP_ELEM, self.fd, key, value, flags) }.map(drop)
    }

    /// `BPF_MAP_LOOKUP_AND_DELETE_ELEM` (a pop on keyless maps).
    pub fn lookup_and_delete(
        &self,
        key: Option<&[u8]>,
        value: &mut [u8],
        flags: u64,
    ) -> io::Result<()> {
        let key = self.key(key)?;
        let value = self.value(value.as_mut_ptr(), value.len())?;
        let cmd = bpf_cmd::BPF_MAP_LOOKUP_AND_DELETE_ELEM;
        // SAFETY: as for `lookup`.
        unsafe { elem_cmd(cmd, self.fd, key, value, flags) }.map(drop)
    }

    /// `BPF_MAP_DELETE_ELEM`.
    pub fn delete(&self, key: Option<&[u8]>) -> io::Result<()> {
        let key = self.key(key)?;
        // SAFETY: the kernel only reads the key.
        unsafe { elem_cmd(bpf_cmd::BPF_MAP_DELETE_ELEM, self.fd, key, 0, 0) }.map(drop)
    }

    /// `BPF_MAP_GET_NEXT_KEY`: the key after `key` (the first for `None`) into `next`.
    pub fn next_key(&self, key: Option<&[u8]>, next: &mut [u8]) -> io::Result<()> {
        let key = self.key(key)?;
        if next.len() < self.key_size {
            return Err(short("next key", next.len(), self.key_size));
        }
        let next = next.as_mut_ptr() as u64;
        // SAFETY: `next` is exclusively borrowed and holds a whole key.
        unsafe { elem_cmd(bpf_cmd::BPF_MAP_GET_NEXT_KEY, self.fd, key, next, 0) }.map(drop)
    }

    fn key(&self, key: Option<&[u8]>) -> io::Result<u64> {
        match key {
            None => Ok(0),
            Some(k) if k.len() < self.key_size => Err(short("key", k.len(), self.key_size)),
            Some(k) => Ok(k.as_ptr() as u64),
        }
    }

    fn value(&self, ptr: *const u8, len: usize) -> io::Result<u64> {
        if len < self.value_len {
            return Err(short("value", len, self.value_len));
        }
        Ok(ptr as u64)
    }
}

fn short(what: &str, len: usize, need: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{what} buffer of {len} bytes, the map copies {need}: pass a longer slice"),
    )
}

/// The attributes of `BPF_MAP_CREATE` this suite varies.
#[derive(Debug, Clone, Copy)]
pub struct MapAttr {
    /// A `bpf_map_type` as u32, so tests can also pass types the kernel does not know.
    pub map_type: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub map_flags: u32,
    pub map_extra: u64,
}

/// Creates a map with exactly the given attributes, bypassing aya's own checks.
pub fn map_create(a: &MapAttr) -> io::Result<OwnedFd> {
    map_create_from(&mut map_create_attr(a))
}

/// The `BPF_MAP_CREATE` attr for `a`, for callers that set more fields (`numa_node`,
/// `inner_map_fd`) before [`map_create_from`].
pub fn map_create_attr(a: &MapAttr) -> bpf_attr {
    let mut attr = zeroed_attr();
    // SAFETY: writing plain integers into the map-create member of the union.
    unsafe {
        let m = &mut attr.__bindgen_anon_1;
        m.map_type = a.map_type;
        m.key_size = a.key_size;
        m.value_size = a.value_size;
        m.max_entries = a.max_entries;
        m.map_flags = a.map_flags;
        m.map_extra = a.map_extra;
    }
    attr
}

/// `BPF_MAP_CREATE` with a complete attr.
pub fn map_create_from(attr: &mut bpf_attr) -> io::Result<OwnedFd> {
    // SAFETY: BPF_MAP_CREATE's attr holds no pointer (integers, fds and an inline name), so
    // the kernel writes to nothing outside it.
    let fd = unsafe { bpf(bpf_cmd::BPF_MAP_CREATE, attr) }?;
    // SAFETY: on success the kernel returned a new fd that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `BPF_OBJ_GET_INFO_BY_FD` on a map (aya 0.14's `MapInfo` does not expose `map_extra`).
pub fn map_info(map: BorrowedFd<'_>) -> io::Result<bpf_map_info> {
    // SAFETY: a plain-old-data kernel struct; all-zero is valid.
    let mut info: bpf_map_info = unsafe { std::mem::zeroed() };
    let mut attr = zeroed_attr();
    // `info` outlives the syscall.
    attr.info.bpf_fd = map.as_raw_fd() as u32;
    attr.info.info_len = std::mem::size_of::<bpf_map_info>() as u32;
    attr.info.info = &mut info as *mut bpf_map_info as u64;
    // SAFETY: the kernel writes at most `info_len` bytes, the size of `info`.
    unsafe { bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr) }?;
    Ok(info)
}

/// The result of loading a raw instruction sequence: the program fd, or the errno and the
/// verifier log.
pub fn prog_load(prog_type: bpf_prog_type, insns: &[u64]) -> Result<OwnedFd, (io::Error, String)> {
    let mut log = vec![0u8; 64 * 1024];
    let license = c"GPL";
    let mut attr = zeroed_attr();
    // SAFETY: writing plain integers and pointers that outlive the syscall into the union.
    unsafe {
        let p = &mut attr.__bindgen_anon_3;
        p.prog_type = prog_type as u32;
        p.insn_cnt = insns.len() as u32;
        p.insns = insns.as_ptr() as u64;
        p.license = license.as_ptr() as u64;
        p.log_level = 1;
        p.log_size = log.len() as u32;
        p.log_buf = log.as_mut_ptr() as u64;
    }
    // SAFETY: the kernel reads `insn_cnt` instructions and the NUL-terminated license, and
    // writes at most `log_size` bytes of log, all buffers alive past the call.
    match unsafe { bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr) } {
        // SAFETY: a new fd that we now own.
        Ok(fd) => Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) }),
        Err(e) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            Err((e, String::from_utf8_lossy(&log[..end]).into_owned()))
        }
    }
}

/// The running kernel's `major.minor`, e.g. "6.1" for "6.1.0-57-cloud-amd64": the key of the
/// per-kernel expectation tables of the tests.
pub fn kernel_major_minor() -> io::Result<String> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")?;
    let mut parts = release.trim().splitn(3, ['.', '-']);
    match (parts.next(), parts.next()) {
        (Some(major), Some(minor)) => Ok(format!("{major}.{minor}")),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("kernel release {release:?} has no major.minor"),
        )),
    }
}

/// Kernels before 5.11 charge maps to RLIMIT_MEMLOCK; lift it as libbpf and aya users do.
pub fn raise_memlock() {
    let lim = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit with a valid struct; failure only matters on old kernels.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) };
}

/// Pins the calling thread to `cpu` (`sched_setaffinity` on pid 0, this thread only).
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: a zeroed cpu_set_t is an empty set (plain data).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: cpu < CPU_SETSIZE, so the bit is within the set.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: a valid set of the size passed.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Pins the calling thread to the CPU it runs on now.
pub fn pin_to_current_cpu() -> io::Result<usize> {
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    let cpu = usize::try_from(cpu).map_err(|_| io::Error::last_os_error())?;
    pin_to_cpu(cpu)?;
    Ok(cpu)
}

/// Encodes one 64-bit BPF instruction.
pub const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    (code as u64)
        | (((dst & 0xf) as u64) << 8)
        | (((src & 0xf) as u64) << 12)
        | ((off as u16 as u64) << 16)
        | ((imm as u32 as u64) << 32)
}

/// `r0 = imm` (BPF_ALU64 | BPF_MOV | BPF_K).
pub const fn mov64_imm(dst: u8, imm: i32) -> u64 {
    insn(0xb7, dst, 0, 0, imm)
}

/// `call helper` (BPF_JMP | BPF_CALL).
pub const fn call(helper: i32) -> u64 {
    insn(0x85, 0, 0, 0, helper)
}

/// `exit` (BPF_JMP | BPF_EXIT).
pub const EXIT: u64 = insn(0x95, 0, 0, 0, 0);

/// The `imm` of an xlated call of the helper function `name`: its address minus
/// `__bpf_call_base` (what `fixup_bpf_calls` writes and `BPF_OBJ_GET_INFO_BY_FD` dumps raw for
/// root). `None` when kallsyms hides addresses.
pub fn helper_call_imm(name: &str) -> io::Result<Option<i32>> {
    let file = std::fs::File::open("/proc/kallsyms")?;
    let [f, base] = kernel_addresses(io::BufReader::new(file), [name, "__bpf_call_base"])?;
    Ok(f.zip(base)
        .map(|(f, base)| f.wrapping_sub(base) as i64 as i32))
}

/// The addresses of the core-kernel symbols `names` in a `/proc/kallsyms` listing (`None` for
/// one it lacks or shows as 0), read only until every name is found. The kernel formats the
/// file as it is read (`s_show`, kernel/kallsyms.c): all of its ~96,000 lines took 0.25-0.35 s
/// more under TCG than the first 10,634, where 6.1 has `__bpf_call_base` and `bpf_loop`
/// (`head -n` against `cat`, five runs each, in one boot). Module symbols (a fourth field)
/// are not core-kernel ones.
pub fn kernel_addresses<const N: usize>(
    mut listing: impl io::BufRead,
    names: [&str; N],
) -> io::Result<[Option<u64>; N]> {
    let mut found = [None; N];
    let mut line = String::new();
    while found.iter().any(Option::is_none) {
        line.clear();
        if listing.read_line(&mut line)? == 0 {
            break;
        }
        let mut f = line.split_whitespace();
        let (Some(addr), Some(_kind), Some(name), None) = (f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        if let Some(i) = names.iter().position(|&n| n == name) {
            if found[i].is_none() {
                found[i] = u64::from_str_radix(addr, 16).ok().filter(|&a| a != 0);
            }
        }
    }
    Ok(found)
}

/// `BPF_JMP | BPF_CALL` with `src_reg` 0 (a helper, not a BPF-to-BPF call) and `imm`.
pub fn is_helper_call(insn: u64, imm: i32) -> bool {
    helper_call(insn) == Some(imm)
}

/// The `imm` of a helper call (`BPF_JMP | BPF_CALL` with `src_reg` 0; 1 and 2 call BPF and
/// kernel functions), `None` for any other instruction.
pub fn helper_call(insn: u64) -> Option<i32> {
    let b = insn.to_le_bytes();
    (b[0] == 0x85 && b[1] >> 4 == 0).then(|| i32::from_le_bytes([b[4], b[5], b[6], b[7]]))
}

/// `BPF_OBJ_GET_INFO_BY_FD` on a program, without its instruction dumps. A kernel whose
/// `bpf_prog_info` is shorter leaves the newer fields 0 (`bpf_prog_get_info_by_fd`,
/// kernel/bpf/syscall.c copies at most its own size).
pub fn prog_info(fd: BorrowedFd<'_>) -> io::Result<aya_obj::generated::bpf_prog_info> {
    // SAFETY: plain-old-data kernel struct; all-zero is valid.
    let mut info: aya_obj::generated::bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut attr = zeroed_attr();
    attr.info.bpf_fd = fd.as_raw_fd() as u32;
    attr.info.info_len = std::mem::size_of_val(&info) as u32;
    attr.info.info = &mut info as *mut _ as u64;
    // SAFETY: the kernel writes at most `info_len` bytes into `info`; every pointer inside it
    // is 0, so it dumps nothing else.
    unsafe { bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr) }?;
    Ok(info)
}

/// The program's instructions after the verifier's rewrites (`BPF_OBJ_GET_INFO_BY_FD`).
pub fn xlated(fd: i32) -> io::Result<Vec<u64>> {
    let info_of = |insns: &mut [u64]| -> io::Result<aya_obj::generated::bpf_prog_info> {
        // SAFETY: plain-old-data kernel struct; all-zero is valid.
        let mut info: aya_obj::generated::bpf_prog_info = unsafe { std::mem::zeroed() };
        info.xlated_prog_len = (insns.len() * 8) as u32;
        info.xlated_prog_insns = insns.as_mut_ptr() as u64;
        let mut attr = zeroed_attr();
        attr.info.bpf_fd = fd as u32;
        attr.info.info_len = std::mem::size_of_val(&info) as u32;
        attr.info.info = &mut info as *mut _ as u64;
        // SAFETY: the kernel writes at most `info_len` bytes into `info` and at most
        // `xlated_prog_len` bytes into `insns`, the sizes of both.
        unsafe { bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr) }?;
        Ok(info)
    };
    let len = info_of(&mut [])?.xlated_prog_len as usize / 8;
    let mut insns = vec![0u64; len];
    info_of(&mut insns)?;
    Ok(insns)
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn encodes_instructions_like_the_kernel_macros() {
        // BPF_MOV64_IMM(BPF_REG_0, 1) = b7 00 0000 01000000 (little-endian fields)
        assert_eq!(mov64_imm(0, 1), 0x0000_0001_0000_00b7);
        assert_eq!(EXIT, 0x95);
        assert_eq!(call(181), 0x0000_00b5_0000_0085);
    }

    /// The listing as it comes, then an error: a read past the last symbol asked for fails.
    fn listing(lines: &str) -> impl io::BufRead + '_ {
        struct Broken;
        impl io::Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::other("read past the symbols asked for"))
            }
        }
        io::BufReader::with_capacity(1, io::Read::chain(lines.as_bytes(), Broken))
    }

    #[test]
    fn kallsyms_is_read_only_until_every_symbol_is_found() {
        let l = "ffffffff81000000 T _stext\n\
                 ffffffffc0001000 t bpf_loop\t[some_module]\n\
                 0000000000000000 T bpf_loop\n\
                 ffffffff81200010 T __bpf_call_base\n\
                 ffffffff81200040 T bpf_loop\n";
        let found = kernel_addresses(listing(l), ["bpf_loop", "__bpf_call_base"]).unwrap();
        // Not the module's symbol, not a hidden (0) address.
        assert_eq!(
            found,
            [Some(0xffff_ffff_8120_0040), Some(0xffff_ffff_8120_0010)]
        );
        let hidden = "0000000000000000 T bpf_loop\n0000000000000000 T __bpf_call_base\n";
        let all = io::BufReader::new(hidden.as_bytes());
        assert_eq!(
            kernel_addresses(all, ["bpf_loop", "__bpf_call_base"]).unwrap(),
            [None, None]
        );
        assert!(kernel_addresses(listing(hidden), ["bpf_loop"]).is_err());
    }
}
