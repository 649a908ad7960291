//! The interrupt flag ends long operations with `Interrupted`, and the topology is
//! still cleaned up. Its own test binary, because the flag is process-wide. Needs root.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use vmpls_lab::ping::{PingOptions, ping};
use vmpls_lab::topology::Topology;
use vmpls_lab::traffic::{FlowOptions, Limit, run_flow};
use vmpls_lab::{Interrupted, netns, set_interrupted};

#[test]
fn interrupt_ends_flows_and_pings_and_cleanup_still_runs() {
    let mut t = Topology::new();
    t.add_host("a").unwrap();
    t.add_host("b").unwrap();
    t.add_link("a", "a-b", "b", "b-a", 1500).unwrap();
    t.add_address("a", "a-b", "198.18.103.1/24".parse().unwrap()).unwrap();
    t.add_address("b", "b-a", "198.18.103.2/24".parse().unwrap()).unwrap();
    let names = t.namespaces();
    let dst: IpAddr = "198.18.103.2".parse().unwrap();

    let opts = FlowOptions { limit: Limit::Duration(Duration::from_secs(60)), ..FlowOptions::default() };
    let start = Instant::now();
    let err = run_flow(t.ns("a").unwrap(), t.ns("b").unwrap(), dst, &opts, &mut |p| {
        if p.elapsed > Duration::from_secs(1) {
            set_interrupted(true);
        }
    })
    .unwrap_err();
    assert!(err.chain().any(|c| c.is::<Interrupted>()), "{err:#}");
    assert!(start.elapsed() < Duration::from_secs(10), "took {:?}", start.elapsed());

    // A long ping gives up at once too.
    let long = PingOptions { count: 100, interval: Duration::from_secs(1), ..PingOptions::default() };
    let start = Instant::now();
    let err = ping(t.ns("a").unwrap(), dst, &long).unwrap_err();
    assert!(err.is::<Interrupted>(), "{err:#}");
    assert!(start.elapsed() < Duration::from_secs(2));
    set_interrupted(false);

    drop(t);
    for n in names {
        assert!(!netns::exists(&n), "{n}");
    }
}
