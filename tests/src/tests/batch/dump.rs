//! Whole-map dumps and the sizes of a batch: every entry once, with its value.
use super::*;
use rstest::rstest;
use test_case::test_case;

/// The dump grid's map size, and its two buffer sizes named for it (rstest names each case by
/// the expression: `buffer_5_MAX_ENTRIES`).
const MAX_ENTRIES: u32 = 1000;
const MORE_THAN_MAX_ENTRIES: u32 = MAX_ENTRIES + MAX_ENTRIES / 2 + 1;

/// A batch dump returns every entry once, with its value (all possible CPUs): exactly the keys
/// and values inserted. Hash maps are 80 % full (800 of 1000): with buffers 1 and 2 some bucket
/// holds more keys than fit, so the dumper must grow and retry (ENOSPC). Only when the dump
/// differs does the test walk the map (get_next_key + lookup, two syscalls per entry) to say
/// whether the fill or the dump went wrong.
#[rstest]
fn dump_equals_contents(
    #[values(Hash, PercpuHash, LruHash, LruPercpuHash, Array, PercpuArray)] kind: Kind,
    #[values(1, 2, 7, 230, MAX_ENTRIES, MORE_THAN_MAX_ENTRIES)] buffer: u32,
) -> Result<()> {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, MAX_ENTRIES)?;
    let n = if kind.is_array() {
        MAX_ENTRIES
    } else {
        MAX_ENTRIES * 8 / 10
    };
    m.fill_in_one_batch(n)?;
    let expected = m.contents(n);
    let (got, stats) = dump_all(&m.batch()?, buffer)?;
    eprintln!("{kind:?} buffer {buffer}: {stats:?}");
    if got != expected {
        let walk = m.walk()?;
        assert_eq!(
            walk, expected,
            "get_next_key + lookup walk differs from what was inserted"
        );
        assert_eq!(got.len(), expected.len(), "entries dumped");
        assert_eq!(got, walk, "batch dump differs from the walk");
    }
    if kind.is_array() {
        assert_eq!(
            stats.enospc_retries, 0,
            "arrays use key tokens: never ENOSPC"
        );
    }
    if buffer >= n {
        assert_eq!(
            stats.enospc_retries, 0,
            "a buffer of the whole map always fits"
        );
    }
    Ok(())
}

#[test_case(Hash ; "hash")]
#[test_case(PercpuHash ; "percpu_hash")]
#[test_case(LruHash ; "lru_hash")]
#[test_case(LruPercpuHash ; "lru_percpu_hash")]
fn empty_map_gives_enoent_with_count_0(kind: Kind) -> Result<()> {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 64)?;
    let b = m.batch()?;
    let r = b
        .lookup_batch(None, 16, Flags::default())
        .context("lookup batch")?;
    assert!(r.end, "an empty map must end at once (ENOENT)");
    assert!(r.next.is_none());
    assert_eq!(r.entries.len(), 0);
    let r = b
        .lookup_and_delete_batch(None, 16, Flags::default())
        .context("lookup and delete")?;
    assert!(r.end && r.entries.is_empty());
    assert_eq!(b.dump(1).count(), 0);
    Ok(())
}

#[test_case(Hash ; "hash")]
#[test_case(PercpuHash ; "percpu_hash")]
#[test_case(LruHash ; "lru_hash")]
#[test_case(LruPercpuHash ; "lru_percpu_hash")]
#[test_case(Array ; "array")]
#[test_case(PercpuArray ; "percpu_array")]
fn count_0_gives_success_and_nothing(kind: Kind) -> Result<()> {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 64)?;
    let before = m.fill(40)?;
    let b = m.batch()?;
    let r = b
        .lookup_batch(None, 0, Flags::default())
        .context("lookup batch, count 0")?;
    assert!(!r.end, "count 0 returns success, not ENOENT");
    assert!(r.entries.is_empty());
    if !kind.is_array() {
        let r = b
            .lookup_and_delete_batch(None, 0, Flags::default())
            .context("lookup+delete, count 0")?;
        assert!(!r.end && r.entries.is_empty());
        assert_eq!(b.delete_batch(&[], Flags::default()), Ok(0));
    }
    assert_eq!(b.update_batch(&[], &[], Flags::default()), Ok(0));
    let after = m.walk()?;
    if kind.is_array() {
        assert_eq!(after.len(), 64);
        assert!(before.iter().all(|(k, v)| after.get(k) == Some(v)));
    } else {
        assert_eq!(after, before, "count 0 changed the map");
    }
    Ok(())
}

#[test_case(10_000, 100, 64 ; "percent_1")]
#[test_case(10_000, 1_000, 64 ; "percent_10")]
#[test_case(10_000, 5_000, 64 ; "percent_50")]
#[test_case(131_072, 100_000, 4_096 ; "entries_100000")]
fn partially_filled_hash_dumps_completely(max_entries: u32, n: u32, buffer: u32) -> Result<()> {
    crate::require!(Feature::Batch(bpf_map_type::BPF_MAP_TYPE_HASH));
    let m = TestMap::new(Hash, 4, 8, max_entries)?;
    m.fill_in_one_batch(n)?;
    // Each dumped entry checked against key `i` and its value as it comes, and marked seen:
    // the same check as comparing two maps of the contents, which cost seconds more at 100,000.
    let mut seen = vec![false; n as usize];
    let b = m.batch()?;
    let mut dump = b.dump(buffer);
    for entry in &mut dump {
        let (k, v) = entry.with_context(|| format!("dump with buffer {buffer}"))?;
        let i = u32::from_ne_bytes(k[..4].try_into().expect("4-byte key"));
        assert!(
            i < n && k == m.key(i),
            "dumped key {k:?} was never inserted"
        );
        assert!(!seen[i as usize], "dump returned key {i} twice");
        seen[i as usize] = true;
        assert!(v == m.value(i), "key {i}: the dumped value differs");
    }
    eprintln!("{n} of {max_entries}, buffer {buffer}: {:?}", dump.stats());
    let missing = seen.iter().filter(|&&s| !s).count();
    assert_eq!(missing, 0, "keys inserted but not dumped");
    Ok(())
}

#[test_case(Hash, 4, 4 ; "hash_key_4_value_4")]
#[test_case(Hash, 4, 8 ; "hash_key_4_value_8")]
#[test_case(Hash, 4, 64 ; "hash_key_4_value_64")]
#[test_case(Hash, 8, 4 ; "hash_key_8_value_4")]
#[test_case(Hash, 8, 8 ; "hash_key_8_value_8")]
#[test_case(Hash, 8, 64 ; "hash_key_8_value_64")]
#[test_case(Hash, 64, 4 ; "hash_key_64_value_4")]
#[test_case(Hash, 64, 8 ; "hash_key_64_value_8")]
#[test_case(Hash, 64, 64 ; "hash_key_64_value_64")]
#[test_case(PercpuHash, 4, 4 ; "percpu_hash_key_4_value_4")]
#[test_case(PercpuHash, 64, 64 ; "percpu_hash_key_64_value_64")]
#[test_case(LruHash, 64, 64 ; "lru_hash_key_64_value_64")]
#[test_case(LruPercpuHash, 64, 64 ; "lru_percpu_hash_key_64_value_64")]
#[test_case(Array, 4, 4 ; "array_key_4_value_4")]
#[test_case(Array, 4, 64 ; "array_key_4_value_64")]
#[test_case(PercpuArray, 4, 4 ; "percpu_array_key_4_value_4")]
#[test_case(PercpuArray, 4, 64 ; "percpu_array_key_4_value_64")]
fn key_and_value_sizes_dump_completely(
    kind: Kind,
    key_size: usize,
    value_size: usize,
) -> Result<()> {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, key_size, value_size, 256)?;
    let expected = m.fill(if kind.is_array() { 256 } else { 200 })?;
    let (got, _) = dump_all(&m.batch()?, 7)?;
    assert_eq!(got.len(), expected.len());
    assert!(
        got == expected,
        "dumped contents differ from what was inserted"
    );
    Ok(())
}

/// The last batch is ENOENT and may carry entries: a hash map ends in the call that reaches the
/// last bucket; an array ends with ENOENT only when the buffer outlasts its keys (a buffer of
/// exactly max_entries succeeds, and the next call returns ENOENT with nothing).
#[test_case(Hash ; "hash")]
#[test_case(Array ; "array")]
fn last_batch_gives_enoent_with_entries(kind: Kind) -> Result<()> {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 100)?;
    let n = if kind.is_array() { 100 } else { 60 };
    m.fill(n)?;
    let b = m.batch()?;
    let r = b
        .lookup_batch(None, 200, Flags::default())
        .context("lookup batch")?;
    assert!(r.end, "one call larger than the map must end (ENOENT)");
    assert_eq!(
        r.entries.len(),
        n as usize,
        "ENOENT still carries the entries"
    );
    if kind.is_array() {
        let r = b
            .lookup_batch(None, 100, Flags::default())
            .context("lookup batch")?;
        assert!(
            !r.end && r.entries.len() == 100,
            "exactly max_entries: success"
        );
        let r = b
            .lookup_batch(r.next.as_ref(), 100, Flags::default())
            .context("lookup batch")?;
        assert!(r.end && r.entries.is_empty(), "then ENOENT with count 0");
    }
    Ok(())
}

/// A full hash map (one more key is E2BIG) read with `count = max_entries`: one call returns
/// every entry and ENOENT, since the walk reaches the last bucket without ever meeting a bucket
/// larger than the room left (`__htab_map_lookup_and_delete_batch`); with delete, the map is
/// then empty. LRU maps are left out: filling one to exactly max_entries may evict (per-CPU
/// free lists, `bpf_lru_pop_free`).
#[test_case(Hash ; "hash")]
#[test_case(PercpuHash ; "percpu_hash")]
fn full_hash_map_drains_with_one_batch_of_max_entries(kind: Kind) -> Result<()> {
    crate::require!(Feature::Batch(kind.map_type()));
    const MAX: u32 = 1000;
    let m = TestMap::new(kind, 4, 8, MAX)?;
    let expected = m.fill(MAX)?;
    let e = m
        .update(&m.key(MAX), &m.value(MAX), BPF_ANY)
        .expect_err("insert into a full map");
    assert_eq!(e.raw_os_error(), Some(libc::E2BIG), "the map is full");
    let b = m.batch()?;
    let collect = |r: crate::maps::batch::LookupBatch| -> Contents {
        (0..r.entries.len())
            .map(|i| (r.entries.key(i).to_vec(), r.entries.value(i).to_vec()))
            .collect()
    };
    let r = b
        .lookup_batch(None, MAX, Flags::default())
        .context("lookup batch of max_entries")?;
    assert!(r.end, "one call of max_entries reaches the end (ENOENT)");
    assert_eq!(r.entries.len(), MAX as usize);
    assert!(
        collect(r) == expected,
        "looked-up entries differ from the map"
    );
    let r = b
        .lookup_and_delete_batch(None, MAX, Flags::default())
        .context("lookup and delete batch of max_entries")?;
    assert!(r.end, "one call of max_entries reaches the end (ENOENT)");
    assert_eq!(r.entries.len(), MAX as usize);
    assert!(
        collect(r) == expected,
        "drained entries differ from the map"
    );
    assert!(m.walk()?.is_empty(), "map not empty after the drain");
    Ok(())
}

/// The keys of a batch, as native u32 indices (their first 4 bytes).
fn indices(r: &crate::maps::batch::LookupBatch) -> Vec<u32> {
    r.entries
        .iter()
        .map(|(k, _)| u32::from_ne_bytes(k[..4].try_into().expect("4-byte key prefix")))
        .collect()
}

/// A call with `count = 0` copies nothing and writes no `out_batch` (`generic_map_lookup_batch`
/// and `__htab_map_lookup_and_delete_batch` return before it; the first writes `out_batch` only
/// `if cp`), so the position is where it was: from the start, the next call still begins at key
/// 0; from a token, at the key after it. A zero token would resume an array after key 0.
#[test_case(Array ; "array")]
#[test_case(PercpuArray ; "percpu_array")]
#[test_case(Hash ; "hash")]
fn count_0_leaves_the_resume_position_where_it_was(kind: Kind) -> Result<()> {
    crate::require!(Feature::Batch(kind.map_type()));
    // 16 keys in 64 hash buckets: a bucket of more than 8 (ENOSPC for count 8) has
    // probability about 4e-11.
    let m = TestMap::new(kind, 4, 8, 64)?;
    let contents = m.fill(if kind.is_array() { 64 } else { 16 })?;
    let b = m.batch()?;
    let f = Flags::default();
    let nothing = b
        .lookup_batch(None, 0, f)
        .context("count 0 from the start")?;
    assert!(!nothing.end && nothing.entries.is_empty());
    assert_eq!(nothing.next, None, "nothing read: still at the start");
    let first = b
        .lookup_batch(nothing.next.as_ref(), 8, f)
        .context("count 8 after count 0")?;
    let whole = indices(&b.lookup_batch(None, 64, f).context("count 64")?);
    let n = first.entries.len();
    assert!(n > 0, "count 8 from the start copied nothing");
    assert_eq!(
        indices(&first),
        whole[..n],
        "resuming after count 0 skipped or repeated keys"
    );
    if kind.is_array() {
        assert_eq!(indices(&first), [0, 1, 2, 3, 4, 5, 6, 7]);
    }
    let token = first
        .next
        .clone()
        .context("a token after the first batch")?;
    let still = b
        .lookup_batch(Some(&token), 0, f)
        .context("count 0 from a token")?;
    assert_eq!(still.next.as_ref(), Some(&token), "count 0 moved the token");
    let second = b
        .lookup_batch(still.next.as_ref(), 8, f)
        .context("count 8 after count 0 from a token")?;
    let next = &whole[n..(n + second.entries.len()).min(whole.len())];
    assert!(!next.is_empty(), "count 8 from the token copied nothing");
    assert_eq!(indices(&second), next, "resuming from the token");
    for (k, v) in first.entries.iter().chain(second.entries.iter()) {
        assert_eq!(contents.get(k).map(Vec::as_slice), Some(v), "key {k:?}");
    }
    Ok(())
}

/// `batch.count` as the kernel writes it back never exceeds the request: the generic lookup
/// copies while `cp < max_count` (`generic_map_lookup_batch`), the hash lookup only buckets that
/// fit in `max_count - total` (`__htab_map_lookup_and_delete_batch`); an array with enough keys
/// fills the request exactly. Read from the raw attr, not through the wrapper, which refuses a
/// larger count ([`crate::maps::batch::copied`]).
#[test_case(Array ; "array")]
#[test_case(Hash ; "hash")]
#[test_case(PercpuHash ; "percpu_hash")]
fn kernel_count_never_exceeds_the_request(kind: Kind) -> Result<()> {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 64)?;
    m.fill(64)?;
    let l = m.batch()?.layout();
    for count in [1u32, 3, 7, 20, 64] {
        let n = count as usize;
        // Room for one entry more than asked: a kernel that over-reports would write into it.
        let mut keys = vec![0u8; (n + 1) * l.key_size];
        let mut values = vec![0u8; (n + 1) * l.value_stride()];
        let mut out = vec![0u8; l.token_len()];
        let mut attr = crate::maps::batch::encode_lookup(
            m.fd().as_raw_fd() as u32,
            0,
            out.as_mut_ptr() as u64,
            keys.as_mut_ptr() as u64,
            values.as_mut_ptr() as u64,
            count,
            Flags::default(),
        );
        // SAFETY: `keys` and `values` hold `count + 1` entries of this map's layout, `out` a
        // token; all outlive the call.
        let r = unsafe { sys::bpf(bpf_cmd::BPF_MAP_LOOKUP_BATCH, &mut attr) };
        let got = crate::maps::batch::attr_count(&attr);
        match r {
            Ok(_) => {}
            // A count of 64 reaches the end of a 64-entry map: ENOENT with entries.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            // A hash bucket larger than a small count.
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) && !kind.is_array() => {
                assert_eq!(got, 0, "ENOSPC only with nothing copied");
                continue;
            }
            Err(e) => return Err(e).with_context(|| format!("lookup batch of {count}")),
        }
        assert!(got <= count, "count {count}: the kernel reported {got}");
        assert!(
            keys[n * l.key_size..].iter().all(|&b| b == 0),
            "count {count}: the kernel wrote a key past the request"
        );
        if kind.is_array() {
            assert_eq!(got, count, "an array of 64 fills a request of {count}");
        } else {
            assert!(got > 0, "count {count}: success with nothing copied");
        }
    }
    Ok(())
}
