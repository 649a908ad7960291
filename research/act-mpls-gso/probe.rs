//! Probe: act_mpls push + mpls_gso in the guest kernel (Debian 12, Linux 6.1). See README.md.
use std::time::Duration;
use vmpls_guest::{ExtraFile, Guest, GuestCache, GuestConfig, GuestImage, ImageSpec};

const SCRIPT: &str = r#"
set -x
ip netns add ce; ip netns add r; ip netns add sink
ip link add c0 type veth peer name r0
ip link set c0 netns ce; ip link set r0 netns r
ip link add r1 type veth peer name s0
ip link set r1 netns r; ip link set s0 netns sink
ip -n ce link set c0 up; ip -n r link set r0 up; ip -n r link set r1 up; ip -n sink link set s0 up
ip -n ce link set lo up; ip -n sink link set lo up
ip -n ce addr add 198.18.1.2/24 dev c0
ip -n sink addr add 198.18.1.3/24 dev s0
ip -n r link set r1 mtu 1504
ip -n sink link set s0 mtu 1504
ip netns exec r ethtool -K r1 tso off gso off gro off tx-gso-partial off 2>&1 | head -3
ip netns exec r ethtool -k r1 | grep -E "segmentation|gso" | tr '\n' ' ' | while read l; do result "R1 $l"; done
ip netns exec r tc qdisc add dev r0 clsact
ip netns exec r tc filter add dev r0 ingress matchall action mpls push protocol mpls_uc label 1000 ttl 64 action mirred egress redirect dev r1 || result "TCFAIL1"
ip netns exec r tc qdisc add dev r1 clsact
ip netns exec sink tc qdisc add dev s0 clsact
ip netns exec sink tc filter add dev s0 ingress protocol mpls_uc matchall action mpls pop protocol ip || result "TCFAIL2"
ip netns exec ce ip neigh add 198.18.1.3 lladdr $(ip -n sink -o link show s0 | sed -n 's/.*link\/ether \([^ ]*\).*/\1/p') dev c0
ip netns exec sink ip neigh add 198.18.1.2 lladdr $(ip -n ce -o link show c0 | sed -n 's/.*link\/ether \([^ ]*\).*/\1/p') dev s0
# The way back: plain, from s0 through r1 -> r0 mirrored
ip netns exec r tc filter add dev r1 ingress matchall action mirred egress redirect dev r0
ip netns exec sink iperf3 -s -1 -D
sleep 1
result "IPERF $(ip netns exec ce iperf3 -c 198.18.1.3 -t 3 -J 2>&1 | grep -E '"bits_per_second"|retransmits|error' | tail -3 | tr -d ' \n')"
result "R1STATS $(ip -n r -s link show r1 | tr '\n' ' ')"
result "TCSTATS $(ip netns exec r tc -s filter show dev r0 ingress | tr '\n' ' ' | cut -c1-600)"
result "SINKTC $(ip netns exec sink tc -s filter show dev s0 ingress | tr '\n' ' ' | cut -c1-400)"
result PROBE-DONE
"#;

#[test]
fn probe() {
    let mut spec = ImageSpec::default();
    for m in ["act_mpls", "mpls_gso", "cls_matchall", "act_mirred"] {
        spec.modules.push(m.into());
    }
    let image = GuestImage::build_with(&GuestCache::default_location(), &spec).expect("image");
    let mut g = Guest::boot(
        &image,
        GuestConfig {
            name: "probe".into(),
            nics: vec![],
            script: SCRIPT.into(),
            memory_mib: 768,
            files: vec![ExtraFile::program("/usr/sbin/tc", "/usr/sbin/tc")],
            ..GuestConfig::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let r = g.wait_for("PROBE-DONE", Duration::from_secs(240));
    eprintln!("{:?}\nRESULTS:\n{}\nOUTPUT:\n{}", r.err(), g.results(), g.output());
}
