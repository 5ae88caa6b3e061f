//! The embedded BPF objects: they load with aya 0.14, the verifier accepts every program, the
//! smoke object's bloom filter carries its `map_extra`, and its program runs through
//! `BPF_PROG_TEST_RUN`. Needs root (Debian kernels set `unprivileged_bpf_disabled=2`).
use std::os::fd::AsFd;

use anyhow::{bail, Context, Result};
use aya::maps::{HashMap, Map, MapData};
use aya::programs::SocketFilter;
use aya_obj::generated::bpf_map_info;
use bpfvm_common::smoke;

use crate::{object, sys};

fn map_info(map: &MapData) -> Result<bpf_map_info> {
    sys::map_info(map.fd().as_fd()).context("BPF_OBJ_GET_INFO_BY_FD")
}

fn map_data<'a>(ebpf: &'a aya::Ebpf, name: &str) -> Result<&'a MapData> {
    match ebpf
        .map(name)
        .with_context(|| format!("no map `{name}` in the object"))?
    {
        Map::BloomFilter(d) | Map::HashMap(d) => Ok(d),
        other => bail!("map `{name}` has an unexpected type: {other:?}"),
    }
}

/// A test case per object of `loads` in `object::with_objects`, named after it, so a kernel
/// lacking one object's features (read from the object: `features::needed_by`) skips that
/// object only.
macro_rules! load_tests {
    (
        loads { $($(#[$doc:meta])* $load:ident: $LOAD:ident,)* }
        by_hand { $($by_hand:tt)* }
    ) => {
        mod object_loads {
            $(
                #[test]
                fn $load() -> anyhow::Result<()> {
                    super::object_loads(stringify!($load))
                }
            )*
        }
        mod verifier_accepts_every_program {
            $(
                #[test]
                fn $load() -> anyhow::Result<()> {
                    super::verifier_accepts_every_program(stringify!($load))
                }
            )*
        }
    };
}
object::with_objects!(load_tests);

fn object_loads(name: &str) -> Result<()> {
    let obj = object::named(name);
    crate::require_object!(obj.bytes);
    object::load(obj.bytes).with_context(|| format!("object `{name}`"))?;
    Ok(())
}

fn verifier_accepts_every_program(name: &str) -> Result<()> {
    let obj = object::named(name);
    crate::require_object!(obj.bytes);
    let mut ebpf = object::load(obj.bytes).with_context(|| format!("object `{name}`"))?;
    let mut n = 0;
    for (prog_name, prog) in ebpf.programs_mut() {
        object::load_any(prog_name, prog).with_context(|| format!("object `{name}`"))?;
        n += 1;
    }
    assert!(n > 0, "object `{name}` has no program");
    Ok(())
}

#[test]
fn smoke_bloom_filter_carries_map_extra() -> Result<()> {
    crate::require_object!(object::SMOKE);
    let ebpf = object::load(object::SMOKE)?;
    let info = map_info(map_data(&ebpf, smoke::BLOOM)?)?;
    assert_eq!(
        info.type_,
        aya_obj::generated::bpf_map_type::BPF_MAP_TYPE_BLOOM_FILTER as u32
    );
    assert_eq!(
        info.map_extra,
        smoke::BLOOM_HASH_FUNCS as u64,
        "map_extra = nr_hash_funcs"
    );
    assert_eq!(info.max_entries, smoke::BLOOM_MAX_ENTRIES as u32);
    assert_eq!(info.key_size, 0);
    assert_eq!(info.value_size, 8);
    let hash = map_info(map_data(&ebpf, smoke::HASH)?)?;
    assert_eq!(hash.map_extra, 0);
    assert_eq!(hash.max_entries, smoke::HASH_MAX_ENTRIES as u32);
    Ok(())
}

#[test]
fn smoke_program_test_run() -> Result<()> {
    crate::require_object!(object::SMOKE);
    let mut ebpf = object::load(object::SMOKE)?;
    let prog: &mut SocketFilter = object::load_program(&mut ebpf, smoke::PROG)?;
    let res = object::test_run_packet(prog)?;
    assert_eq!(res.return_value, smoke::RETVAL);
    let hash: HashMap<_, u32, u64> =
        HashMap::try_from(ebpf.map(smoke::HASH).context("no hash map")?)?;
    assert_eq!(hash.get(&smoke::KEY_VALUE, 0)?, smoke::VALUE);
    assert_eq!(
        hash.get(&smoke::KEY_BLOOM_HIT, 0)?,
        1,
        "bloom filter holds the pushed value"
    );
    Ok(())
}

/// A program the verifier refuses (its callback reads R3, which `bpf_loop` does not pass:
/// `check_reg_arg`'s "R3 !read_ok", kernel/bpf/verifier.c): the error `object::load_program`
/// returns names the program and carries the verifier's own log line, from the kernel.
#[test]
fn verifier_rejection_carries_the_log() -> Result<()> {
    crate::require_object!(object::BPF_LOOP_REJECT);
    let prog = bpfvm_common::bpf_loop::PROG_REJECT_CALLBACK_READS_R3;
    let mut ebpf = object::load(object::BPF_LOOP_REJECT)?;
    let Err(e) = object::load_program::<SocketFilter>(&mut ebpf, prog) else {
        bail!("{prog} loaded: the verifier accepted a callback that reads R3");
    };
    let e = format!("{e:#}");
    assert!(
        e.contains(&format!("the verifier rejected program `{prog}`")),
        "{e}"
    );
    assert!(e.lines().any(|l| l.contains("R3 !read_ok")), "{e}");
    Ok(())
}
