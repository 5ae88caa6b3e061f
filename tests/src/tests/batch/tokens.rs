//! Hash map resume tokens (bucket indices) and ENOSPC, `__htab_map_lookup_and_delete_batch` in
//! kernel/bpf/hashtab.c.
use super::*;
use test_case::test_case;

/// A hash map's token is the index of the next bucket to read: it only grows, and stays below
/// the bucket count (max_entries rounded up to a power of two).
#[test]
fn hash_tokens_are_increasing_bucket_indices() -> Result<()> {
    crate::require!(Feature::Batch(bpf_map_type::BPF_MAP_TYPE_HASH));
    let m = TestMap::new(Hash, 4, 8, 1000)?;
    m.fill(800)?;
    let b = m.batch()?;
    let mut token = None;
    let mut last = 0;
    loop {
        let r = b
            .lookup_batch(token.as_ref(), 64, Flags::default())
            .context("lookup batch")?;
        let Some(next) = r.next else { break };
        assert!(
            next.bucket() > last,
            "bucket {} after {last}",
            next.bucket()
        );
        assert!(next.bucket() < 1024, "bucket {} of 1024", next.bucket());
        last = next.bucket();
        token = Some(next);
    }
    Ok(())
}

/// A hash map with two buckets (max_entries 2): keep key 0 and try second keys until both share
/// the first non-empty bucket, which a lookup batch of count 1 then reports as ENOSPC. Each
/// try collides with probability 1/2 (random seed), so 64 tries fail with 2^-64.
#[test_case(Hash ; "hash")]
#[test_case(PercpuHash ; "percpu_hash")]
#[test_case(LruHash ; "lru_hash")]
#[test_case(LruPercpuHash ; "lru_percpu_hash")]
fn buffer_smaller_than_first_bucket_gives_enospc(kind: Kind) -> Result<()> {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 2)?;
    m.fill(1)?;
    let b = m.batch()?;
    let mut found = None;
    for i in 1..=64 {
        m.update(&m.key(i), &m.value(i), BPF_NOEXIST)
            .context("insert second key")?;
        match b.lookup_batch(None, 1, Flags::default()) {
            Err(e) => {
                assert_eq!(
                    e,
                    BatchError::NoSpace { processed: 0 },
                    "count 1, bucket of 2"
                );
                found = Some(i);
                break;
            }
            Ok(r) => {
                assert_eq!(
                    r.entries.len(),
                    1,
                    "count 1 returned {} entries",
                    r.entries.len()
                );
                m.delete(&m.key(i)).context("delete second key")?;
            }
        }
    }
    let Some(i) = found else {
        anyhow::bail!("64 second keys never shared a bucket with key 0 in a 2-bucket map");
    };
    assert!(m.lookup(&m.key(0))?.is_some(), "key 0 evicted");
    // Count 2 takes the whole bucket.
    let r = b
        .lookup_batch(None, 2, Flags::default())
        .context("count 2")?;
    assert_eq!(r.entries.len(), 2);
    // The dumper grows its buffer for that call and still returns both, once.
    let (got, stats) = dump_all(&b, 1)?;
    assert_eq!(got, m.walk()?);
    assert_eq!(got.len(), 2);
    assert!(stats.enospc_retries >= 1, "{stats:?}");
    eprintln!("{kind:?}: key 0 and key {i} share a bucket; dump stats {stats:?}");
    Ok(())
}

/// `__htab_map_lookup_and_delete_batch` checks the token first: a bucket index at or past
/// `n_buckets` (max_entries 100 rounded up to 128) is ENOENT with count 0, for lookups and
/// lookup-and-delete alike, and nothing is deleted. The last bucket (127) is a valid start.
#[test_case(Hash ; "hash")]
#[test_case(PercpuHash ; "percpu_hash")]
#[test_case(LruHash ; "lru_hash")]
#[test_case(LruPercpuHash ; "lru_percpu_hash")]
fn token_past_the_last_bucket_gives_enoent_with_nothing(kind: Kind) -> Result<()> {
    crate::require!(Feature::Batch(kind.map_type()));
    let m = TestMap::new(kind, 4, 8, 100)?;
    let mut before = m.fill(60)?;
    let b = m.batch()?;
    let token = |bucket: u32| Token::from_bytes(&bucket.to_ne_bytes(), m.layout.token_len());
    let from_last = || {
        b.lookup_batch(Some(&token(127)), 128, Flags::default())
            .context("lookup from the last bucket")
    };
    // 60 keys leave bucket 127 empty in 63 % of maps (the seed is random): add keys one at a
    // time, removing each that lands elsewhere, until one lands there. Each does with
    // probability 1/128: 4000 misses in a row happen with probability 2e-14.
    let mut last = from_last()?;
    let mut i = 60;
    while last.entries.is_empty() {
        anyhow::ensure!(i < 4060, "4000 keys never landed in bucket 127 of 128");
        let (k, v) = (m.key(i), m.value(i));
        m.update(&k, &v, BPF_NOEXIST)
            .with_context(|| format!("insert key {i}"))?;
        last = from_last()?;
        if last.entries.is_empty() {
            m.delete(&k).with_context(|| format!("delete key {i}"))?;
        } else {
            before.insert(k, v);
        }
        i += 1;
    }
    assert!(last.end, "a batch from the last bucket ends there");
    for (k, v) in last.entries.iter() {
        assert_eq!(before.get(k).map(Vec::as_slice), Some(v), "key {k:?}");
    }
    for bucket in [128, 129, u32::MAX] {
        let r = b
            .lookup_batch(Some(&token(bucket)), 16, Flags::default())
            .with_context(|| format!("lookup from bucket {bucket}"))?;
        assert!(r.end && r.entries.is_empty(), "lookup from bucket {bucket}");
        let r = b
            .lookup_and_delete_batch(Some(&token(bucket)), 16, Flags::default())
            .with_context(|| format!("lookup and delete from bucket {bucket}"))?;
        assert!(
            r.end && r.entries.is_empty(),
            "lookup and delete from {bucket}"
        );
    }
    assert_eq!(m.walk()?, before, "a batch past the end changed the map");
    Ok(())
}

/// The number of entries in each bucket of a hash map of `n_buckets`: a lookup batch from
/// bucket `i` with room for the whole map returns buckets `i..` (and ENOENT), so bucket `i`
/// holds the difference between the batches from `i` and from `i + 1`.
fn bucket_sizes(b: &BatchMap<&MapFd>, n_buckets: u32) -> Result<Vec<usize>> {
    let len = b.layout().token_len();
    let tail = (0..n_buckets)
        .map(|i| {
            let r = b
                .lookup_batch(
                    Some(&Token::from_bytes(&i.to_ne_bytes(), len)),
                    1024,
                    Flags::default(),
                )
                .with_context(|| format!("lookup from bucket {i}"))?;
            anyhow::ensure!(
                r.end,
                "a batch of 1024 from bucket {i} did not reach the end"
            );
            Ok(r.entries.len())
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((0..tail.len())
        .map(|i| tail[i] - tail.get(i + 1).copied().unwrap_or(0))
        .collect())
}

/// `__htab_map_lookup_and_delete_batch` (kernel/bpf/hashtab.c) ends a call at the first bucket
/// that does not fit in the room left, and returns ENOSPC only when it copied nothing
/// (`if (total == 0) ret = -ENOSPC`): after a partial copy the call succeeds with the partial
/// count and the token at that bucket, from which a call of the same size then gives ENOSPC.
/// The layout is found by trying fresh maps (random seeds) of 8 buckets holding 6 keys until
/// a bucket of one key is followed, past empty buckets, by one of two or more: a try finds one
/// with probability about 1/2, so 64 tries all miss with probability about 2^-64.
#[test_case(Hash ; "hash")]
#[test_case(PercpuHash ; "percpu_hash")]
#[test_case(LruHash ; "lru_hash")]
#[test_case(LruPercpuHash ; "lru_percpu_hash")]
fn bucket_that_does_not_fit_after_a_partial_copy_ends_the_call_with_success(
    kind: Kind,
) -> Result<()> {
    crate::require!(Feature::Batch(kind.map_type()));
    for attempt in 0..64 {
        let m = TestMap::new(kind, 4, 8, 8)?;
        let contents = m.fill(6)?;
        let b = m.batch()?;
        let sizes = bucket_sizes(&b, 8)?;
        assert_eq!(sizes.iter().sum::<usize>(), 6, "bucket sizes {sizes:?}");
        let nonempty: Vec<(u32, usize)> = (0u32..)
            .zip(sizes.iter().copied())
            .filter(|(_, n)| *n > 0)
            .collect();
        let Some(pair) = nonempty.windows(2).find(|w| w[0].1 == 1 && w[1].1 >= 2) else {
            continue;
        };
        let ((one, _), (big, big_len)) = (pair[0], pair[1]);
        let token = |i: u32| Token::from_bytes(&i.to_ne_bytes(), b.layout().token_len());
        let r = b
            .lookup_batch(Some(&token(one)), 2, Flags::default())
            .with_context(|| format!("count 2 from bucket {one} (sizes {sizes:?})"))?;
        assert!(!r.end, "sizes {sizes:?}: the call must stop before the end");
        assert_eq!(
            r.entries.len(),
            1,
            "sizes {sizes:?}: the one-key bucket only"
        );
        let (k, v) = r.entries.iter().next().expect("one entry");
        assert_eq!(contents.get(k).map(Vec::as_slice), Some(v));
        let next = r.next.context("a successful batch has a token")?;
        assert_eq!(
            next.bucket(),
            big,
            "sizes {sizes:?}: token at the bucket that did not fit"
        );
        let r = b.lookup_batch(Some(&next), 1, Flags::default());
        assert_eq!(
            r.err(),
            Some(BatchError::NoSpace { processed: 0 }),
            "sizes {sizes:?}: count 1 from the bucket of {big_len}"
        );
        eprintln!("{kind:?}: found on attempt {attempt}, bucket sizes {sizes:?}");
        return Ok(());
    }
    anyhow::bail!("64 maps never had a bucket of one key followed by a bucket of two or more")
}
