//! Batches while another thread changes the map. Each test shows the two threads overlapped:
//! the changer counts its steps, and the dumping thread samples the count at every entry; a
//! sample strictly between none and all means the dump ran while the map was changing.
//!
//! The other thread's single-element syscalls are the point here (thousands per round, at least
//! [`MIN_ROUNDS`] rounds: a second or two per case under TCG); the fills before them are one
//! update batch each.
use super::*;
use bpfvm_common::protocol::NOT_JUDGED;
use std::sync::atomic::{AtomicU32, Ordering};
use test_case::test_case;

/// Rounds a concurrency test runs at least, and at most while no round has overlapped.
const MIN_ROUNDS: usize = 3;
const MAX_ROUNDS: usize = 20;

/// Counts the rounds in which the dump saw the other thread part-way.
#[derive(Default)]
struct Overlap {
    rounds: usize,
    overlapped: usize,
}

impl Overlap {
    fn record(&mut self, mid: bool) {
        self.rounds += 1;
        self.overlapped += usize::from(mid);
    }

    fn enough(&self) -> bool {
        self.rounds >= MIN_ROUNDS && self.overlapped > 0
    }

    /// Ends a test none of whose rounds overlapped as not judged: its checks then proved
    /// nothing, and the host, not the kernel, did not run the two threads at once (a host
    /// that stalled qemu for seconds did so for 20 rounds).
    fn check(&self) -> Result<()> {
        assert!(
            self.overlapped > 0,
            "{NOT_JUDGED} in {} rounds the dump never saw the other thread part-way: the host \
             did not run both threads at once, so the checks proved nothing",
            self.rounds
        );
        eprintln!("{} of {} rounds overlapped", self.overlapped, self.rounds);
        Ok(())
    }
}

/// Whether the other thread has done some but not all of its `total` steps.
fn part_way(done: &AtomicU32, total: u32) -> bool {
    let d = done.load(Ordering::Relaxed);
    d > 0 && d < total
}

/// Shuffles `v` with a xorshift seeded by `seed` (deterministic per round).
fn scramble<T>(v: &mut [T], seed: u64) {
    let mut x = 0x2545_f491_4f6c_dd1du64 ^ seed;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
}

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
    let mut overlap = Overlap::default();
    for round in 0..MAX_ROUNDS {
        if overlap.enough() {
            break;
        }
        let m = Arc::new(TestMap::new(kind, 4, 8, 4096)?);
        m.fill_in_one_batch(N)?;
        let inserted = m.contents(N);
        // Delete keys with i % 3 != 0, in a scrambled order.
        let mut doomed: Vec<u32> = (0..N).filter(|i| i % 3 != 0).collect();
        scramble(&mut doomed, round as u64);
        let total = doomed.len() as u32;
        let (start, done) = (Arc::new(Barrier::new(2)), Arc::new(AtomicU32::new(0)));
        let deleter = {
            let (m, start, done) = (Arc::clone(&m), Arc::clone(&start), Arc::clone(&done));
            std::thread::spawn(move || {
                start.wait();
                for i in doomed {
                    m.delete(&m.key(i)).expect("delete");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        let b = m.batch()?;
        let mut got = Contents::new();
        let mut dump = b.dump(buffer);
        let mut mid = false;
        start.wait();
        // Each entry is new or a duplicate (a failure), so the dump cannot outlast N entries.
        for entry in &mut dump {
            mid |= part_way(&done, total);
            let (k, v) = entry.context("dump during deletes")?;
            assert_eq!(inserted.get(&k), Some(&v), "unknown key or wrong value");
            assert!(got.insert(k.clone(), v).is_none(), "{k:?} returned twice");
        }
        deleter
            .join()
            .map_err(|_| anyhow::anyhow!("the deleter thread panicked"))?;
        overlap.record(mid);
        let stats = dump.stats();
        eprintln!(
            "{kind:?} buffer {buffer} round {round}: {} returned, deleter seen part-way: {mid}, \
             {stats:?}",
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
    overlap.check()
}

/// An array under concurrent updates: `generic_map_lookup_batch` (kernel/bpf/syscall.c) walks
/// indices with `array_map_get_next_key` (kernel/bpf/arraymap.c) and copies each value with
/// `bpf_map_copy_value`. An array's keys never vanish, so every index comes back exactly once
/// and in order, and each 8-byte value is the old or the new one.
#[test_case(1 ; "buffer_1")]
#[test_case(7 ; "buffer_7")]
#[test_case(230 ; "buffer_230")]
fn array_dump_during_updates_returns_every_index_once_in_order(buffer: u32) -> Result<()> {
    crate::require!(Feature::Batch(bpf_map_type::BPF_MAP_TYPE_ARRAY));
    const N: u32 = 4096;
    let mut overlap = Overlap::default();
    for round in 0..MAX_ROUNDS {
        if overlap.enough() {
            break;
        }
        let m = Arc::new(TestMap::new(Array, 4, 8, N)?);
        m.fill_in_one_batch(N)?;
        let new_value = |m: &TestMap, i: u32| m.value(i ^ 0x00ff_0000);
        let mut order: Vec<u32> = (0..N).collect();
        scramble(&mut order, round as u64);
        let (start, done) = (Arc::new(Barrier::new(2)), Arc::new(AtomicU32::new(0)));
        let updater = {
            let (m, start, done) = (Arc::clone(&m), Arc::clone(&start), Arc::clone(&done));
            std::thread::spawn(move || {
                start.wait();
                for i in order {
                    m.update(&m.key(i), &new_value(&m, i), BPF_EXIST)
                        .expect("update");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        let b = m.batch()?;
        let mut next = 0u32;
        let mut mid = false;
        start.wait();
        for entry in b.dump(buffer) {
            mid |= part_way(&done, N);
            let (k, v) = entry.context("dump during updates")?;
            assert!(next < N, "the dump returned more than {N} entries");
            assert_eq!(k, m.key(next), "index {next} out of order or missing");
            assert!(
                v == m.value(next) || v == new_value(&m, next),
                "index {next}: neither the old nor the new value"
            );
            next += 1;
        }
        updater
            .join()
            .map_err(|_| anyhow::anyhow!("the updater thread panicked"))?;
        assert_eq!(next, N, "indices returned");
        overlap.record(mid);
    }
    overlap.check()
}

/// An LPM trie under concurrent deletes, on the generic path: `generic_map_lookup_batch` walks
/// with `trie_get_next_key` (kernel/bpf/lpm_trie.c), which restarts from the first key when the
/// key it is given is gone (deleted since it was copied), and skips an entry deleted between
/// get_next_key and the copy ("bpf: skip non exist keys in generic_map_lookup_batch"). So a key
/// may come back more than once, but each with its own value, the dump ends without error (no
/// EINTR), and once the deletes are done a dump holds exactly the survivors.
///
/// A survivor may be *missed* by the dump during the deletes: seen on 7.2 (prefix 1578 of 2000,
/// buffer 7, one run of three cases), not on 6.1 or 6.12. `trie_get_next_key` walks under RCU
/// alone; when the key beside the last one copied is deleted, `trie_delete_elem` relinks the
/// copied key to its grandparent, so the walk's `parent->child[0] == node` test fails one level
/// up and the walk skips that parent's right subtree (a reading of the source, not confirmed).
/// The test counts such misses and prints them rather than failing on them.
#[test_case(1 ; "buffer_1")]
#[test_case(7 ; "buffer_7")]
#[test_case(230 ; "buffer_230")]
fn lpm_dump_during_deletes_ends_and_then_holds_the_survivors(buffer: u32) -> Result<()> {
    use bpf_map_type::BPF_MAP_TYPE_LPM_TRIE;
    crate::require!(Feature::Batch(BPF_MAP_TYPE_LPM_TRIE));
    const N: u32 = 2000;
    let key = |i: u32| {
        let [_, a, b, c] = i.to_be_bytes();
        lpm_key(32, [10, a, b, c])
    };
    let mut overlap = Overlap::default();
    for round in 0..MAX_ROUNDS {
        if overlap.enough() {
            break;
        }
        let m = Arc::new(TestMap::create(
            BPF_MAP_TYPE_LPM_TRIE,
            8,
            4,
            N,
            aya_obj::generated::BPF_F_NO_PREALLOC,
        )?);
        let inserted: Contents = (0..N).map(|i| (key(i), i.to_ne_bytes().to_vec())).collect();
        let keys: Vec<u8> = inserted.keys().flatten().copied().collect();
        let values: Vec<u8> = inserted.values().flatten().copied().collect();
        m.update_in_one_batch(&keys, &values)
            .context("insert the prefixes")?;
        let mut doomed: Vec<u32> = (0..N).filter(|i| i % 3 != 0).collect();
        scramble(&mut doomed, round as u64);
        let total = doomed.len() as u32;
        let (start, done) = (Arc::new(Barrier::new(2)), Arc::new(AtomicU32::new(0)));
        let deleter = {
            let (m, start, done) = (Arc::clone(&m), Arc::clone(&start), Arc::clone(&done));
            std::thread::spawn(move || {
                start.wait();
                for i in doomed {
                    m.delete(&key(i)).expect("delete");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        let b = m.batch()?;
        let mut got = Contents::new();
        let (mut returned, mut mid) = (0u32, false);
        start.wait();
        for entry in b.dump(buffer) {
            mid |= part_way(&done, total);
            let (k, v) = entry.context("dump during deletes")?;
            assert_eq!(inserted.get(&k), Some(&v), "unknown key or wrong value");
            got.insert(k, v);
            returned += 1;
            // Each restart needs a delete of the key just copied: far fewer than N of them.
            assert!(
                returned < 20 * N,
                "the dump has not ended after {returned} entries"
            );
        }
        deleter
            .join()
            .map_err(|_| anyhow::anyhow!("the deleter thread panicked"))?;
        overlap.record(mid);
        let survivors: Contents = inserted
            .iter()
            .filter(|(_, v)| u32::from_ne_bytes(v[..4].try_into().expect("4 bytes")) % 3 == 0)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let missed = survivors.keys().filter(|k| !got.contains_key(*k)).count();
        eprintln!(
            "LPM buffer {buffer} round {round}: {returned} returned ({} distinct), {missed} \
             survivors missed, deleter seen part-way: {mid}",
            got.len()
        );
        let (after, _) = dump_all(&b, buffer)?;
        assert!(
            after == survivors,
            "the dump after the deletes differs from the survivors"
        );
    }
    overlap.check()
}
