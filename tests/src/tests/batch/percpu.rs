//! Per-CPU values in batches: one slot per *possible* CPU.
use super::*;
use test_case::test_case;

/// A per-CPU value in a batch buffer is `nr_cpu_ids` slots of `round_up(value_size, 8)`
/// (`bpf_map_value_size` in kernel/bpf/syscall.c; `bpf_percpu_hash_copy` and
/// `bpf_percpu_array_copy` copy `for_each_possible_cpu`), not one per online CPU. `vm-test`
/// boots more possible than online CPUs (`maxcpus=`, vm/src/run.rs) so that a layout by the
/// online count fails here; the test fails outright if the guest has as many online as
/// possible, since it then proves nothing. Update and lookup batches carry every slot, those of
/// CPUs that were never online included, each with its own pattern.
#[test_case(PercpuHash ; "percpu_hash")]
#[test_case(LruPercpuHash ; "lru_percpu_hash")]
#[test_case(PercpuArray ; "percpu_array")]
fn percpu_values_have_a_slot_per_possible_cpu(kind: Kind) -> Result<()> {
    crate::require!(Feature::Batch(kind.map_type()));
    let possible = features::possible_cpus().context("possible CPUs")?;
    let online = aya::util::online_cpus()
        .map_err(|(_, e)| e)
        .context("online CPUs")?
        .len();
    assert!(
        possible > online,
        "the guest has {possible} possible and {online} online CPUs: boot it with more possible \
         than online (vm-test passes maxcpus=)"
    );
    let m = TestMap::new(kind, 4, 12, 64)?;
    let b = m.batch()?;
    assert_eq!(b.layout().slots, possible, "slots per value");
    assert_eq!(b.layout().value_stride(), possible * 16, "value stride");
    pin_for_lru()?;
    let n = if kind.is_array() { 64 } else { 40 };
    let written = b
        .update_batch(&keys_of(&m, 0..n), &values_of(&m, 0..n), Flags::default())
        .context("update batch")?;
    assert_eq!(written, n);
    let expected: Contents = (0..n).map(|i| (m.key(i), m.value(i))).collect();
    // The element command reads every possible CPU's slot too (`bpf_percpu_*_copy`).
    assert!(
        m.walk()? == expected,
        "element lookups differ from the batch written"
    );
    let (got, _) = dump_all(&b, 7)?;
    assert!(
        got == expected,
        "batch lookups differ from the batch written"
    );
    let offline = m.value(0)[online * 16..].to_vec();
    assert!(
        offline.iter().any(|&x| x != 0),
        "the test pattern gives offline CPUs' slots non-zero bytes"
    );
    Ok(())
}
