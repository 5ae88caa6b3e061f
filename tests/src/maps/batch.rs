//! A small safe wrapper over the `bpf(2)` batch commands (`BPF_MAP_LOOKUP_BATCH`,
//! `BPF_MAP_LOOKUP_AND_DELETE_BATCH`, `BPF_MAP_UPDATE_BATCH`, `BPF_MAP_DELETE_BATCH`, 5.6+),
//! which aya 0.14 does not expose. It works on any map fd (`AsFd`, e.g. `MapData::fd()`), with
//! keys and values as flat byte buffers laid out as the kernel wants them:
//!
//! - keys: `count * key_size` bytes;
//! - values: `count * value_stride` bytes, where a per-CPU map's value is `nr_possible_cpus`
//!   slots, each `value_size` rounded up to 8 bytes (`bpf_map_value_size()` in the kernel).
//!
//! Resume positions are opaque [`Token`]s, as the kernel treats them: a u32 bucket index for
//! hash maps, the last key for arrays (`generic_map_lookup_batch`). A call that copied nothing
//! leaves the position where it was: the kernel then writes no `out_batch` (`count` 0 returns
//! before it in both `generic_map_lookup_batch` and `__htab_map_lookup_and_delete_batch`).
//! `count` as the kernel writes it back is trusted only up to the request: a larger one is an
//! error ([`BatchError::Overreported`]), never clamped. Errnos become a typed
//! [`BatchError`]; the end of the map (`ENOENT` from a lookup, possibly with entries) is not an
//! error but [`LookupBatch::end`].
//!
//! The attr encoders ([`encode_lookup`], [`encode_write`]) are pure functions so that the
//! encoding can be unit-tested without a kernel. `CHECK_ATTR` rejects any non-zero byte after
//! `batch.flags`, so they always start from [`sys::zeroed_attr`].
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use crate::features;
use aya_obj::generated::bpf_attr__bindgen_ty_3 as batch_attr;

use crate::sys::{self, bpf_attr, bpf_cmd, bpf_map_type};

/// `BPF_F_LOCK`: the only `elem_flags` bit batch commands accept (and only on maps whose value
/// has a `bpf_spin_lock`).
pub const BPF_F_LOCK: u64 = 4;

/// Where a batch command's attributes end (`BPF_MAP_BATCH_LAST_FIELD` is `batch.flags`).
pub const BATCH_ATTR_END: usize = std::mem::size_of::<batch_attr>();

/// The buffer layout of one map, as the batch commands see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The `bpf_map_type`, as u32.
    pub map_type: u32,
    pub key_size: usize,
    pub value_size: usize,
    pub max_entries: u32,
    /// Value slots per entry: `nr_possible_cpus` for per-CPU maps, else 1.
    pub slots: usize,
}

impl Layout {
    /// A layout from known attributes; `possible_cpus` only matters for per-CPU types.
    pub fn new(
        map_type: u32,
        key_size: usize,
        value_size: usize,
        max_entries: u32,
        possible_cpus: usize,
    ) -> Self {
        let slots = if is_percpu(map_type) {
            possible_cpus
        } else {
            1
        };
        Self {
            map_type,
            key_size,
            value_size,
            max_entries,
            slots,
        }
    }

    /// Asks the kernel (`BPF_OBJ_GET_INFO_BY_FD`) for the layout of the map behind `fd`.
    pub fn of(fd: BorrowedFd<'_>) -> io::Result<Self> {
        let info = sys::map_info(fd)?;
        Ok(Self::new(
            info.type_,
            info.key_size as usize,
            info.value_size as usize,
            info.max_entries,
            features::possible_cpus()?,
        ))
    }

    /// Whether values are per-CPU arrays.
    pub fn is_percpu(&self) -> bool {
        is_percpu(self.map_type)
    }

    /// Bytes of one per-CPU slot: `value_size` rounded up to 8 for per-CPU maps.
    pub fn slot_size(&self) -> usize {
        if self.is_percpu() {
            self.value_size.next_multiple_of(8)
        } else {
            self.value_size
        }
    }

    /// Bytes of one entry's value in a batch buffer.
    pub fn value_stride(&self) -> usize {
        self.slot_size() * self.slots
    }

    /// Bytes of a token buffer: the kernel reads and writes `key_size` bytes for key-based
    /// tokens and 4 for hash bucket indices; this holds either.
    pub fn token_len(&self) -> usize {
        self.key_size.max(8)
    }
}

/// Per-CPU map types: their values carry one slot per possible CPU.
pub fn is_percpu(map_type: u32) -> bool {
    use bpf_map_type::*;
    [
        BPF_MAP_TYPE_PERCPU_HASH,
        BPF_MAP_TYPE_PERCPU_ARRAY,
        BPF_MAP_TYPE_LRU_PERCPU_HASH,
        BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE_DEPRECATED,
    ]
    .iter()
    .any(|t| *t as u32 == map_type)
}

/// An opaque resume position returned by a lookup batch; pass it back to continue.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Token(Box<[u8]>);

impl Token {
    /// The raw bytes as the kernel wrote them.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The first 4 bytes as a native u32: the bucket index for hash maps (for diagnostics).
    pub fn bucket(&self) -> u32 {
        u32::from_ne_bytes(
            self.0[..4]
                .try_into()
                .expect("token holds at least 4 bytes"),
        )
    }

    /// A token with the given bytes, padded with zeros to `len` (to build a resume point by
    /// hand, e.g. a hash bucket index).
    pub fn from_bytes(bytes: &[u8], len: usize) -> Self {
        let mut b = vec![0u8; len.max(bytes.len())];
        b[..bytes.len()].copy_from_slice(bytes);
        Self(b.into())
    }
}

/// The two batch-wide flag words. Both zero unless a test wants to see them rejected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags {
    /// `batch.elem_flags`: per-element flags; the kernel accepts only `BPF_F_LOCK`.
    pub elem_flags: u64,
    /// `batch.flags`: must be 0.
    pub flags: u64,
}

/// A batch command's failure. `processed` is `batch.count` as the kernel left it: the number
/// of elements processed before the error. Rejections before any work (bad flags,
/// `CHECK_ATTR`) leave `count` as passed in, so `processed` then echoes the request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// `ENOSPC`: the next hash bucket holds more entries than `count` (lookups only).
    #[error("ENOSPC: the next bucket does not fit in the buffer ({processed} processed)")]
    NoSpace { processed: u32 },
    /// `EINVAL`: bad flags, non-zero attr tail, unknown command (before 5.6), bad sizes.
    #[error("EINVAL: invalid batch arguments ({processed} processed)")]
    Invalid { processed: u32 },
    /// `ENOTSUPP` (524): this map type does not implement this batch command.
    #[error("ENOTSUPP (524): the map type has no such batch operation")]
    NotSupported,
    /// `EEXIST`: an update with `BPF_NOEXIST` met an existing key.
    #[error("EEXIST: a key already exists ({processed} processed)")]
    Exists { processed: u32 },
    /// `ENOENT` from an update or delete: a key is missing.
    #[error("ENOENT: a key does not exist ({processed} processed)")]
    NotFound { processed: u32 },
    /// `EINTR`: kernels without "bpf: skip non exist keys in generic_map_lookup_batch" return it
    /// when an entry vanished between get_next_key and lookup three times in a row; no pinned
    /// kernel does (docs/kernel-behaviour.md).
    #[error("EINTR: an entry vanished during the batch ({processed} processed)")]
    Interrupted { processed: u32 },
    /// The kernel wrote back a `count` larger than the request: it claims entries the buffers
    /// had no room for. Never from a correct kernel.
    #[error("the kernel reported {reported} entries for a request of {requested}")]
    Overreported { requested: u32, reported: u32 },
    /// Any other errno (`E2BIG`, `ENOMEM`, `EPERM`, `EFAULT`, ...).
    #[error("errno {errno} ({}) ({processed} processed)", io::Error::from_raw_os_error(*errno))]
    Os { errno: i32, processed: u32 },
    /// A caller buffer whose length is not a whole number of entries, or that disagrees with
    /// the keys buffer. Never reaches the kernel.
    #[error("{what} buffer has {len} bytes, expected {expected}")]
    BadBuffer {
        what: &'static str,
        len: usize,
        expected: String,
    },
}

impl BatchError {
    /// Maps an errno from a batch command (lookups treat ENOENT as the end before this).
    pub fn from_errno(errno: i32, processed: u32) -> Self {
        match errno {
            libc::ENOSPC => Self::NoSpace { processed },
            libc::EINVAL => Self::Invalid { processed },
            sys::ENOTSUPP => Self::NotSupported,
            libc::EEXIST => Self::Exists { processed },
            libc::ENOENT => Self::NotFound { processed },
            libc::EINTR => Self::Interrupted { processed },
            errno => Self::Os { errno, processed },
        }
    }

    /// The errno the kernel returned (None for [`BatchError::BadBuffer`]).
    pub fn errno(&self) -> Option<i32> {
        Some(match self {
            Self::NoSpace { .. } => libc::ENOSPC,
            Self::Invalid { .. } => libc::EINVAL,
            Self::NotSupported => sys::ENOTSUPP,
            Self::Exists { .. } => libc::EEXIST,
            Self::NotFound { .. } => libc::ENOENT,
            Self::Interrupted { .. } => libc::EINTR,
            Self::Os { errno, .. } => *errno,
            Self::BadBuffer { .. } | Self::Overreported { .. } => return None,
        })
    }

    /// Elements processed before the error, as the kernel reported them (0 when unknown).
    pub fn processed(&self) -> u32 {
        match self {
            Self::NoSpace { processed }
            | Self::Invalid { processed }
            | Self::Exists { processed }
            | Self::NotFound { processed }
            | Self::Interrupted { processed }
            | Self::Os { processed, .. } => *processed,
            Self::Overreported { reported, .. } => *reported,
            Self::NotSupported | Self::BadBuffer { .. } => 0,
        }
    }
}

/// Entries returned by a lookup batch: `len()` keys and values in kernel layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entries {
    key_size: usize,
    value_stride: usize,
    keys: Vec<u8>,
    values: Vec<u8>,
}

impl Entries {
    pub fn len(&self) -> usize {
        self.keys
            .len()
            .checked_div(self.key_size)
            .unwrap_or_else(|| {
                // Zero-sized keys (never for batch-capable maps): count by values instead.
                self.values
                    .len()
                    .checked_div(self.value_stride)
                    .unwrap_or(0)
            })
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn key(&self, i: usize) -> &[u8] {
        &self.keys[i * self.key_size..(i + 1) * self.key_size]
    }

    /// The whole value of entry `i` (all per-CPU slots, with their padding).
    pub fn value(&self, i: usize) -> &[u8] {
        &self.values[i * self.value_stride..(i + 1) * self.value_stride]
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        (0..self.len()).map(|i| (self.key(i), self.value(i)))
    }

    /// The flat key buffer (`len() * key_size` bytes).
    pub fn keys(&self) -> &[u8] {
        &self.keys
    }

    /// The flat value buffer (`len() * value_stride` bytes).
    pub fn values(&self) -> &[u8] {
        &self.values
    }
}

/// The result of one lookup (or lookup-and-delete) batch.
#[derive(Debug, Clone)]
pub struct LookupBatch {
    pub entries: Entries,
    /// Where to continue; `None` once the end is reached.
    pub next: Option<Token>,
    /// The kernel returned `ENOENT`: this was the last batch (it may still hold entries).
    pub end: bool,
}

/// Fills a zeroed attr for `BPF_MAP_LOOKUP_BATCH` / `BPF_MAP_LOOKUP_AND_DELETE_BATCH`.
/// `in_batch` is 0 to start from the beginning.
pub fn encode_lookup(
    map_fd: u32,
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    flags: Flags,
) -> bpf_attr {
    let mut attr = sys::zeroed_attr();
    // SAFETY: writing plain integers into the batch member of a zeroed union.
    unsafe {
        let b = &mut attr.batch;
        b.in_batch = in_batch;
        b.out_batch = out_batch;
        b.keys = keys;
        b.values = values;
        b.count = count;
        b.map_fd = map_fd;
        b.elem_flags = flags.elem_flags;
        b.flags = flags.flags;
    }
    attr
}

/// Fills a zeroed attr for `BPF_MAP_UPDATE_BATCH` (values set) or `BPF_MAP_DELETE_BATCH`
/// (values 0): no tokens.
pub fn encode_write(map_fd: u32, keys: u64, values: u64, count: u32, flags: Flags) -> bpf_attr {
    encode_lookup(map_fd, 0, 0, keys, values, count, flags)
}

/// `batch.count` after the kernel wrote it back.
pub fn attr_count(attr: &bpf_attr) -> u32 {
    // SAFETY: reading an integer of the batch member; every bit pattern is valid.
    unsafe { attr.batch.count }
}

/// The entries a batch processed: `reported` (`batch.count` as the kernel wrote it back), which
/// a correct kernel keeps at or below `requested`.
pub fn copied(requested: u32, reported: u32) -> Result<usize, BatchError> {
    if reported > requested {
        return Err(BatchError::Overreported {
            requested,
            reported,
        });
    }
    Ok(reported as usize)
}

/// Which lookup command a batch or a dump uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookupOp {
    Lookup,
    LookupAndDelete,
}

impl LookupOp {
    fn cmd(self) -> bpf_cmd {
        match self {
            Self::Lookup => bpf_cmd::BPF_MAP_LOOKUP_BATCH,
            Self::LookupAndDelete => bpf_cmd::BPF_MAP_LOOKUP_AND_DELETE_BATCH,
        }
    }
}

/// A map fd with its layout: the batch commands on it.
#[derive(Debug)]
pub struct BatchMap<F: AsFd> {
    fd: F,
    layout: Layout,
}

impl<F: AsFd> BatchMap<F> {
    /// Wraps a map fd (e.g. `map_data.fd()`), reading its layout from the kernel.
    pub fn new(fd: F) -> io::Result<Self> {
        let layout = Layout::of(fd.as_fd())?;
        Ok(Self { fd, layout })
    }

    /// Wraps a map fd with a known layout.
    pub fn with_layout(fd: F, layout: Layout) -> Self {
        Self { fd, layout }
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    fn raw_fd(&self) -> u32 {
        self.fd.as_fd().as_raw_fd() as u32
    }

    /// `BPF_MAP_LOOKUP_BATCH`: up to `count` entries from `from` (None: the start).
    pub fn lookup_batch(
        &self,
        from: Option<&Token>,
        count: u32,
        flags: Flags,
    ) -> Result<LookupBatch, BatchError> {
        self.lookup_with(LookupOp::Lookup, from, count, flags)
    }

    /// `BPF_MAP_LOOKUP_AND_DELETE_BATCH`: like [`Self::lookup_batch`], deleting what it returns.
    pub fn lookup_and_delete_batch(
        &self,
        from: Option<&Token>,
        count: u32,
        flags: Flags,
    ) -> Result<LookupBatch, BatchError> {
        self.lookup_with(LookupOp::LookupAndDelete, from, count, flags)
    }

    /// One lookup batch with the given command.
    pub fn lookup_with(
        &self,
        op: LookupOp,
        from: Option<&Token>,
        count: u32,
        flags: Flags,
    ) -> Result<LookupBatch, BatchError> {
        let l = self.layout;
        let n = count as usize;
        let mut keys = vec![0u8; n * l.key_size];
        let mut values = vec![0u8; n * l.value_stride()];
        // The kernel reads `key_size` (arrays) or 4 (hash) bytes of in_batch: a token from
        // another map could be short, so copy it into a buffer of this map's token length.
        let input = from.map(|t| Token::from_bytes(t.as_bytes(), l.token_len()));
        let mut out = vec![0u8; l.token_len()];
        let mut attr = encode_lookup(
            self.raw_fd(),
            input.as_ref().map_or(0, |t| t.0.as_ptr() as u64),
            out.as_mut_ptr() as u64,
            keys.as_mut_ptr() as u64,
            values.as_mut_ptr() as u64,
            count,
            flags,
        );
        // SAFETY: `keys` and `values` were just sized for `count` entries of this map's
        // layout and the tokens for its token length; all outlive the call.
        let res = unsafe { sys::bpf(op.cmd(), &mut attr) };
        let got = attr_count(&attr);
        let end = match res {
            Ok(_) => false,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => true,
            Err(e) => {
                return Err(BatchError::from_errno(
                    e.raw_os_error().unwrap_or(libc::EIO),
                    got,
                ))
            }
        };
        let got = copied(count, got)?;
        keys.truncate(got * l.key_size);
        values.truncate(got * l.value_stride());
        let next = if end {
            None
        } else if got == 0 {
            // Nothing copied: the kernel wrote no out_batch, so the position has not moved.
            from.cloned()
        } else {
            Some(Token(out.into()))
        };
        Ok(LookupBatch {
            entries: Entries {
                key_size: l.key_size,
                value_stride: l.value_stride(),
                keys,
                values,
            },
            next,
            end,
        })
    }

    fn check_keys(&self, keys: &[u8]) -> Result<u32, BatchError> {
        let ks = self.layout.key_size;
        if ks == 0 || !keys.len().is_multiple_of(ks) {
            return Err(BatchError::BadBuffer {
                what: "keys",
                len: keys.len(),
                expected: format!("a multiple of key_size {ks}"),
            });
        }
        Ok((keys.len() / ks) as u32)
    }

    /// `BPF_MAP_UPDATE_BATCH`: writes `keys.len() / key_size` entries; returns how many.
    /// `values` holds one `value_stride` per key. `flags.elem_flags` is passed to every
    /// element update (the kernel accepts only `BPF_F_LOCK`).
    pub fn update_batch(
        &self,
        keys: &[u8],
        values: &[u8],
        flags: Flags,
    ) -> Result<u32, BatchError> {
        let count = self.check_keys(keys)?;
        let stride = self.layout.value_stride();
        if values.len() != count as usize * stride {
            return Err(BatchError::BadBuffer {
                what: "values",
                len: values.len(),
                expected: format!("{count} entries of {stride} bytes"),
            });
        }
        let mut attr = encode_write(
            self.raw_fd(),
            keys.as_ptr() as u64,
            values.as_ptr() as u64,
            count,
            flags,
        );
        self.write(bpf_cmd::BPF_MAP_UPDATE_BATCH, &mut attr, count)
    }

    /// `BPF_MAP_DELETE_BATCH`: deletes `keys.len() / key_size` keys; returns how many.
    pub fn delete_batch(&self, keys: &[u8], flags: Flags) -> Result<u32, BatchError> {
        let count = self.check_keys(keys)?;
        let mut attr = encode_write(self.raw_fd(), keys.as_ptr() as u64, 0, count, flags);
        self.write(bpf_cmd::BPF_MAP_DELETE_BATCH, &mut attr, count)
    }

    fn write(&self, cmd: bpf_cmd, attr: &mut bpf_attr, count: u32) -> Result<u32, BatchError> {
        // SAFETY: the callers encode `count` entries of the buffers they checked.
        match unsafe { sys::bpf(cmd, attr) } {
            // count 0 returns before writing the count back: it is still 0.
            Ok(_) => copied(count, attr_count(attr)).map(|n| n as u32),
            Err(e) => Err(BatchError::from_errno(
                e.raw_os_error().unwrap_or(libc::EIO),
                attr_count(attr),
            )),
        }
    }

    /// Iterates over the whole map with lookup batches of `buffer` entries (see [`Dump`]).
    pub fn dump(&self, buffer: u32) -> Dump<'_, F> {
        Dump::new(self, LookupOp::Lookup, buffer)
    }

    /// Like [`Self::dump`], but with lookup-and-delete batches: empties the map.
    pub fn drain(&self, buffer: u32) -> Dump<'_, F> {
        Dump::new(self, LookupOp::LookupAndDelete, buffer)
    }
}

/// What a [`Dump`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DumpStats {
    /// Batch syscalls made, retries included.
    pub calls: u32,
    /// Calls that returned ENOSPC and were retried from the same token with a larger buffer.
    pub enospc_retries: u32,
    /// The largest buffer (in entries) used by any call.
    pub max_buffer: u32,
    /// Entries yielded.
    pub entries: u64,
}

/// Dumps a whole map: each call asks for `buffer` entries from the last token. On ENOSPC (a
/// hash bucket larger than the buffer) it doubles the buffer for that call only and retries
/// from the same token, counting the retries in [`DumpStats::enospc_retries`]. Only an ENOSPC
/// with nothing copied is retried: `__htab_map_lookup_and_delete_batch` returns ENOSPC only
/// when `total == 0` (after a partial copy it succeeds with the partial count), so an ENOSPC
/// that copied entries is a kernel fault and is yielded as the error it is. Any other
/// error (including EINTR) is yielded once and ends the iteration; the map's state then is
/// whatever the kernel left.
pub struct Dump<'m, F: AsFd> {
    map: &'m BatchMap<F>,
    op: LookupOp,
    buffer: u32,
    token: Option<Token>,
    pending: Option<Entries>,
    next_index: usize,
    done: bool,
    stats: DumpStats,
}

impl<'m, F: AsFd> Dump<'m, F> {
    fn new(map: &'m BatchMap<F>, op: LookupOp, buffer: u32) -> Self {
        Self {
            map,
            op,
            buffer: buffer.max(1),
            token: None,
            pending: None,
            next_index: 0,
            done: false,
            stats: DumpStats::default(),
        }
    }

    pub fn stats(&self) -> DumpStats {
        self.stats
    }

    /// Fetches the next batch into `pending`. Ok(false) when the map is exhausted.
    fn fetch(&mut self) -> Result<bool, BatchError> {
        let mut size = self.buffer;
        loop {
            self.stats.calls += 1;
            self.stats.max_buffer = self.stats.max_buffer.max(size);
            match self
                .map
                .lookup_with(self.op, self.token.as_ref(), size, Flags::default())
            {
                Ok(batch) => {
                    if batch.end {
                        self.done = true;
                    } else if batch.entries.is_empty() {
                        // A successful call with count > 0 always returns something; do not
                        // spin if a kernel ever disagrees.
                        return Err(BatchError::Os {
                            errno: libc::EPROTO,
                            processed: 0,
                        });
                    }
                    self.token = batch.next;
                    let any = !batch.entries.is_empty();
                    self.pending = Some(batch.entries);
                    self.next_index = 0;
                    return Ok(any);
                }
                Err(BatchError::NoSpace { processed: 0 }) => {
                    self.stats.enospc_retries += 1;
                    // A bucket holds at most max_entries (plus per-CPU extras): doubling
                    // reaches it in a few steps.
                    let cap = self.map.layout.max_entries.saturating_mul(2).max(2);
                    if size >= cap {
                        return Err(BatchError::NoSpace { processed: 0 });
                    }
                    size = size.saturating_mul(2).min(cap);
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl<F: AsFd> Iterator for Dump<'_, F> {
    /// One entry: the key and the whole value (all per-CPU slots).
    type Item = Result<(Vec<u8>, Vec<u8>), BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(p) = &self.pending {
                if self.next_index < p.len() {
                    let i = self.next_index;
                    self.next_index += 1;
                    self.stats.entries += 1;
                    return Some(Ok((p.key(i).to_vec(), p.value(i).to_vec())));
                }
                self.pending = None;
            }
            if self.done {
                return None;
            }
            match self.fetch() {
                Ok(_) => {}
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    fn attr_bytes(attr: &bpf_attr) -> &[u8] {
        // SAFETY: bpf_attr is plain data; viewing it as bytes is always valid.
        unsafe {
            std::slice::from_raw_parts(
                attr as *const bpf_attr as *const u8,
                std::mem::size_of::<bpf_attr>(),
            )
        }
    }

    #[test]
    fn lookup_attr_puts_every_argument_in_its_batch_field() {
        let flags = Flags {
            elem_flags: BPF_F_LOCK,
            flags: 0,
        };
        let attr = encode_lookup(7, 0x1000, 0x2000, 0x3000, 0x4000, 230, flags);
        // SAFETY: reading integers of the batch member.
        let b = unsafe { attr.batch };
        assert_eq!(
            (b.in_batch, b.out_batch, b.keys, b.values),
            (0x1000, 0x2000, 0x3000, 0x4000)
        );
        assert_eq!((b.count, b.map_fd, b.elem_flags, b.flags), (230, 7, 4, 0));
        assert_eq!(attr_count(&attr), 230);
    }

    #[test]
    fn batch_attr_layout_matches_the_uapi() {
        // struct { u64 in_batch, out_batch, keys, values; u32 count, map_fd; u64 elem_flags,
        // flags; } = 56 bytes; map_fd at 36 and flags at 48, as in include/uapi/linux/bpf.h.
        assert_eq!(BATCH_ATTR_END, 56);
        let attr = encode_lookup(0x0102_0304, 0, 0, 0, 0, 0, Flags::default());
        assert_eq!(&attr_bytes(&attr)[36..40], &0x0102_0304u32.to_ne_bytes());
        let attr = encode_lookup(
            0,
            0,
            0,
            0,
            0,
            0,
            Flags {
                elem_flags: 0,
                flags: u64::MAX,
            },
        );
        assert!(attr_bytes(&attr)[48..56].iter().all(|&b| b == 0xff));
    }

    #[test]
    fn nothing_is_written_after_the_last_batch_field() {
        // CHECK_ATTR(BPF_MAP_BATCH): any non-zero byte past batch.flags is EINVAL.
        let all_ones = Flags {
            elem_flags: u64::MAX,
            flags: u64::MAX,
        };
        for attr in [
            encode_lookup(
                u32::MAX,
                u64::MAX,
                u64::MAX,
                u64::MAX,
                u64::MAX,
                u32::MAX,
                all_ones,
            ),
            encode_write(u32::MAX, u64::MAX, u64::MAX, u32::MAX, all_ones),
        ] {
            let tail = &attr_bytes(&attr)[BATCH_ATTR_END..];
            assert!(
                tail.iter().all(|&b| b == 0),
                "non-zero byte after batch.flags"
            );
        }
    }

    #[test]
    fn update_and_delete_attrs_carry_no_tokens() {
        let attr = encode_write(3, 0x10, 0, 5, Flags::default());
        // SAFETY: reading integers of the batch member.
        let b = unsafe { attr.batch };
        assert_eq!((b.in_batch, b.out_batch, b.values), (0, 0, 0));
        assert_eq!((b.keys, b.count, b.map_fd), (0x10, 5, 3));
    }

    #[test]
    fn percpu_values_are_one_slot_per_cpu_rounded_up_to_8_bytes() {
        let t = |t: bpf_map_type| t as u32;
        let l = Layout::new(t(bpf_map_type::BPF_MAP_TYPE_PERCPU_HASH), 4, 4, 10, 3);
        assert_eq!((l.slots, l.slot_size(), l.value_stride()), (3, 8, 24));
        let l = Layout::new(t(bpf_map_type::BPF_MAP_TYPE_PERCPU_ARRAY), 4, 12, 10, 2);
        assert_eq!(l.value_stride(), 32);
        let l = Layout::new(t(bpf_map_type::BPF_MAP_TYPE_LRU_PERCPU_HASH), 4, 64, 10, 4);
        assert_eq!(l.value_stride(), 256);
        // Shared maps: one unpadded value.
        let l = Layout::new(t(bpf_map_type::BPF_MAP_TYPE_HASH), 4, 12, 10, 3);
        assert_eq!((l.slots, l.value_stride()), (1, 12));
    }

    #[test]
    fn tokens_hold_a_key_or_a_u64() {
        let t = bpf_map_type::BPF_MAP_TYPE_HASH as u32;
        assert_eq!(Layout::new(t, 4, 8, 1, 1).token_len(), 8);
        assert_eq!(Layout::new(t, 64, 8, 1, 1).token_len(), 64);
        let tok = Token::from_bytes(&7u32.to_ne_bytes(), 8);
        assert_eq!(tok.as_bytes().len(), 8);
        assert_eq!(tok.bucket(), 7);
    }

    /// The clamp a review found: `.min(requested)` hid a kernel that over-reports.
    #[test]
    fn a_count_above_the_request_is_an_error_not_clamped() {
        assert_eq!(copied(4, 4), Ok(4));
        assert_eq!(copied(4, 0), Ok(0));
        assert_eq!(
            copied(4, 5),
            Err(BatchError::Overreported {
                requested: 4,
                reported: 5
            })
        );
    }

    #[test]
    fn errnos_map_to_typed_errors_and_back() {
        for errno in [
            libc::ENOSPC,
            libc::EINVAL,
            sys::ENOTSUPP,
            libc::EEXIST,
            libc::ENOENT,
            libc::EINTR,
            libc::E2BIG,
        ] {
            let e = BatchError::from_errno(errno, 3);
            assert_eq!(e.errno(), Some(errno), "{e}");
        }
        assert_eq!(
            BatchError::from_errno(libc::ENOSPC, 0),
            BatchError::NoSpace { processed: 0 }
        );
        assert_eq!(
            BatchError::from_errno(524, 9),
            BatchError::NotSupported,
            "ENOTSUPP is not EOPNOTSUPP (95)"
        );
        assert_eq!(BatchError::from_errno(libc::EEXIST, 3).processed(), 3);
    }
}
