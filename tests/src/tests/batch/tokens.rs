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
    let before = m.fill(60)?;
    let b = m.batch()?;
    let token = |bucket: u32| Token::from_bytes(&bucket.to_ne_bytes(), m.layout.token_len());
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
    let r = b
        .lookup_batch(Some(&token(127)), 128, Flags::default())
        .context("lookup from the last bucket")?;
    assert!(r.end, "a batch from the last bucket ends there");
    for i in 0..r.entries.len() {
        assert_eq!(
            before.get(r.entries.key(i)).map(Vec::as_slice),
            Some(r.entries.value(i))
        );
    }
    Ok(())
}
