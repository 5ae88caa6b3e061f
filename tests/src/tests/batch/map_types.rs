//! LPM tries, maps of maps and spin-locked values.
use super::*;
use test_case::test_case;

/// `map_tests/lpm_trie_map_batch_ops.c`: LPM tries have the generic batch ops (5.13, the
/// `generic_map_*_batch` entries of `trie_map_ops` in kernel/bpf/lpm_trie.c): an update batch
/// writes every prefix, lookup batches of each step from 1 to max_entries return each once
/// (key tokens from `trie_get_next_key`: never ENOSPC), delete batches remove them all. There is
/// no lookup-and-delete batch (ENOTSUPP). Besides the selftest's /32 prefixes, a /24 and a /16
/// covering them, so the walk crosses inner nodes.
#[test]
fn lpm_trie_batch_ops_write_read_and_delete_every_prefix() -> Result<()> {
    use bpf_map_type::BPF_MAP_TYPE_LPM_TRIE;
    crate::require!(Feature::Batch(BPF_MAP_TYPE_LPM_TRIE));
    const MAX: u32 = 10;
    let mut keys: Vec<Vec<u8>> = (1..=8).map(|i| lpm_key(32, [192, 168, 1, i])).collect();
    keys.push(lpm_key(24, [192, 168, 1, 0]));
    keys.push(lpm_key(16, [192, 168, 0, 0]));
    let expected: Contents = keys
        .iter()
        .zip(1i32..)
        .map(|(k, v)| (k.clone(), v.to_ne_bytes().to_vec()))
        .collect();
    let m = TestMap::create(
        BPF_MAP_TYPE_LPM_TRIE,
        8,
        4,
        MAX,
        aya_obj::generated::BPF_F_NO_PREALLOC,
    )?;
    let b = m.batch()?;
    let all_keys: Vec<u8> = expected.keys().flatten().copied().collect();
    let all_values: Vec<u8> = expected.values().flatten().copied().collect();
    for step in 1..=MAX {
        let written = b
            .update_batch(&all_keys, &all_values, Flags::default())
            .context("update batch")?;
        assert_eq!(written, MAX);
        assert_eq!(
            m.walk()?,
            expected,
            "get_next_key + lookup walk after the update"
        );
        let (got, stats) = dump_all(&b, step)?;
        assert_eq!(got, expected, "lookup batches of {step}");
        assert_eq!(stats.enospc_retries, 0, "key tokens never give ENOSPC");
        assert_eq!(
            b.lookup_and_delete_batch(None, step, Flags::default())
                .err(),
            Some(BatchError::NotSupported)
        );
        for chunk in all_keys.chunks(8 * step as usize) {
            let n = b
                .delete_batch(chunk, Flags::default())
                .context("delete batch")?;
            assert_eq!(n as usize, chunk.len() / 8);
        }
        assert!(
            m.walk()?.is_empty(),
            "trie not empty after deleting every prefix"
        );
    }
    Ok(())
}

/// A map of maps filled by an update batch of inner map fds.
struct MapOfMaps {
    outer: OwnedFd,
    /// The inner maps (kept open), in key order.
    inner: Vec<OwnedFd>,
    /// (outer key, inner map id), as a batch lookup must return them.
    expected: Contents,
}

/// `map_tests/map_in_map_batch_ops.c`: ten inner maps (`inner_type`, each holding its own id
/// at key 0), put into an outer map with one update batch of their fds: keys 9 down to 0 for
/// an array of maps, 1000 down to 991 for a hash of maps.
fn map_of_maps(outer_type: bpf_map_type, inner_type: bpf_map_type) -> Result<MapOfMaps> {
    const N: u32 = 10;
    sys::raise_memlock();
    let attr = |map_type: bpf_map_type, max_entries| sys::MapAttr {
        map_type: map_type as u32,
        key_size: 4,
        value_size: 4,
        max_entries,
        map_flags: 0,
        map_extra: 0,
    };
    let inner: Vec<OwnedFd> = (0..N)
        .map(|_| {
            let fd = sys::map_create(&attr(inner_type, 1)).context("create inner map")?;
            let id = sys::map_info(fd.as_fd()).context("inner map info")?.id;
            sys::Elems::of(fd.as_fd())?
                .update(Some(&0u32.to_ne_bytes()), &id.to_ne_bytes(), BPF_ANY)
                .context("store the inner map's id")?;
            Ok(fd)
        })
        .collect::<Result<_>>()?;
    let mut create = sys::map_create_attr(&attr(outer_type, N));
    create.__bindgen_anon_1.inner_map_fd = inner[0].as_raw_fd() as u32;
    let outer = sys::map_create_from(&mut create).context("create outer map")?;
    let base = if outer_type == bpf_map_type::BPF_MAP_TYPE_ARRAY_OF_MAPS {
        9
    } else {
        1000
    };
    let keys: Vec<u32> = (0..N).map(|i| base - i).collect();
    let expected = keys
        .iter()
        .zip(&inner)
        .map(|(k, fd)| {
            let id = sys::map_info(fd.as_fd()).context("inner map info")?.id;
            Ok((k.to_ne_bytes().to_vec(), id.to_ne_bytes().to_vec()))
        })
        .collect::<Result<_>>()?;
    let key_bytes: Vec<u8> = keys.iter().flat_map(|k| k.to_ne_bytes()).collect();
    let fds: Vec<u8> = inner
        .iter()
        .flat_map(|fd| (fd.as_raw_fd() as u32).to_ne_bytes())
        .collect();
    let written = BatchMap::new(&outer)
        .context("outer layout")?
        .update_batch(&key_bytes, &fds, Flags::default())
        .context("update batch of inner map fds")?;
    assert_eq!(written, N);
    Ok(MapOfMaps {
        outer,
        inner,
        expected,
    })
}

/// Batch lookups of a map of maps return each slot's inner map *id* (what
/// `map_fd_sys_lookup_elem` gives: `generic_map_lookup_batch` for arrays,
/// `__htab_map_lookup_and_delete_batch` for hashes; 5.19), for buffers of 5 and 10 as in
/// `map_in_map_batch_ops.c`, and of 1 and 3. A hash of maps also drains with lookup-and-delete;
/// an array of maps has no delete batches (ENOTSUPP).
#[test_case(bpf_map_type::BPF_MAP_TYPE_ARRAY_OF_MAPS, bpf_map_type::BPF_MAP_TYPE_ARRAY ; "array_of_maps_inner_array")]
#[test_case(bpf_map_type::BPF_MAP_TYPE_ARRAY_OF_MAPS, bpf_map_type::BPF_MAP_TYPE_HASH ; "array_of_maps_inner_hash")]
#[test_case(bpf_map_type::BPF_MAP_TYPE_HASH_OF_MAPS, bpf_map_type::BPF_MAP_TYPE_ARRAY ; "hash_of_maps_inner_array")]
#[test_case(bpf_map_type::BPF_MAP_TYPE_HASH_OF_MAPS, bpf_map_type::BPF_MAP_TYPE_HASH ; "hash_of_maps_inner_hash")]
fn map_in_map_batches_return_inner_map_ids(
    outer_type: bpf_map_type,
    inner_type: bpf_map_type,
) -> Result<()> {
    crate::require!(Feature::Batch(outer_type));
    let m = map_of_maps(outer_type, inner_type)?;
    let b = BatchMap::new(&m.outer).context("outer layout")?;
    for buffer in [1, 3, 5, 10] {
        let mut got = Contents::new();
        for entry in b.dump(buffer) {
            let (k, v) = entry.with_context(|| format!("dump with buffer {buffer}"))?;
            assert!(got.insert(k.clone(), v).is_none(), "{k:?} returned twice");
        }
        assert_eq!(got, m.expected, "(key, inner map id) with buffer {buffer}");
    }
    let f = Flags::default();
    if outer_type == bpf_map_type::BPF_MAP_TYPE_HASH_OF_MAPS {
        let r = b
            .lookup_and_delete_batch(None, 10, f)
            .context("lookup and delete batch")?;
        assert!(
            r.end && r.entries.len() == 10,
            "one batch of 10 drains the map"
        );
        assert_eq!(
            b.lookup_batch(None, 10, f)
                .map(|r| (r.end, r.entries.len())),
            Ok((true, 0)),
            "map empty after the drain"
        );
    } else {
        assert_eq!(
            b.lookup_and_delete_batch(None, 10, f).err(),
            Some(BatchError::NotSupported)
        );
        let keys: Vec<u8> = (0u32..10).flat_map(u32::to_ne_bytes).collect();
        assert_eq!(b.delete_batch(&keys, f), Err(BatchError::NotSupported));
    }
    // The inner maps stay open until the batches are done.
    drop(m.inner);
    Ok(())
}

/// The `spin_lock` object's map: values hold a `bpf_spin_lock` at offset 0.
fn locked_value(i: u32, lock: u32) -> Vec<u8> {
    use bpfvm_common::spin_lock::{DATA_OFFSET, LOCK_OFFSET, VALUE_SIZE};
    let mut v: Vec<u8> = (0..VALUE_SIZE)
        .map(|j| (i as usize * 7 + j) as u8 | 1)
        .collect();
    v[LOCK_OFFSET..LOCK_OFFSET + 4].copy_from_slice(&lock.to_ne_bytes());
    v[DATA_OFFSET..DATA_OFFSET + 8].copy_from_slice(&u64::from(i).to_ne_bytes());
    v
}

/// The `BPF_F_LOCK` success path, on a hash map whose BTF value holds a `bpf_spin_lock`
/// (`test_map_lock` in the selftests' test_maps.c does it element by element): an update batch
/// with `BPF_F_LOCK` (`generic_map_update_batch` passes it to `htab_map_update_elem`) and lookup
/// and lookup-and-delete batches with it (`copy_map_value_locked` in
/// `__htab_map_lookup_and_delete_batch`) move every byte but the lock's, which userspace never
/// writes (`copy_map_value` skips it) and always reads as 0 (`check_and_init_map_value`).
/// A program bumping a value under the lock is seen by the next locked read.
#[test]
fn f_lock_batches_copy_values_but_never_the_lock() -> Result<()> {
    use bpfvm_common::spin_lock::{BUMP_KEY, DATA_OFFSET, LOCK_OFFSET, MAP, PROG_BUMP};
    crate::require!(Feature::Batch(bpf_map_type::BPF_MAP_TYPE_HASH));
    crate::require_object!(crate::object::SPIN_LOCK);
    let mut ebpf = crate::object::load(crate::object::SPIN_LOCK)?;
    let map = match ebpf.map(MAP) {
        Some(aya::maps::Map::HashMap(d)) => d.fd().as_fd().try_clone_to_owned()?,
        other => anyhow::bail!("map {MAP}: {other:?}"),
    };
    let b = BatchMap::new(&map)?;
    let n = 40u32;
    let lock = Flags {
        elem_flags: BPF_F_LOCK,
        flags: 0,
    };
    // Garbage in the lock word: the kernel must neither store it nor hand it back.
    let keys: Vec<u8> = (0..n).flat_map(u32::to_ne_bytes).collect();
    let values: Vec<u8> = (0..n).flat_map(|i| locked_value(i, u32::MAX)).collect();
    assert_eq!(b.update_batch(&keys, &values, lock), Ok(n));
    let expected: Contents = (0..n)
        .map(|i| (i.to_ne_bytes().to_vec(), locked_value(i, 0)))
        .collect();
    let read = |flags: Flags, delete: bool| -> Result<Contents> {
        let r = if delete {
            b.lookup_and_delete_batch(None, 64, flags)
        } else {
            b.lookup_batch(None, 64, flags)
        }
        .with_context(|| format!("lookup batch ({flags:?}, delete {delete})"))?;
        assert!(r.end, "a buffer of max_entries reaches the end");
        Ok((0..r.entries.len())
            .map(|i| (r.entries.key(i).to_vec(), r.entries.value(i).to_vec()))
            .collect())
    };
    assert!(read(lock, false)? == expected, "locked lookup batch");
    assert!(
        read(Flags::default(), false)? == expected,
        "plain lookup batch"
    );

    let prog: &mut SchedClassifier = crate::object::load_program(&mut ebpf, PROG_BUMP)?;
    crate::object::test_run_packet(prog)?;
    let mut bumped = expected.clone();
    let v = bumped
        .get_mut(&BUMP_KEY.to_ne_bytes()[..])
        .context("key BUMP_KEY")?;
    let data0 = u64::from_ne_bytes(v[DATA_OFFSET..DATA_OFFSET + 8].try_into()?) + 1;
    v[DATA_OFFSET..DATA_OFFSET + 8].copy_from_slice(&data0.to_ne_bytes());
    assert_eq!(&v[LOCK_OFFSET..LOCK_OFFSET + 4], &[0; 4]);
    assert!(
        read(lock, true)? == bumped,
        "locked lookup and delete batch after the bump"
    );
    assert!(
        read(lock, false)?.is_empty(),
        "map empty after lookup and delete"
    );
    Ok(())
}
