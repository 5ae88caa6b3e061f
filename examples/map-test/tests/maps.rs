//! Creates BPF maps with aya from userspace and checks what the kernel stores: needs root and
//! a BPF-capable kernel, which is what the runner provides.
use aya::maps::{HashMap, Map, MapData, MapError};
use aya::sys::SyscallError;

/// A hash map of `max_entries` u32 -> u64, created with the `bpf(BPF_MAP_CREATE)` aya issues.
fn hash_map(max_entries: u32) -> HashMap<MapData, u32, u64> {
    let obj = aya_obj::Map::new_from_params(
        aya_obj::generated::bpf_map_type::BPF_MAP_TYPE_HASH as u32,
        4,
        8,
        max_entries,
        0,
    );
    let data = MapData::create(obj, "example", None).expect("create a hash map (root?)");
    HashMap::try_from(Map::HashMap(data)).expect("a hash map")
}

#[test]
fn hash_map_keeps_what_is_inserted() {
    let mut map = hash_map(16);
    map.insert(1, 100, 0).unwrap();
    map.insert(2, 200, 0).unwrap();
    assert_eq!(map.get(&1, 0).unwrap(), 100);
    assert_eq!(map.get(&2, 0).unwrap(), 200);
    assert!(map.get(&3, 0).is_err());
}

/// A full hash map refuses a new key with E2BIG: `alloc_htab_elem` (kernel/bpf/hashtab.c)
/// returns -E2BIG when no preallocated element is left (or the count passes `max_entries`).
/// Assert the errno, not just that an error came back: any error would pass that.
#[test]
fn a_full_hash_map_refuses_a_new_key() {
    let mut map = hash_map(2);
    map.insert(1, 1, 0).unwrap();
    map.insert(2, 2, 0).unwrap();
    match map.insert(3, 3, 0) {
        Err(MapError::SyscallError(SyscallError { call, io_error })) => {
            assert_eq!(call, "bpf_map_update_elem");
            assert_eq!(io_error.raw_os_error(), Some(libc::E2BIG), "{io_error}");
        }
        other => panic!("expected E2BIG from bpf_map_update_elem, got {other:?}"),
    }
    map.insert(1, 10, 0).unwrap();
    assert_eq!(map.get(&1, 0).unwrap(), 10, "an existing key still updates");
}

#[test]
fn runs_as_root_in_the_guest() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0);
}
