//! vmpls's in-kernel fast path beside the Linux kernel's own MPLS over veth, inside one
//! QEMU guest (Debian's kernel 6.1, which has MPLS GSO, `act_mpls` and `cls_fw`, so the
//! router's ports get their action chains):
//!
//! ```text
//!  netns a (kernel MPLS)                 netns r (vmpls, fast-path = "tc")       netns b
//!  lo 198.18.100.1/32                                                            b0 .2.2
//!  a0 198.18.1.2/24 ==veth== r-a 198.18.1.1 [r] r-b 198.18.2.1 ==veth== b0 198.18.2.2
//! ```
//!
//! a's kernel pushes 100 toward b's subnet (`encap mpls`) and pops 200 to itself; r pops
//! 100 and routes to b, and pushes 200 onto what b sends back to 198.18.100.0/24. The
//! labelled frames a's kernel sends are MPLS to r's kernel (a real transmit through the
//! veth), so r's chain pops them; what r pushes must reach a's kernel as MPLS too. Checked:
//! ping both ways, a TCP transfer each way (iperf3, super-frames through the veths), and
//! r's counters: the programs did the pushes and pops, the kernel's MPLS action the pops.
//! Needs root and QEMU (TCG is enough); the `vmpls` binary is copied into the guest.

mod common;

use std::path::Path;
use std::time::Duration;

use common::WorkDir;
use vmpls_guest::{ExtraFile, Guest, GuestCache, GuestConfig, GuestImage};
use vmpls_lab::stats::RouterStats;

const SCRIPT: &str = r#"
sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
# The socket filter's charge, raised here: a router in another namespace cannot.
sysctl -qw net.core.optmem_max=131072
for ns in a r b; do ip netns add $ns && ip -n $ns link set lo up || fail "netns $ns"; done
ip link add a0 netns a type veth peer name r-a netns r || fail "veth a"
ip link add b0 netns b type veth peer name r-b netns r || fail "veth b"
ip -n a link set a0 up && ip -n a addr add 198.18.1.2/24 dev a0 && ip -n a addr add 198.18.100.1/32 dev lo
ip -n b link set b0 up && ip -n b addr add 198.18.2.2/24 dev b0 && ip -n b route add default via 198.18.2.1
ip -n r link set r-a up && ip -n r link set r-b up
ip netns exec a sysctl -qw net.mpls.platform_labels=1000 net.mpls.conf.a0.input=1 || fail "mpls sysctls"
ip -n a route add 198.18.2.0/24 encap mpls 100 via 198.18.1.1 dev a0 src 198.18.100.1 || fail "encap route"
ip -n a -f mpls route add 200 dev lo || fail "mpls route"
cat > /tmp/r.toml <<'EOF'
[router]
fast-path = "tc"
name = "r"
addresses = ["198.18.255.9"]

[[port]]
name = "a"
interface = "r-a"
addresses = ["198.18.1.1/24"]

[[port]]
name = "b"
interface = "r-b"
addresses = ["198.18.2.1/24"]

[[route]]
prefix = "198.18.100.0/24"
push = [200]
via = "198.18.1.2"
port = "a"

[[label]]
in = 100
action = "pop"
EOF
ip netns exec r vmpls run --config /tmp/r.toml --socket /tmp/r.sock --stats-file /tmp/r.json > /tmp/r.log 2>&1 &
pid=$!
retry 120 sh -c '[ "$(grep -c "forwarding: " /tmp/r.log)" -ge 2 ]' || { cat /tmp/r.log > /dev/console; fail "vmpls did not start"; }
grep -i "forwarding: \|MPLS action" /tmp/r.log | while read -r line; do result "LOG $line"; done
retry 60 ip netns exec a ping -c 1 -W 1 -I 198.18.100.1 198.18.2.2 || { cat /tmp/r.log > /dev/console; result "STATS $(tr -d '\n' < /tmp/r.json)"; fail "a -> b: no answer"; }
result "PING-A $(ip netns exec a ping -c 5 -i 0.2 -W 2 -I 198.18.100.1 198.18.2.2 | grep 'packets transmitted')"
result "PING-B $(ip netns exec b ping -c 5 -i 0.2 -W 2 198.18.100.1 | grep 'packets transmitted')"
ip netns exec b iperf3 -s -D -1 -B 198.18.2.2 || fail "iperf3 server b"
sleep 1
result "TCP-AB $(ip netns exec a iperf3 -c 198.18.2.2 -B 198.18.100.1 -t 3 -J | tr -d '\n\t ' | grep -o '"sum_received":{[^}]*}' | grep -o '"bytes":[0-9]*')"
ip netns exec a iperf3 -s -D -1 -B 198.18.100.1 || fail "iperf3 server a"
sleep 1
result "TCP-BA $(ip netns exec b iperf3 -c 198.18.100.1 -t 3 -J | tr -d '\n\t ' | grep -o '"sum_received":{[^}]*}' | grep -o '"bytes":[0-9]*')"
sleep 2
result "STATS $(tr -d '\n' < /tmp/r.json)"
kill $pid
"#;

/// The number after `"bytes":` on the result line starting with `tag`.
fn bytes_of(results: &str, tag: &str) -> u64 {
    results
        .lines()
        .find_map(|l| l.strip_prefix(tag)?.trim().strip_prefix("\"bytes\":")?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn the_fast_path_pushes_and_pops_for_a_kernel_mpls_neighbour_over_veth() {
    let image = GuestImage::build(&GuestCache::default_location()).expect("guest image");
    let work_dir = WorkDir::new("guest-kernel-peer");
    let mut g = Guest::boot(
        &image,
        GuestConfig {
            name: "kpeer".into(),
            script: SCRIPT.into(),
            memory_mib: 768,
            files: vec![ExtraFile::stripped_program(
                Path::new(env!("CARGO_BIN_EXE_vmpls")),
                work_dir.path(),
                "/usr/bin/vmpls",
            )],
            ..GuestConfig::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let rc = g.wait_done(Duration::from_secs(300)).unwrap_or_else(|e| panic!("{e}"));
    let r = g.results();
    let context = || format!("{r}\n{}", g.output());
    assert_eq!(rc, 0, "{}", context());
    assert!(r.contains("LOG") && r.contains("MPLS action (act_mpls) after the programs"), "{}", context());
    for tag in ["PING-A", "PING-B"] {
        let line = r.lines().find(|l| l.starts_with(tag)).unwrap_or_default();
        assert!(line.contains("5 packets received"), "{tag}: {}", context());
    }
    assert!(bytes_of(&r, "TCP-AB") > 1 << 20, "a -> b: {}", context());
    assert!(bytes_of(&r, "TCP-BA") > 1 << 20, "b -> a: {}", context());
    let stats = r
        .lines()
        .rev()
        .find_map(|l| RouterStats::parse(l.strip_prefix("STATS ")?).ok())
        .unwrap_or_else(|| panic!("no counters: {}", context()));
    let fast = |n: &str| stats.fast(n);
    // a's labelled frames came through a real transmit: popped by the chain, one pass.
    assert!(fast("pop") >= 100 && fast("act_mpls") >= fast("pop"), "{:?}", stats.fast_path);
    assert_eq!(fast("repassed"), 0, "{:?}", stats.fast_path);
    assert!(fast("push") >= 100, "{:?}", stats.fast_path);
    assert_eq!(fast("redirect_failed"), 0, "{:?}", stats.fast_path);
}
