//! Rejected batches: flags, attr tail, map types without batch operations.
use super::*;
use std::os::fd::FromRawFd;
use test_case::test_case;

#[derive(Debug, Clone, Copy)]
enum Cmd {
    Lookup,
    LookupAndDelete,
    Update,
    Delete,
}

/// Runs `cmd` on keys 0..4; the outer error is a setup failure, the inner the batch's answer.
fn run_cmd(m: &TestMap, cmd: Cmd, flags: Flags) -> Result<Result<u32, BatchError>> {
    let b = m.batch()?;
    let ids = 0..4;
    Ok(match cmd {
        Cmd::Lookup => b
            .lookup_batch(None, 4, flags)
            .map(|r| r.entries.len() as u32),
        Cmd::LookupAndDelete => b
            .lookup_and_delete_batch(None, 4, flags)
            .map(|r| r.entries.len() as u32),
        Cmd::Update => b.update_batch(&keys_of(m, ids.clone()), &values_of(m, ids), flags),
        Cmd::Delete => b.delete_batch(&keys_of(m, ids), flags),
    })
}

/// `batch.flags` must be 0, but only the hash tables' lookup paths check it
/// (`__htab_map_lookup_and_delete_batch`).
#[test_case(Hash, Cmd::Lookup ; "hash_lookup")]
#[test_case(Hash, Cmd::LookupAndDelete ; "hash_lookup_and_delete")]
#[test_case(PercpuHash, Cmd::Lookup ; "percpu_hash_lookup")]
#[test_case(LruHash, Cmd::LookupAndDelete ; "lru_hash_lookup_and_delete")]
fn nonzero_flags_gives_einval(kind: Kind, cmd: Cmd) -> Result<()> {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 64)?;
    let before = m.fill(10)?;
    for flags in [1, 2, 4, 1 << 63] {
        let r = run_cmd(
            &m,
            cmd,
            Flags {
                elem_flags: 0,
                flags,
            },
        )?;
        assert!(
            matches!(r, Err(BatchError::Invalid { .. })),
            "{cmd:?} with flags {flags:#x}: {r:?}"
        );
    }
    assert_eq!(m.walk()?, before, "a rejected batch changed the map");
    Ok(())
}

/// The generic implementations (`generic_map_lookup_batch` for arrays,
/// `generic_map_update_batch`, `generic_map_delete_batch`) never read `batch.flags`: a non-zero
/// value is silently ignored (seen on 5.10, 6.1, 6.12 and 6.18), unlike the hash lookups above.
#[test_case(Array, Cmd::Lookup ; "array_lookup")]
#[test_case(Array, Cmd::Update ; "array_update")]
#[test_case(Hash, Cmd::Update ; "hash_update")]
#[test_case(Hash, Cmd::Delete ; "hash_delete")]
fn nonzero_flags_are_ignored_by_generic_batch_ops(kind: Kind, cmd: Cmd) -> Result<()> {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 64)?;
    m.fill(10)?;
    let r = run_cmd(
        &m,
        cmd,
        Flags {
            elem_flags: 0,
            flags: 1,
        },
    )?;
    assert_eq!(r, Ok(4), "{kind:?} {cmd:?} with flags 1");
    if matches!(cmd, Cmd::Delete) {
        assert_eq!(m.walk()?.len(), 6, "the 4 keys were deleted");
    }
    Ok(())
}

#[test_case(Cmd::Lookup, BPF_NOEXIST ; "lookup_noexist")]
#[test_case(Cmd::Lookup, BPF_EXIST ; "lookup_exist")]
#[test_case(Cmd::Lookup, 8 ; "lookup_bit_3")]
#[test_case(Cmd::Lookup, 1 << 32 ; "lookup_bit_32")]
#[test_case(Cmd::Lookup, BPF_F_LOCK ; "lookup_f_lock_without_spin_lock")]
#[test_case(Cmd::LookupAndDelete, BPF_EXIST ; "lookup_and_delete_exist")]
#[test_case(Cmd::Update, 8 ; "update_bit_3")]
#[test_case(Cmd::Update, BPF_F_LOCK ; "update_f_lock_without_spin_lock")]
#[test_case(Cmd::Delete, BPF_NOEXIST ; "delete_noexist")]
#[test_case(Cmd::Delete, BPF_F_LOCK ; "delete_f_lock_without_spin_lock")]
fn elem_flags_other_than_f_lock_give_einval(cmd: Cmd, elem_flags: u64) -> Result<()> {
    crate::require!(Feature::Batch(bpf_map_type::BPF_MAP_TYPE_HASH));
    let m = TestMap::new(Hash, 4, 8, 64)?;
    let before = m.fill(10)?;
    let r = run_cmd(
        &m,
        cmd,
        Flags {
            elem_flags,
            flags: 0,
        },
    )?;
    assert!(
        matches!(r, Err(BatchError::Invalid { .. })),
        "{cmd:?} with elem_flags {elem_flags:#x}: {r:?}"
    );
    assert_eq!(m.walk()?, before, "a rejected batch changed the map");
    Ok(())
}

#[test]
fn nonzero_byte_after_batch_flags_gives_einval() -> Result<()> {
    crate::require!(Feature::Batch(bpf_map_type::BPF_MAP_TYPE_HASH));
    let m = TestMap::new(Hash, 4, 8, 64)?;
    m.fill(10)?;
    let mut keys = [0u8; 4 * 4];
    let mut values = [0u8; 8 * 4];
    let mut out = 0u64;
    let mut encode = || {
        crate::maps::batch::encode_lookup(
            m.fd().as_raw_fd() as u32,
            0,
            &mut out as *mut u64 as u64,
            keys.as_mut_ptr() as u64,
            values.as_mut_ptr() as u64,
            4,
            Flags::default(),
        )
    };
    let mut good = encode();
    // SAFETY: `out`, `keys` and `values` hold the 4 entries the attr asks for.
    assert!(
        unsafe { sys::bpf(bpf_cmd::BPF_MAP_LOOKUP_BATCH, &mut good) }.is_ok(),
        "the clean attr works"
    );
    let mut bad = encode();
    // SAFETY: writing one byte inside the attr union, just past batch.flags.
    unsafe {
        (&mut bad as *mut sys::bpf_attr as *mut u8)
            .add(BATCH_ATTR_END)
            .write(1)
    };
    // SAFETY: as for `good`.
    let e = unsafe { sys::bpf(bpf_cmd::BPF_MAP_LOOKUP_BATCH, &mut bad) };
    let e = e.expect_err("tail byte accepted");
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
    Ok(())
}

#[derive(Debug, Clone, Copy)]
enum Unsupported {
    BloomFilter,
    RingBuf,
}

/// Batch commands on map types that do not implement them fail with ENOTSUPP (524), the
/// kernel-internal errno `BPF_DO_BATCH` returns (seen for bloom filters on 6.1, 6.12, 6.18 and ring
/// buffers on 5.10, 6.1, 6.12, 6.18).
#[test_case(Unsupported::BloomFilter ; "bloom_filter")]
#[test_case(Unsupported::RingBuf ; "ring_buffer")]
fn map_without_batch_support_gives_enotsupp(which: Unsupported) -> Result<()> {
    crate::require!(Feature::Batch(bpf_map_type::BPF_MAP_TYPE_HASH));
    let (map_type, key_size, value_size, max_entries) = match which {
        Unsupported::BloomFilter => {
            crate::require!(Feature::BloomFilter);
            (bpf_map_type::BPF_MAP_TYPE_BLOOM_FILTER, 0, 4, 16)
        }
        Unsupported::RingBuf => (bpf_map_type::BPF_MAP_TYPE_RINGBUF, 0, 0, 4096),
    };
    sys::raise_memlock();
    // Ring buffers exist since 5.8 (457f44363a88), before every pin: a failure here is a bug.
    let fd: OwnedFd = sys::map_create(&sys::MapAttr {
        map_type: map_type as u32,
        key_size,
        value_size,
        max_entries,
        map_flags: 0,
        map_extra: 0,
    })
    .with_context(|| format!("create {map_type:?}"))?;
    let b = BatchMap::new(&fd).context("layout")?;
    let f = Flags::default();
    assert_eq!(
        b.lookup_batch(None, 4, f).err(),
        Some(BatchError::NotSupported)
    );
    assert_eq!(
        b.lookup_and_delete_batch(None, 4, f).err(),
        Some(BatchError::NotSupported)
    );
    let keys = vec![0u8; 4 * key_size as usize];
    let values = vec![0u8; 4 * value_size as usize];
    if key_size == 0 {
        // Zero-sized keys cannot describe a count for the safe wrapper: encode by hand.
        for cmd in [bpf_cmd::BPF_MAP_UPDATE_BATCH, bpf_cmd::BPF_MAP_DELETE_BATCH] {
            let mut attr = crate::maps::batch::encode_write(
                fd.as_raw_fd() as u32,
                keys.as_ptr() as u64,
                values.as_ptr() as u64,
                4,
                f,
            );
            // SAFETY: `keys` and `values` hold the 4 entries the attr names; writes only read.
            let e = unsafe { sys::bpf(cmd, &mut attr) }.expect_err("batch write accepted");
            assert_eq!(e.raw_os_error(), Some(sys::ENOTSUPP), "{cmd:?}: {e}");
        }
    }
    Ok(())
}

/// Arrays implement lookup and update batches only: deleting is not an array operation.
#[test_case(Array ; "array")]
#[test_case(PercpuArray ; "percpu_array")]
fn array_delete_batches_give_enotsupp(kind: Kind) -> Result<()> {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 16)?;
    let before = m.fill(16)?;
    let b = m.batch()?;
    assert_eq!(
        b.lookup_and_delete_batch(None, 4, Flags::default()).err(),
        Some(BatchError::NotSupported)
    );
    assert_eq!(
        b.delete_batch(&keys_of(&m, 0..4), Flags::default()),
        Err(BatchError::NotSupported)
    );
    assert_eq!(m.walk()?, before);
    Ok(())
}

/// A second fd to the map behind `fd`, opened by id with `open_flags` (`BPF_MAP_GET_FD_BY_ID`,
/// `bpf_map_get_fd_by_id` in kernel/bpf/syscall.c; `BPF_F_RDONLY` or `BPF_F_WRONLY`).
fn reopen(fd: BorrowedFd<'_>, open_flags: u32) -> Result<OwnedFd> {
    let id = sys::map_info(fd).context("map info")?.id;
    let mut attr = sys::zeroed_attr();
    attr.__bindgen_anon_6.__bindgen_anon_1.map_id = id;
    attr.__bindgen_anon_6.open_flags = open_flags;
    // SAFETY: GET_FD_BY_ID reads only integers from the attr; no pointers.
    let raw = unsafe { sys::bpf(bpf_cmd::BPF_MAP_GET_FD_BY_ID, &mut attr) }
        .with_context(|| format!("BPF_MAP_GET_FD_BY_ID {id} with open_flags {open_flags:#x}"))?;
    // SAFETY: the kernel just returned this fd to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(raw as i32) })
}

/// Each batch command on `b` over keys 0..4 of `m`: (command, errno or None for success).
/// Lookups ask for the whole map (16 entries), so no hash bucket is larger than the buffer
/// (ENOSPC; a bucket of 5 of 16 keys, which count 4 would not hold, came up once on 7.2).
fn errnos(m: &TestMap, b: &BatchMap<&OwnedFd>) -> Vec<(Cmd, Option<i32>)> {
    let f = Flags::default();
    let ids = 0..4;
    let (keys, values) = (keys_of(m, ids.clone()), values_of(m, ids));
    let all = m.layout.max_entries;
    [
        (Cmd::Lookup, b.lookup_batch(None, all, f).map(drop)),
        (
            Cmd::LookupAndDelete,
            b.lookup_and_delete_batch(None, all, f).map(drop),
        ),
        (Cmd::Update, b.update_batch(&keys, &values, f).map(drop)),
        (Cmd::Delete, b.delete_batch(&keys, f).map(drop)),
    ]
    .into_iter()
    .map(|(cmd, r)| (cmd, r.err().map(|e| e.errno().unwrap_or(0))))
    .collect()
}

/// `bpf_map_do_batch` (kernel/bpf/syscall.c) checks the fd's access before any work: a read
/// needs `FMODE_CAN_READ`, every command but `BPF_MAP_LOOKUP_BATCH` needs `FMODE_CAN_WRITE`
/// (`map_get_sys_perms`), else EPERM, ahead of the map type's own ENOTSUPP. A `BPF_F_RDONLY` fd
/// may only look up, a `BPF_F_WRONLY` fd only update and delete; nothing rejected changes the map.
#[test_case(Hash ; "hash")]
#[test_case(Array ; "array")]
fn fd_access_mode_gives_eperm_before_any_work(kind: Kind) -> Result<()> {
    use aya_obj::generated::{BPF_F_RDONLY, BPF_F_WRONLY};
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 16)?;
    let before = m.fill(16)?;
    let eperm = Some(libc::EPERM);
    let rdonly = reopen(m.fd(), BPF_F_RDONLY)?;
    let got = errnos(&m, &BatchMap::new(&rdonly)?);
    assert_eq!(
        got.iter().map(|(_, e)| *e).collect::<Vec<_>>(),
        [None, eperm, eperm, eperm],
        "read-only fd: {got:?}"
    );
    assert_eq!(m.walk()?, before, "a read-only fd changed the map");
    let wronly = reopen(m.fd(), BPF_F_WRONLY)?;
    let got = errnos(&m, &BatchMap::new(&wronly)?);
    // Arrays have no delete batch: past the permission check it is ENOTSUPP.
    let delete = if kind.is_array() {
        Some(sys::ENOTSUPP)
    } else {
        None
    };
    assert_eq!(
        got.iter().map(|(_, e)| *e).collect::<Vec<_>>(),
        [eperm, eperm, None, delete],
        "write-only fd: {got:?}"
    );
    Ok(())
}

/// `BPF_MAP_FREEZE` (`map_freeze`, kernel/bpf/syscall.c) makes the map read-only for userspace:
/// `map_get_sys_perms` drops `FMODE_CAN_WRITE` from every fd once `map->frozen` is set, so
/// update, delete and lookup-and-delete batches give EPERM on the fd that created the map, and
/// lookup batches still read everything.
#[test_case(Hash ; "hash")]
#[test_case(Array ; "array")]
fn frozen_map_gives_eperm_for_every_write(kind: Kind) -> Result<()> {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 16)?;
    let before = m.fill(16)?;
    let fd = m.fd().try_clone_to_owned().context("dup the map fd")?;
    let mut attr = sys::zeroed_attr();
    attr.__bindgen_anon_2.map_fd = fd.as_raw_fd() as u32;
    // SAFETY: FREEZE reads only the map fd from the attr; no pointers.
    unsafe { sys::bpf(bpf_cmd::BPF_MAP_FREEZE, &mut attr) }.context("BPF_MAP_FREEZE")?;
    let got = errnos(&m, &BatchMap::new(&fd)?);
    let eperm = Some(libc::EPERM);
    assert_eq!(
        got.iter().map(|(_, e)| *e).collect::<Vec<_>>(),
        [None, eperm, eperm, eperm],
        "frozen map: {got:?}"
    );
    assert_eq!(m.walk()?, before, "a frozen map changed");
    let (dumped, _) = dump_all(&m.batch()?, 5)?;
    assert_eq!(dumped, before, "lookup batches of a frozen map");
    Ok(())
}
