//! Batches while another thread changes the map.
use super::*;
use test_case::test_case;

/// Entries deleted during a dump come back once or not at all, survivors exactly once, and the
/// dump ends. Any error fails, EINTR included: hash batches copy each bucket under its lock
/// (`__htab_map_lookup_and_delete_batch`, kernel/bpf/hashtab.c) and have no EINTR path.
#[test_case(Hash, 1 ; "hash_buffer_1")]
#[test_case(Hash, 7 ; "hash_buffer_7")]
#[test_case(Hash, 230 ; "hash_buffer_230")]
#[test_case(PercpuHash, 7 ; "percpu_hash_buffer_7")]
#[test_case(LruHash, 7 ; "lru_hash_buffer_7")]
fn concurrent_deletes_return_entries_once_or_not_at_all(kind: Kind, buffer: u32) -> Result<()> {
    crate::require!(Feature::Batch(kind.map_type()));
    const N: u32 = 3000;
    const ROUNDS: usize = 3;
    for round in 0..ROUNDS {
        let m = Arc::new(TestMap::new(kind, 4, 8, 4096)?);
        let inserted = m.fill(N)?;
        // Delete keys with i % 3 != 0, in a scrambled order.
        let mut doomed: Vec<u32> = (0..N).filter(|i| i % 3 != 0).collect();
        let mut x = 0x2545_f491_4f6c_dd1du64 ^ round as u64;
        for i in (1..doomed.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            doomed.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let start = Arc::new(Barrier::new(2));
        let deleter = {
            let (m, start) = (Arc::clone(&m), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                for i in doomed {
                    m.delete(&m.key(i)).expect("delete");
                }
            })
        };
        let b = m.batch()?;
        let mut got = Contents::new();
        let mut dump = b.dump(buffer);
        start.wait();
        // Each entry is new or a duplicate (a panic), so the dump cannot outlast N entries.
        for entry in &mut dump {
            let (k, v) = entry.context("dump during deletes")?;
            assert_eq!(inserted.get(&k), Some(&v), "unknown key or wrong value");
            assert!(got.insert(k.clone(), v).is_none(), "{k:?} returned twice");
        }
        deleter
            .join()
            .map_err(|_| anyhow::anyhow!("the deleter thread panicked"))?;
        let stats = dump.stats();
        eprintln!(
            "{kind:?} buffer {buffer} round {round}: {} returned, {stats:?}",
            got.len()
        );
        // Keys nobody deleted stay in their buckets: every one is returned.
        for i in (0..N).filter(|i| i % 3 == 0) {
            assert!(
                got.contains_key(&m.key(i)),
                "surviving key {i} missing from the dump"
            );
        }
    }
    Ok(())
}
