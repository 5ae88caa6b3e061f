//! Loads the example's own BPF program (`ebpf/src/counter.rs`, built by build.rs) and runs it
//! with BPF_PROG_TEST_RUN: it keeps every packet whole and counts them in its map.
use aya::maps::Array;
use aya::programs::{SocketFilter, TestRun, TestRunOptions};
use aya::Ebpf;

static COUNTER: &[u8] = aya::include_bytes_aligned!(concat!(env!("MAP_TEST_EBPF_DIR"), "/counter"));

#[test]
fn the_filter_counts_each_packet_it_runs_on() {
    let mut bpf = Ebpf::load(COUNTER).expect("load the object (root?)");
    let prog: &mut SocketFilter = bpf
        .program_mut("count_packets")
        .expect("the program")
        .try_into()
        .expect("a socket filter");
    prog.load().expect("the verifier accepts it");
    // An skb test run needs at least an Ethernet header of data (net/bpf/test_run.c).
    let packet = [0u8; 64];
    for _ in 0..3 {
        let run = prog
            .test_run(TestRunOptions {
                data_in: Some(&packet),
                ..Default::default()
            })
            .expect("BPF_PROG_TEST_RUN");
        // The test run pulls the Ethernet header (eth_type_trans), so the skb the filter sees,
        // and keeps whole, is the rest.
        assert_eq!(
            run.return_value,
            64 - 14,
            "the filter keeps the whole packet"
        );
    }
    let packets: Array<_, u64> = Array::try_from(bpf.map("PACKETS").expect("the map")).unwrap();
    assert_eq!(packets.get(&0, 0).unwrap(), 3);
}
