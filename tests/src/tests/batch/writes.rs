//! Update, delete and lookup-and-delete batches.
use super::*;
use test_case::test_case;

#[test_case(Hash, 1 ; "hash_buffer_1")]
#[test_case(Hash, 64 ; "hash_buffer_64")]
#[test_case(PercpuHash, 64 ; "percpu_hash_buffer_64")]
#[test_case(LruHash, 64 ; "lru_hash_buffer_64")]
#[test_case(LruPercpuHash, 64 ; "lru_percpu_hash_buffer_64")]
fn lookup_and_delete_empties_map_and_returns_everything_once(
    kind: Kind,
    buffer: u32,
) -> Result<()> {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 1000)?;
    let expected = m.fill(800)?;
    let b = m.batch()?;
    let mut got = Contents::new();
    let mut drain = b.drain(buffer);
    for entry in &mut drain {
        let (k, v) = entry.context("lookup and delete batch")?;
        assert!(got.insert(k.clone(), v).is_none(), "{k:?} returned twice");
    }
    eprintln!("{kind:?} drain buffer {buffer}: {:?}", drain.stats());
    assert!(
        got == expected,
        "drained entries differ from what was inserted"
    );
    assert!(m.walk()?.is_empty(), "map not empty after draining");
    assert!(
        b.lookup_batch(None, 8, Flags::default())
            .context("lookup")?
            .end
    );
    Ok(())
}

#[test_case(Hash ; "hash")]
#[test_case(PercpuHash ; "percpu_hash")]
#[test_case(LruHash ; "lru_hash")]
#[test_case(LruPercpuHash ; "lru_percpu_hash")]
#[test_case(Array ; "array")]
#[test_case(PercpuArray ; "percpu_array")]
fn update_batch_writes_what_lookup_reads(kind: Kind) -> Result<()> {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 256)?;
    pin_for_lru()?;
    let n = if kind.is_array() { 256 } else { 200 };
    let b = m.batch()?;
    let done = b
        .update_batch(&keys_of(&m, 0..n), &values_of(&m, 0..n), Flags::default())
        .context("update batch")?;
    assert_eq!(done, n);
    let expected: Contents = (0..n).map(|i| (m.key(i), m.value(i))).collect();
    assert!(m.walk()? == expected, "map differs from the batch written");
    Ok(())
}

/// `generic_map_update_batch` passes `elem_flags` to each element update but accepts only
/// `BPF_F_LOCK` there, so `BPF_NOEXIST` (or `BPF_EXIST`) never reaches an element: the batch is
/// rejected whole with EINVAL before anything is written, and EEXIST cannot come from a batch
/// update. The element command does honour `BPF_NOEXIST` with EEXIST.
#[test_case(Hash, BPF_NOEXIST ; "hash_noexist")]
#[test_case(Hash, BPF_EXIST ; "hash_exist")]
#[test_case(Array, BPF_NOEXIST ; "array_noexist")]
fn update_batch_with_noexist_is_rejected_whole_with_einval(
    kind: Kind,
    elem_flags: u64,
) -> Result<()> {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 64)?;
    let before = m.fill(5)?;
    let b = m.batch()?;
    let ids = [10, 11, 12, 3, 13];
    let flags = Flags {
        elem_flags,
        flags: 0,
    };
    let r = b.update_batch(&keys_of(&m, ids), &values_of(&m, ids), flags);
    assert!(matches!(r, Err(BatchError::Invalid { .. })), "{r:?}");
    if kind.is_array() {
        for (k, v) in &before {
            assert_eq!(
                m.lookup(k)?.as_ref(),
                Some(v),
                "a rejected batch changed {k:?}"
            );
        }
        assert_eq!(
            m.lookup(&m.key(10))?,
            Some(vec![0; 8]),
            "a rejected batch wrote key 10"
        );
    } else {
        assert_eq!(m.walk()?, before, "a rejected batch changed the map");
        let e = m
            .update(&m.key(3), &m.value(3), BPF_NOEXIST)
            .expect_err("NOEXIST");
        assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
    }
    Ok(())
}

/// A batch that stops part-way reports how many it processed: a full hash map fails with
/// E2BIG at the first new key, after the overwrites before it.
#[test]
fn update_batch_reports_processed_count_when_map_is_full() -> Result<()> {
    crate::require!(Feature::Batch(bpf_map_type::BPF_MAP_TYPE_HASH));
    let m = TestMap::new(Hash, 4, 8, 8)?;
    m.fill(8)?;
    let b = m.batch()?;
    let ids = [0, 1, 2, 100, 3];
    let r = b.update_batch(&keys_of(&m, ids), &values_of(&m, ids), Flags::default());
    assert_eq!(
        r,
        Err(BatchError::Os {
            errno: libc::E2BIG,
            processed: 3
        })
    );
    assert!(m.lookup(&m.key(100))?.is_none());
    Ok(())
}

#[test_case(Hash ; "hash")]
#[test_case(PercpuHash ; "percpu_hash")]
#[test_case(LruHash ; "lru_hash")]
#[test_case(LruPercpuHash ; "lru_percpu_hash")]
fn delete_batch_removes_exactly_the_given_keys(kind: Kind) -> Result<()> {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 256)?;
    let mut expected = m.fill(200)?;
    let gone: Vec<u32> = (0..200).filter(|i| i % 3 == 1).collect();
    let b = m.batch()?;
    let done = b
        .delete_batch(&keys_of(&m, gone.iter().copied()), Flags::default())
        .context("delete batch")?;
    assert_eq!(done as usize, gone.len());
    for i in &gone {
        expected.remove(&m.key(*i));
    }
    assert!(
        m.walk()? == expected,
        "delete batch removed other keys or missed some"
    );
    Ok(())
}

#[test]
fn delete_batch_stops_at_a_missing_key_with_enoent() -> Result<()> {
    crate::require!(Feature::Batch(bpf_map_type::BPF_MAP_TYPE_HASH));
    let m = TestMap::new(Hash, 4, 8, 64)?;
    m.fill(10)?;
    let b = m.batch()?;
    let ids = [1, 2, 50, 3];
    let r = b.delete_batch(&keys_of(&m, ids), Flags::default());
    assert_eq!(r, Err(BatchError::NotFound { processed: 2 }));
    assert!(
        m.lookup(&m.key(2))?.is_none(),
        "key before the missing one kept"
    );
    assert!(
        m.lookup(&m.key(3))?.is_some(),
        "key after the missing one deleted"
    );
    Ok(())
}
