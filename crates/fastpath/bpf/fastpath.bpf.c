// SPDX-License-Identifier: GPL-2.0
//
// vmpls in-kernel MPLS fast path (TC ingress; bpf_redirect_peer on veth, bpf_redirect to
// the egress of any other Ethernet device).
//
// Two programs share one decision function and the maps below:
//   fp_tc    (SEC "classifier", SCHED_CLS, tcx ingress on the router's ports): swaps, pops,
//            pushes or IP-forwards the frames the maps describe and hands them on with
//            bpf_redirect_peer(out veth), or bpf_redirect(out device) for a port whose
//            fp_port.transmit is set (TAP, virtio-net, physical NICs: no peer to land in);
//            everything else TC_ACT_OK (the router's slow path). A pop of a frame the
//            kernel took as MPLS goes through the port's ingress twice (see decide_mpls).
//   fp_sock  (SEC "socket", SOCKET_FILTER, SO_ATTACH_BPF on the router's AF_PACKET SOCK_RAW
//            socket): AF_PACKET taps run before tc ingress, so this returns 0 (drop)
//            exactly for the frames fp_tc will redirect and keeps everything else.
// Two more: fp_act finishes what a port's action chain did (see fp_acting), and fp_xdp
// (SEC "xdp", in the driver of virtio-net NICs that switch by label) swaps and pops before
// the skb and GRO exist (see fp_xdp).
//
// The decision reads the frame only with bpf_skb_load_bytes (works in both program types)
// and is complete before anything is modified: a frame that is passed on is untouched.
// See crates/fastpath/src/lib.rs for the map layout as seen from userspace.
//
// MPLS-in-UDP (RFC 7510): an adjacency whose ifindex has FP_TUNNEL_BIT set is a tunnel
// (fp_tunnels). Labelled frames to it get an outer IPv4 + UDP header in front of the label
// stack with one bpf_skb_adjust_room(BPF_F_ADJ_ROOM_ENCAP_L3_IPV4 | ENCAP_L4_UDP |
// ENCAP_L2(stack)), so a GSO super-frame stays whole (SKB_GSO_UDP_TUNNEL: the kernel cuts it
// where the underlay needs it), and leave by bpf_redirect_neigh through the underlay
// interface (the kernel's route and neighbour). On the underlay interfaces (fp_underlay),
// datagrams of a tunnel (fp_tunnel_rx: outer dst = local, src = remote, UDP dst = port) are
// switched as if received on the tunnel: the outer headers go in the same adjust_room that
// pops or before the swap (BPF_F_ADJ_ROOM_DECAP_L3_*). Everything else goes to the socket.

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define FP_ETH_HLEN 14
#define FP_ETH_P_MPLS_UC 0x8847
#define FP_MAX_PUSH 4
#define FP_MAX_STACK 32 // deepest stack switched, as the pipeline's MAX_LABELS: deeper ones are its to count
#define FP_LABEL_MAX 0xfffff

#define FP_LABEL_SWAP 1
#define FP_LABEL_POP_IP 2
#define FP_LABEL_PHP 3
#define FP_LABEL_MULTI 4 // ECMP: the group's next hop for the flow swaps (one label) or pops (none)
#define FP_ROUTE_LOCAL 1
#define FP_ROUTE_FORWARD 2
#define FP_TUNNEL_BIT 0x80000000u // adjacency ifindex: a tunnel (fp_tunnels key), not a veth
#define FP_OUTER4 28             // IPv4 + UDP
#define FP_OUTER6 48             // IPv6 + UDP
#define FP_SPORT_BASE 49152      // RFC 7510 section 3: source ports from 49152..65535
#define FP_MAX_NH 64              // next hops in a group (the FIB's MAX_NEXTHOPS)
#define FP_MAX_BUCKETS 4096       // buckets in a group (the FIB's MAX_BUCKETS)
#define FP_LABEL_ELI 7            // entropy label indicator (RFC 6790)
#define FP_FIRST_UNRESERVED 16
// skb->mark of a frame on its second pass through a port's ingress (see V_POP in decide_mpls)
#define FP_MARK_REPROTO 0x766d706cu // "vmpl"
#define FP_HEAD 32                  // bytes after the Ethernet header that tie a decision to its frame
#define FP_RECALL_NS (1000ULL * 1000ULL)
// A frame handed to its port's action chain (see fp_acting), whose fw filters match
// these marks: FP_MARK_PUSH + n for a push of n labels, FP_MARK_POP + 4 or + 6 for a pop
// with an IPv4 or IPv6 packet under the label.
#define FP_MARK_PUSH 0x766d7000u
#define FP_MARK_POP 0x766d7010u

#ifndef BPF_F_ADJ_ROOM_DECAP_L3_IPV4 // Linux 6.3; older uapi headers lack them
#define BPF_F_ADJ_ROOM_DECAP_L3_IPV4 (1ULL << 7)
#define BPF_F_ADJ_ROOM_DECAP_L3_IPV6 (1ULL << 8)
#endif

struct fp_adj {
	__u32 ifindex; // out port in this netns: its veth peer receives the frame, or it sends it
	__u32 mtu;     // L3 bytes the out port takes
	__u8 dmac[6];
	__u8 smac[6];
};

struct fp_port {
	__u32 vrf;
	__u8 mac[6];
	__u8 accepts_mpls; // 0: labelled frames are the pipeline's, which drops and counts them
	__u8 netns;        // 0: the router's namespace, else a VRF's (its fp_crossings key)
	// 1: frames leave by the device's own transmit (bpf_redirect to its egress), not into
	// a veth peer's ingress. There the kernel builds segments by skb->protocol and the
	// device's features, which for a labelled super-frame means MPLS GSO the kernel may
	// lack (and that skb->protocol, still IP after a push, would mislead): labelled
	// super-frames to such a port are the pipeline's, which segments them itself.
	__u8 transmit;
	// 1: the port's TC ingress has the action chain after fp_tc (fw filters on the
	// FP_MARK_* marks with act_mpls pushes or a pop, then fp_act in chain 1), and the
	// kernel has MPLS GSO (see fp_acting).
	__u8 act_chain;
	__u8 pad[2];
};

struct fp_label {
	__u32 action; // FP_LABEL_*
	__u32 out_label;
	__u32 vrf;
	__u32 uniform;
	struct fp_adj adj;
	__u32 group; // FP_LABEL_MULTI: the fp_groups key
};

struct fp_key4 {
	__u32 prefixlen; // 32 + prefix length
	__u32 vrf;       // network byte order
	__u8 addr[4];
};

struct fp_key6 {
	__u32 prefixlen; // 32 + prefix length
	__u32 vrf;       // network byte order
	__u8 addr[16];
};

struct fp_route {
	__u32 action; // FP_ROUTE_*
	__u32 nlabels;
	__u32 labels[4]; // labels[0] outermost
	__u32 label_ttl; // 0: uniform (IP TTL after this hop's decrement), else fixed
	struct fp_adj adj;
	__u32 group; // not 0: ECMP, the fp_groups key (nlabels, labels and adj are the next hop's)
};

// One next hop of an ECMP group: the labels it pushes (a route's, 0 to 4) or swaps in (a
// label's: 1, or 0 for a penultimate-hop pop), and where it sends.
struct fp_nh {
	__u32 nlabels;
	__u32 labels[4];
	struct fp_adj adj;
};

// An ECMP group as the FIB's NexthopGroup selects in it: the flow hash, mixed, picks
// bucket ((mix(hash) * nbuckets) >> 32), which names the next hop. Same hash, same bucket
// table, same next hop as the pipeline.
struct fp_group {
	__u32 nnh;
	__u32 nbuckets;
	struct fp_nh nh[FP_MAX_NH];
	__u8 buckets[FP_MAX_BUCKETS];
};

// A tunnel (key: FP_TUNNEL_BIT | port index, the adjacency's ifindex).
struct fp_tunnel {
	__u32 family;  // 4 or 6: the underlay
	__u32 ifindex; // the underlay interface: bpf_redirect_neigh's out device
	__u32 encap;   // whether the programs encapsulate (else only decapsulate)
	__u16 port;    // UDP destination port, network order
	__u16 pad;
	__u8 local[16]; // IPv4: the first 4 bytes
	__u8 remote[16];
};

// The datagrams of a tunnel, as they arrive (value: the tunnel's key).
struct fp_tunnel_key {
	__u32 family;
	__u16 port; // UDP destination port, network order
	__u16 pad;
	__u8 local[16]; // the outer destination
	__u8 remote[16]; // the outer source
};

// How frames cross between the router's namespace and VRF namespace N (fp_crossings key
// N): the VRF interface, a veth pair with one end in each. bpf_redirect_peer(root_ifindex)
// from the router's namespace lands at vrf_ifindex's ingress in the VRF's, and
// bpf_redirect_peer(vrf_ifindex) from the VRF's at root_ifindex's ingress here.
struct fp_crossing {
	__u32 root_ifindex;
	__u32 vrf_ifindex;
};

// A frame on its way across (per CPU): fp_tc has rewritten it completely and redirected it
// into the VRF interface; the kernel runs the program at the far end's ingress (`at`)
// right away on this CPU (another round of __netif_receive_skb_core, no queue), which
// sends it on to `out` with bpf_redirect_peer. `len` and `eth` tie it to that frame: a
// hand-off whose frame was dropped on the way never matches another.
struct fp_handoff {
	__u32 at;
	__u32 out;
	__u32 len;
	__u8 eth[12];
};

struct fp_label_stat {
	__u64 frames;
	__u64 bytes;
};

struct fp_port_stat {
	__u64 rx_frames;
	__u64 rx_bytes;
	__u64 tx_frames;
	__u64 tx_bytes;
	__u64 rx_by_label; // of rx_frames: swapped, or popped into a VRF (V_SWAP, V_POP), see fp_xdp
};

_Static_assert(sizeof(struct fp_adj) == 20, "fp_adj layout");
_Static_assert(sizeof(struct fp_port) == 16, "fp_port layout");
_Static_assert(sizeof(struct fp_label) == 40, "fp_label layout");
_Static_assert(sizeof(struct fp_key4) == 12, "fp_key4 layout");
_Static_assert(sizeof(struct fp_key6) == 24, "fp_key6 layout");
_Static_assert(sizeof(struct fp_route) == 52, "fp_route layout");
_Static_assert(sizeof(struct fp_nh) == 40, "fp_nh layout");
_Static_assert(sizeof(struct fp_group) == 8 + 40 * FP_MAX_NH + FP_MAX_BUCKETS, "fp_group layout");
_Static_assert(sizeof(struct fp_tunnel) == 48, "fp_tunnel layout");
_Static_assert(sizeof(struct fp_tunnel_key) == 40, "fp_tunnel_key layout");
_Static_assert(sizeof(struct fp_crossing) == 8, "fp_crossing layout");

enum {
	C_FRAMES_IN = 0,
	C_SWAP,
	C_PUSH,
	C_POP,
	C_IP_FORWARD,
	C_PASSED,
	C_BYTES,
	C_REDIRECT_FAILED,
	C_ENCAP,
	C_DECAP,
	C_CROSSED,
	C_REPASSED,
	C_ACT_MPLS,
	C_RECALLED,
	C_XDP_POP,
	C_XDP_SWAP,
	C_MAX
};
_Static_assert(C_MAX == 16, "fp_counter_set layout (raw.rs counter::COUNT)");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct fp_port);
} fp_ports SEC(".maps");

/* Capacities: LABEL_CAPACITY and ROUTE_CAPACITY in lib.rs. Allocated as used
 * (BPF_F_NO_PREALLOC), so a large table costs kernel memory only when it is large. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct fp_label);
} fp_labels SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1048576);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct fp_key4);
	__type(value, struct fp_route);
} fp_routes_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1048576);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct fp_key6);
	__type(value, struct fp_route);
} fp_routes_v6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct fp_tunnel);
} fp_tunnels SEC(".maps");

/* ECMP groups by id (GROUP_CAPACITY in lib.rs); one per distinct group of next hops,
 * shared by every label and route that uses it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct fp_group);
} fp_groups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct fp_tunnel_key);
	__type(value, __u32);
} fp_tunnel_rx SEC(".maps");

// Underlay interfaces (ifindex, value unused) where fp_tc looks for tunnel datagrams.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} fp_underlay SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct fp_crossing);
} fp_crossings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fp_handoff);
} fp_handoffs SEC(".maps");

// A frame on its way through the receiving port's action chain (per CPU), for what the
// kernel's MPLS action (act_mpls) does and no BPF helper can:
// - a push onto a TCP super-frame bound for a transmitting port: act_mpls marks the skb
//   as MPLS with its inner protocol and network header, which the out device's MPLS GSO
//   needs to cut it (bpf_skb_adjust_room cannot), so it leaves whole;
// - the pop of a frame some device sent (skb->protocol MPLS, which adjust_room refuses):
//   act_mpls pops it in place, where the program would send it through the port's ingress
//   a second time (see decide_mpls).
// fp_tc has decided, written the IP TTL and the Ethernet addresses, set skb->mark to the
// entry's `mark` and let the classification go on (TC_ACT_UNSPEC). The chain's fw filter
// for that mark runs its act_mpls actions (n pushes of a placeholder label, or a pop),
// then goes to chain 1, where fp_act writes the pushed entries and redirects to `out`,
// all at once on this CPU. `mark` and `len` (the frame's length after the actions) tie the
// entry to that frame.
struct fp_acting {
	__u32 out;
	__u32 len;
	__u32 mark;
	__u32 nlabels; // pushed: entries to write
	__u32 lse[FP_MAX_PUSH]; // host order, outermost first
	__u32 peer; // out by bpf_redirect_peer (a veth), else bpf_redirect
	__u32 counter; // C_PUSH or C_POP
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fp_acting);
} fp_actings SEC(".maps");

// All of a CPU's counters in one entry: a program looks it up once per run (kernels before
// 6.10 call a helper for each per-CPU array lookup).
struct fp_counter_set {
	__u64 c[C_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fp_counter_set);
} fp_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 262144);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct fp_label_stat);
} fp_label_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct fp_port_stat);
} fp_port_stats SEC(".maps");

// The interfaces (ifindex) fp_xdp is attached to, written by the router: an XDP program
// may redirect only to a device whose driver takes XDP frames, which virtio-net does only
// while a program of its own is attached.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u32);
} fp_xdp_ports SEC(".maps");

// When each interface (ifindex) last delivered a frame the kernel could not send on whole
// (bpf_ktime_get_ns): a super-frame fp_tc left to the stack, or one a pop would send to a
// link too small for it (the pipeline sends it on as a super-frame). Written by fp_tc,
// read by both programs' decisions (see big_frames_lately).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} fp_big_seen SEC(".maps");

#define FP_BIG_QUIET_NS (1000ULL * 1000000ULL)

// Whether the interface delivered a frame the kernel could not take whole in the last
// second. Such frames go to the pipeline; while they come, a flow's other frames with TCP
// data that the kernel would label or pop and send to a transmitting port go there too,
// behind them: sent meanwhile in the kernel they would overtake them and reorder the flow
// (pure ACKs carry no data to reorder). The first such frame sends the flow's next
// segments to the pipeline behind it, so nothing overtakes it; a second after the last
// one (far longer than a frame waits in the pipeline) the kernel takes them again. From a
// NIC that aggregates nothing (a guest's virtio-net NIC after `ethtool -K IF gro off
// rx-gro-hw off`) the kernel pushes every segment.
static __always_inline int big_frames_lately(__u32 ifindex)
{
	__u64 *seen = bpf_map_lookup_elem(&fp_big_seen, &ifindex);
	return seen && bpf_ktime_get_ns() - *seen < FP_BIG_QUIET_NS;
}

// Read by the decisions on this interface's next frames (the socket filter's too: a CPU
// takes a frame through both programs before the next one).
static __always_inline void note_big_frame(__u32 ifindex)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 *seen = bpf_map_lookup_elem(&fp_big_seen, &ifindex);
	if (seen)
		*seen = now;
	else
		bpf_map_update_elem(&fp_big_seen, &ifindex, &now, BPF_ANY);
}

enum verdict { V_PASS = 0, V_SWAP, V_POP, V_FORWARD, V_PUSH, V_PHP, V_PHP_LABEL };

struct decision {
	__u32 verdict;   // V_*
	__u32 candidate; // port known, untagged, PACKET_HOST, to the port's MAC
	__u32 in_label;  // V_SWAP, V_POP
	__u32 new_lse;   // V_SWAP: the rewritten top entry; V_PHP_LABEL: the next one; host order
	__u32 ipver;     // V_POP, V_FORWARD, V_PUSH: 4 or 6
	__u32 new_ttl;   // V_POP, V_FORWARD, V_PUSH: IP TTL / hop limit to write
	__u32 nlabels;   // V_PUSH
	__u32 lse[FP_MAX_PUSH]; // V_PUSH, V_SWAP into a tunnel: entries to write, host order
	struct fp_adj adj;
	__u32 rx_port;   // the port counted as received on: ifindex, or a tunnel's key
	__u32 decap;     // outer IP + UDP bytes to take off (received from a tunnel), else 0
	__u32 inner_ver; // decap: the IP version after the stack (4, 6, or 0 unknown)
	__u32 depth;     // V_SWAP into a tunnel: the stack's entries (all rewritten)
	__u32 outer_csum; // decap: the outer UDP checksum is not zero
	struct fp_tunnel tun; // adj is a tunnel (adj.ifindex & FP_TUNNEL_BIT): its entry
	__u32 in_netns;  // the receiving port's fp_port.netns (0 for tunnels)
	__u32 cross;     // not 0: the out port is in another namespace, redirect_peer to this
	__u32 cross_at;  // cross: where the frame lands (the VRF interface's other end)
	__u32 transmit;  // the out port's fp_port.transmit: bpf_redirect to its egress
	__u32 tcp_data;  // V_PUSH of a single TCP segment with payload (see decide_delivery)
	__u32 reproto;   // V_POP, V_PHP of an MPLS skb: first its protocol (see decide_mpls)
	__u32 second_pass; // the frame is on that second pass: popped here, or dropped
	__u32 in_ifindex; // skb->ifindex
	__u32 too_big;   // a pop passed for its size: the port delivers frames the kernel cannot take whole
	__u32 in_act_chain; // the receiving port's fp_port.act_chain
	__u32 act_chain; // through the receiving port's action chain (see fp_acting)
};

// The socket filter's decision on the frame the kernel is receiving on this CPU, for
// fp_tc to take instead of deciding again: the router's packet socket (a tap) sees each
// frame before TC ingress does, in the same call on the same CPU, and decide() changes
// nothing. `head` (the frame's bytes after the Ethernet header: labels, IP header, ports
// and sequence numbers) with the interface, length and mark ties it to that frame; fp_tc
// takes it once (`at` 0 after), and only within FP_RECALL_NS.
struct fp_decided {
	__u64 at; // bpf_ktime_get_ns when decided; 0: taken
	__u32 ifindex;
	__u32 len;
	__u32 mark;
	__u32 pad;
	__u8 head[FP_HEAD];
	struct decision d;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fp_decided);
} fp_decideds SEC(".maps");

struct ipinfo {
	__u32 ver;
	__u32 ttl;
	__u32 l3len;   // IP header length (IPv6: the fixed 40 bytes)
	__u32 l4len;   // TCP/UDP header length, GSO frames only
	__u32 l4proto; // the IP header's protocol
	__u32 tot_len; // IPv4 total length, IPv6 40 + payload length
	__u8 daddr[16];
};

// This CPU's counters; NULL only if the array's one entry were missing, which it never is.
static __always_inline struct fp_counter_set *counter_set(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&fp_counters, &zero);
}

static __always_inline void count(struct fp_counter_set *cs, __u32 idx, __u64 v)
{
	if (cs && idx < C_MAX)
		cs->c[idx] += v;
}

static __always_inline void label_stat(__u32 label, __u64 bytes)
{
	struct fp_label_stat *s = bpf_map_lookup_elem(&fp_label_stats, &label);
	if (!s) {
		struct fp_label_stat zero = {};
		bpf_map_update_elem(&fp_label_stats, &label, &zero, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&fp_label_stats, &label);
		if (!s)
			return;
	}
	s->frames += 1;
	s->bytes += bytes;
}

static __always_inline void port_stat(__u32 ifindex, int tx, __u64 bytes, int by_label)
{
	struct fp_port_stat *s = bpf_map_lookup_elem(&fp_port_stats, &ifindex);
	if (!s) {
		struct fp_port_stat zero = {};
		bpf_map_update_elem(&fp_port_stats, &ifindex, &zero, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&fp_port_stats, &ifindex);
		if (!s)
			return;
	}
	if (tx) {
		s->tx_frames += 1;
		s->tx_bytes += bytes;
	} else {
		s->rx_frames += 1;
		s->rx_bytes += bytes;
		s->rx_by_label += by_label;
	}
}

static __always_inline __u32 ip_version(struct __sk_buff *skb, __u32 off)
{
	__u8 b;
	if (bpf_skb_load_bytes(skb, off, &b, 1))
		return 0;
	return b >> 4;
}

// Parses and validates the IP header at `off` (version `ver`). For GSO frames also the
// TCP/UDP header length. Returns 0 when the packet is well formed enough to forward.
static __always_inline int parse_ip(struct __sk_buff *skb, __u32 off, __u32 ver, __u32 gso,
				    struct ipinfo *ip)
{
	ip->ver = ver;
	ip->l4len = 0;
	ip->l4proto = 0;
	if (ver == 4) {
		__u8 h[60] = {};
		if (bpf_skb_load_bytes(skb, off, h, 20))
			return -1;
		if ((h[0] >> 4) != 4)
			return -1;
		__u32 hlen = (h[0] & 0x0f) * 4;
		if (hlen < 20)
			return -1;
		// The options a word at a time, each load of constant size: a variable length
		// loses its bounds in older verifiers (Linux 6.1 refuses `hlen - 20` spilled
		// and reloaded as possibly negative).
#pragma unroll
		for (__u32 i = 0; i < 10; i++) {
			if (20 + 4 * i < hlen && bpf_skb_load_bytes(skb, off + 20 + 4 * i, h + 20 + 4 * i, 4))
				return -1;
		}
		// header checksum: the ones' complement sum over the header must be 0xffff
		// (the unused tail of h is zero and adds nothing)
		__u32 sum = 0;
#pragma unroll
		for (int i = 0; i < 60; i += 2)
			sum += ((__u32)h[i] << 8) | h[i + 1];
		sum = (sum & 0xffff) + (sum >> 16);
		sum = (sum & 0xffff) + (sum >> 16);
		if (sum != 0xffff)
			return -1;
		ip->ttl = h[8];
		ip->l3len = hlen;
		ip->tot_len = ((__u32)h[2] << 8) | h[3];
		__builtin_memcpy(ip->daddr, h + 16, 4);
		ip->l4proto = h[9];
		if (!gso) {
			// Exactly the frame: a packet with link padding behind it is the pipeline's,
			// which trims the padding, as the kernel does, before forwarding.
			if (ip->tot_len < hlen || (__u64)off + ip->tot_len != skb->len)
				return -1;
			return 0;
		}
		// GSO: the segments' headers are these; fragments are never GSO
		if ((h[6] & 0x3f) || h[7])
			return -1;
	} else if (ver == 6) {
		__u8 h[40];
		if (bpf_skb_load_bytes(skb, off, h, 40))
			return -1;
		if ((h[0] >> 4) != 6)
			return -1;
		ip->ttl = h[7];
		ip->l3len = 40;
		ip->tot_len = 40 + (((__u32)h[4] << 8) | h[5]);
		__builtin_memcpy(ip->daddr, h + 24, 16);
		ip->l4proto = h[6];
		if (!gso) {
			if ((__u64)off + ip->tot_len != skb->len)
				return -1;
			return 0;
		}
		// extension headers: not parsed, such GSO frames pass
	} else {
		return -1;
	}
	if (ip->l4proto == IPPROTO_TCP) {
		__u8 doff;
		if (bpf_skb_load_bytes(skb, off + ip->l3len + 12, &doff, 1))
			return -1;
		ip->l4len = (doff >> 4) * 4;
		if (ip->l4len < 20)
			return -1;
	} else if (ip->l4proto == IPPROTO_UDP) {
		ip->l4len = 8;
	} else {
		return -1;
	}
	return 0;
}

// Destinations the fast path never forwards: IPv4 multicast and limited broadcast,
// IPv6 multicast and link-local, for `daddr` of IP version `ver` (4 bytes, or 16).
static __always_inline int special_daddr(__u32 ver, const __u8 *daddr)
{
	if (ver == 4)
		return (daddr[0] & 0xf0) == 0xe0 ||
		       (daddr[0] == 0xff && daddr[1] == 0xff && daddr[2] == 0xff && daddr[3] == 0xff);
	return daddr[0] == 0xff || (daddr[0] == 0xfe && (daddr[1] & 0xc0) == 0x80);
}

static __always_inline int special_dst(const struct ipinfo *ip)
{
	return special_daddr(ip->ver, ip->daddr);
}

// The IP TTL (hop limit) a pop of a label with TTL `label_ttl` leaves on a packet with
// `ip_ttl`, before the IP hop's own decrement: the lower of the two under the uniform model.
static __always_inline __u32 popped_ttl(const struct fp_label *e, __u32 label_ttl, __u32 ip_ttl)
{
	return e->uniform && label_ttl < ip_ttl ? label_ttl : ip_ttl;
}

static __always_inline struct fp_route *route_lookup(__u32 vrf, const struct ipinfo *ip)
{
	if (ip->ver == 4) {
		struct fp_key4 k = { .prefixlen = 32 + 32, .vrf = bpf_htonl(vrf) };
		__builtin_memcpy(k.addr, ip->daddr, 4);
		return bpf_map_lookup_elem(&fp_routes_v4, &k);
	}
	struct fp_key6 k = { .prefixlen = 32 + 128, .vrf = bpf_htonl(vrf) };
	__builtin_memcpy(k.addr, ip->daddr, 16);
	return bpf_map_lookup_elem(&fp_routes_v6, &k);
}

static __always_inline int proto_is(struct __sk_buff *skb, __u32 ver)
{
	return skb->protocol == (ver == 4 ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6));
}

// The size of the largest L3 packet the frame stands for after this hop, `grow` bytes of
// labels added: one segment for GSO frames (gso_size stays: adjust_room runs with
// BPF_F_ADJ_ROOM_FIXED_GSO), else the IP packet. The pipeline's rule: a segment that does
// not fit the next link with its labels is the pipeline's (it answers "too big").
static __always_inline __u64 l3_size(const struct ipinfo *ip, __u32 gso, __u32 grow)
{
	if (gso)
		return (__u64)gso + ip->l3len + ip->l4len + grow;
	return (__u64)ip->tot_len + grow;
}

// Whether a frame may go to `adj`: a veth as always, or a tunnel the programs encapsulate
// into (its entry copied to d->tun). A frame that came out of a tunnel goes into none
// (adjust_room encapsulates only once).
// `outer_len`: the outer IP packet's length if it goes into a tunnel (at most 65535).
static __always_inline int adj_ok(struct decision *d, const struct fp_adj *adj, __u64 outer_len)
{
	if (!(adj->ifindex & FP_TUNNEL_BIT))
		return 1;
	if (d->decap || outer_len > 0xffff)
		return 0;
	__u32 key = adj->ifindex;
	struct fp_tunnel *t = bpf_map_lookup_elem(&fp_tunnels, &key);
	if (!t || !t->encap || t->family != 4)
		return 0;
	d->tun = *t;
	return 1;
}

// The flow hash of the pipeline (crates/dataplane/src/hash.rs, murmur3's steps), word by
// word, so that a flow takes the same next hop here and there.
#define FH_SEED 0x9747b28cu

static __always_inline __u32 fh_write(__u32 h, __u32 w)
{
	__u32 k = w * 0xcc9e2d51u;
	k = ((k << 15) | (k >> 17)) * 0x1b873593u;
	h ^= k;
	h = (h << 13) | (h >> 19);
	return h * 5 + 0xe6546b64u;
}

static __always_inline __u32 fh_finish(__u32 h)
{
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	return h ^ (h >> 16);
}

static __always_inline __u32 be32(const __u8 *b)
{
	return ((__u32)b[0] << 24) | ((__u32)b[1] << 16) | ((__u32)b[2] << 8) | b[3];
}

// ip_flow_words: addresses, protocol (IPv6: next header and flow label), and the ports
// of unfragmented TCP/UDP, from the fixed header only, hashing whatever is there.
static __always_inline __u32 ip_flow_words(struct __sk_buff *skb, __u32 off, __u32 h)
{
	__u8 b[40];
	__u8 p[4];
	if (bpf_skb_load_bytes(skb, off, b, 1))
		return h;
	if ((b[0] >> 4) == 4) {
		if (bpf_skb_load_bytes(skb, off, b, 20))
			return h;
		__u32 proto = b[9];
		h = fh_write(h, be32(b + 12));
		h = fh_write(h, be32(b + 16));
		h = fh_write(h, proto);
		if ((b[6] & 0x20) || (((b[6] & 0x1f) << 8) | b[7]))
			return h;
		if ((proto == IPPROTO_TCP || proto == IPPROTO_UDP) &&
		    !bpf_skb_load_bytes(skb, off + (b[0] & 0x0f) * 4, p, 4))
			h = fh_write(h, be32(p));
		return h;
	}
	if ((b[0] >> 4) != 6 || bpf_skb_load_bytes(skb, off, b, 40))
		return h;
	__u32 next = b[6];
#pragma unroll
	for (int i = 8; i < 40; i += 4)
		h = fh_write(h, be32(b + i));
	h = fh_write(h, next);
	h = fh_write(h, (((__u32)b[1] & 0x0f) << 16) | ((__u32)b[2] << 8) | b[3]);
	if ((next == IPPROTO_TCP || next == IPPROTO_UDP) && !bpf_skb_load_bytes(skb, off + 40, p, 4))
		h = fh_write(h, be32(p));
	return h;
}

// mpls_flow_hash of the stack at `mo`: unreserved labels (an entropy label alone decides),
// then the IP packet under the bottom. Returns -1 for a stack deeper than FP_MAX_STACK
// (the pipeline's to switch).
static __always_inline int mpls_flow_hash(struct __sk_buff *skb, __u32 mo, __u32 *out)
{
	__u32 h = FH_SEED;
	__u32 after_eli = 0;
	__u32 ip_off = 0;
	int end = 0; // 1: hashed to the end, 2: the IP packet at ip_off follows
	for (int i = 0; i < FP_MAX_STACK; i++) {
		__u32 x;
		if (bpf_skb_load_bytes(skb, mo + 4 * i, &x, 4)) {
			end = 1;
			break;
		}
		x = bpf_ntohl(x);
		__u32 label = x >> 12;
		if (after_eli) {
			h = fh_write(h, label);
			end = 1;
			break;
		}
		if (label == FP_LABEL_ELI)
			after_eli = 1;
		else if (label >= FP_FIRST_UNRESERVED)
			h = fh_write(h, label);
		if (x & 0x100) {
			ip_off = mo + 4 * (i + 1);
			end = 2;
			break;
		}
	}
	if (!end)
		return -1;
	if (end == 2)
		h = ip_flow_words(skb, ip_off, h);
	*out = fh_finish(h);
	return 0;
}

// The group's next hop for flow hash `hash`, as NexthopGroup::select picks it.
static __always_inline struct fp_nh *group_select(__u32 id, __u32 hash)
{
	struct fp_group *g = bpf_map_lookup_elem(&fp_groups, &id);
	if (!g)
		return NULL;
	__u32 nb = g->nbuckets;
	if (nb == 0 || nb > FP_MAX_BUCKETS)
		return NULL;
	__u32 b = ((__u64)fh_finish(hash) * nb) >> 32;
	if (b >= FP_MAX_BUCKETS)
		return NULL;
	__u32 i = g->buckets[b];
	if (i >= g->nnh || i >= FP_MAX_NH)
		return NULL;
	return &g->nh[i];
}

// A pop, on its two passes (see decide_mpls), of a TCP segment with data that some
// device sent, from a port that delivers frames the kernel cannot take whole (see
// big_frames_lately): the pipeline's, behind them.
static __always_inline int pop_splits_flow(struct __sk_buff *skb, const struct decision *d,
					   const struct ipinfo *ip, __u32 ip_off, __u32 gso)
{
	if (gso || ip->l4proto != IPPROTO_TCP || !big_frames_lately(d->in_ifindex))
		return 0;
	__u8 doff;
	if (bpf_skb_load_bytes(skb, ip_off + ip->l3len + 12, &doff, 1))
		return 1;
	return ip->tot_len > ip->l3len + (doff >> 4) * 4;
}

// The top label at `mo` (14, or after the outer headers of a tunnel's datagram).
static __always_inline void decide_mpls(struct __sk_buff *skb, struct decision *d, __u32 gso, __u32 mo)
{
	__u32 lse;
	if (bpf_skb_load_bytes(skb, mo, &lse, 4))
		return;
	lse = bpf_ntohl(lse);
	__u32 label = lse >> 12;
	__u32 ttl = lse & 0xff;
	if (ttl <= 1)
		return;
	struct fp_label *found = bpf_map_lookup_elem(&fp_labels, &label);
	if (!found)
		return;
	struct fp_label sel = *found;
	struct fp_label *e = &sel;
	if (e->action == FP_LABEL_MULTI) {
		// ECMP: the flow's next hop, as the pipeline selects it for this stack.
		__u32 hash;
		if (mpls_flow_hash(skb, mo, &hash))
			return;
		struct fp_nh *nh = group_select(e->group, hash);
		if (!nh || nh->nlabels > 1)
			return;
		e->action = nh->nlabels ? FP_LABEL_SWAP : FP_LABEL_PHP;
		e->out_label = nh->labels[0];
		e->adj = nh->adj;
	}

	if (e->action == FP_LABEL_SWAP) {
		__u32 out_label = e->out_label;
		if (out_label > FP_LABEL_MAX)
			return;
		// The stack must end within FP_MAX_STACK entries, inside the frame.
		__u32 depth = 0;
		if (lse & 0x100) {
			depth = 1;
		} else {
			for (int i = 1; i < FP_MAX_STACK; i++) {
				__u32 x;
				if (bpf_skb_load_bytes(skb, mo + 4 * i, &x, 4))
					return;
				if (bpf_ntohl(x) & 0x100) {
					depth = i + 1;
					break;
				}
			}
		}
		if (!depth)
			return;
		__u32 off = mo + 4 * depth;
		__u32 ver = ip_version(skb, off);
		struct fp_adj adj = e->adj;
		if (!adj_ok(d, &adj, (__u64)skb->len - FP_ETH_HLEN + FP_OUTER4))
			return;
		int tunnel = adj.ifindex & FP_TUNNEL_BIT;
		struct ipinfo ip = {};
		if (!gso) {
			if (skb->len < mo || skb->len - mo > adj.mtu)
				return;
		} else {
			if (parse_ip(skb, off, ver, gso, &ip))
				return;
			if (l3_size(&ip, gso, 4 * depth) > adj.mtu)
				return;
		}
		if (tunnel) {
			// Into a tunnel: the stack is taken off and written back behind the outer
			// headers (the inner headers must point at the IP packet for GSO), so it
			// must be short enough to keep, and skb->protocol the inner packet's.
			if (depth > FP_MAX_PUSH || (ver != 4 && ver != 6) || !proto_is(skb, ver))
				return;
			if (gso && ip.l4proto != IPPROTO_TCP)
				return;
#pragma unroll
			for (int i = 0; i < FP_MAX_PUSH; i++) {
				if (i < depth) {
					__u32 x;
					if (bpf_skb_load_bytes(skb, mo + 4 * i, &x, 4))
						return;
					d->lse[i] = bpf_ntohl(x);
				}
			}
			d->depth = depth;
		}
		d->inner_ver = ver == 4 || ver == 6 ? ver : 0;
		d->verdict = V_SWAP;
		d->in_label = label;
		d->new_lse = (out_label << 12) | (lse & 0xf00) | (ttl - 1);
		d->lse[0] = d->new_lse;
		d->adj = adj;
		return;
	}

	if (e->action == FP_LABEL_PHP && !(lse & 0x100)) {
		// Penultimate-hop pop of a label with labels under it (a P router's pop of the
		// transport label over a VPN label): the next entry goes on to `adj` as the top,
		// its TTL the popped one's - 1 in the uniform model (the pipeline's rule). The
		// stack must end within FP_MAX_STACK entries, over IPv4/IPv6, and skb->protocol
		// be the inner packet's (adjust_room refuses others): frames another fast path
		// pushed.
		if ((e->adj.ifindex & FP_TUNNEL_BIT) || d->decap)
			return;
		__u32 depth = 0;
		for (int i = 1; i < FP_MAX_STACK; i++) {
			__u32 x;
			if (bpf_skb_load_bytes(skb, mo + 4 * i, &x, 4))
				return;
			if (bpf_ntohl(x) & 0x100) {
				depth = i + 1;
				break;
			}
		}
		if (!depth)
			return;
		__u32 next;
		if (bpf_skb_load_bytes(skb, mo + 4, &next, 4))
			return;
		next = bpf_ntohl(next);
		__u32 ver = ip_version(skb, mo + 4 * depth);
		if ((ver != 4 && ver != 6) || !proto_is(skb, ver))
			return;
		if (!gso) {
			if ((__u64)skb->len - mo - 4 > e->adj.mtu)
				return;
		} else {
			struct ipinfo ip;
			if (parse_ip(skb, mo + 4 * depth, ver, gso, &ip) || ip.l4proto != IPPROTO_TCP)
				return;
			if (l3_size(&ip, gso, 4 * (depth - 1)) > e->adj.mtu)
				return;
		}
		d->verdict = V_PHP_LABEL;
		d->in_label = label;
		d->new_lse = e->uniform ? ((next & ~0xffu) | (ttl - 1)) : next;
		d->adj = e->adj;
		return;
	}

	// A pop needs skb->protocol to be the inner packet's (adjust_room refuses others),
	// except after a tunnel, whose decapsulation sets it. A frame some device's transmit
	// sent (TAP, virtio-net, a NIC, another stack through a veth) is MPLS to the kernel:
	// for the pop of its bottom label the program writes the inner packet's EtherType
	// over the MPLS one, marks the skb and sends it into the same port's ingress again
	// (bpf_redirect with BPF_F_INGRESS, where eth_type_trans sets skb->protocol from
	// it); on that second pass it decides again, the label still in front, and pops.
	__u32 ver = ip_version(skb, mo + 4);
	if (ver != 4 && ver != 6)
		return;
	__u32 reproto = !(d->decap || proto_is(skb, ver));
	if (reproto && (mo != FP_ETH_HLEN || skb->protocol != bpf_htons(FP_ETH_P_MPLS_UC)))
		return;
	d->inner_ver = ver;

	if (e->action == FP_LABEL_PHP) {
		// Penultimate-hop pop of the bottom label: the IP packet goes on to `adj`, with
		// no IP hop here (uniform: IP TTL = min(IP TTL, label TTL - 1)). Labels below
		// it are the pipeline's.
		if (!(lse & 0x100) || (e->adj.ifindex & FP_TUNNEL_BIT))
			return;
		struct ipinfo ip;
		if (parse_ip(skb, mo + 4, ver, gso, &ip))
			return;
		if (gso && ip.l4proto != IPPROTO_TCP) // adjust_room keeps only TCP GSO
			return;
		if (l3_size(&ip, gso, 0) > e->adj.mtu) {
			d->too_big = 1;
			return;
		}
		if ((reproto || d->second_pass) && pop_splits_flow(skb, d, &ip, mo + 4, gso))
			return;
		__u32 new_ttl = ip.ttl;
		if (e->uniform && ttl - 1 < new_ttl)
			new_ttl = ttl - 1;
		d->verdict = V_PHP;
		d->reproto = reproto;
		d->in_label = label;
		d->ipver = ver;
		d->new_ttl = new_ttl;
		d->adj = e->adj;
		return;
	}

	if (e->action != FP_LABEL_POP_IP || !(lse & 0x100))
		return;
	struct ipinfo ip;
	if (parse_ip(skb, mo + 4, ver, gso, &ip))
		return;
	if (gso && ip.l4proto != IPPROTO_TCP) // adjust_room keeps only TCP GSO
		return;
	__u32 eff = popped_ttl(e, ttl, ip.ttl);
	if (eff <= 1 || special_dst(&ip))
		return;
	struct fp_route *r = route_lookup(e->vrf, &ip);
	// An ECMP route after a pop is the pipeline's.
	if (!r || r->action != FP_ROUTE_FORWARD || r->group || r->nlabels != 0 ||
	    (r->adj.ifindex & FP_TUNNEL_BIT))
		return;
	if (l3_size(&ip, gso, 0) > r->adj.mtu) {
		d->too_big = 1;
		return;
	}
	if ((reproto || d->second_pass) && pop_splits_flow(skb, d, &ip, mo + 4, gso))
		return;
	d->verdict = V_POP;
	d->reproto = reproto;
	d->in_label = label;
	d->ipver = ver;
	d->new_ttl = eff - 1;
	d->adj = r->adj;
}

static __always_inline void decide_ip(struct __sk_buff *skb, struct decision *d, __u32 ver,
				      __u32 vrf, __u32 gso)
{
	if (!proto_is(skb, ver))
		return;
	struct ipinfo ip;
	if (parse_ip(skb, FP_ETH_HLEN, ver, gso, &ip))
		return;
	if (ip.ttl <= 1 || special_dst(&ip))
		return;
	struct fp_route *found = route_lookup(vrf, &ip);
	if (!found || found->action != FP_ROUTE_FORWARD)
		return;
	struct fp_route route = *found;
	struct fp_route *r = &route;
	if (r->group) {
		// ECMP: the flow's next hop, as the pipeline selects it for this packet.
		struct fp_nh *nh = group_select(r->group, fh_finish(ip_flow_words(skb, FP_ETH_HLEN, FH_SEED)));
		if (!nh)
			return;
		r->nlabels = nh->nlabels;
		__builtin_memcpy(r->labels, nh->labels, sizeof(r->labels));
		r->adj = nh->adj;
	}
	__u32 n = r->nlabels;
	if (n > FP_MAX_PUSH)
		return;
	if (n && gso && ip.l4proto != IPPROTO_TCP) // adjust_room keeps only TCP GSO
		return;
	struct fp_adj adj = r->adj;
	// Into a tunnel only labelled (MPLS-in-UDP carries MPLS).
	if ((adj.ifindex & FP_TUNNEL_BIT) && !n)
		return;
	if (!adj_ok(d, &adj, (__u64)skb->len - FP_ETH_HLEN + FP_OUTER4 + 4 * n))
		return;
	// Too big: TCP sets DF, so the pipeline drops it and answers "too big" (nothing
	// left to overtake), which is why this does not set too_big.
	if (l3_size(&ip, gso, 4 * n) > adj.mtu)
		return;
	if (n && !gso && ip.l4proto == IPPROTO_TCP) {
		__u8 doff;
		if (bpf_skb_load_bytes(skb, FP_ETH_HLEN + ip.l3len + 12, &doff, 1))
			return;
		d->tcp_data = ip.tot_len > ip.l3len + (doff >> 4) * 4;
	}
	__u32 new_ttl = ip.ttl - 1;
	__u32 lttl = r->label_ttl ? (r->label_ttl & 0xff) : new_ttl;
#pragma unroll
	for (int i = 0; i < FP_MAX_PUSH; i++) {
		if (i < n) {
			__u32 l = r->labels[i];
			if (l > FP_LABEL_MAX)
				return;
			d->lse[i] = (l << 12) | (i == n - 1 ? 0x100 : 0) | lttl;
		}
	}
	d->verdict = n ? V_PUSH : V_FORWARD;
	d->nlabels = n;
	d->ipver = ver;
	d->new_ttl = new_ttl;
	d->adj = adj;
}

// How a decision's frame reaches its out port. A port in another namespace than the
// receiving port is reached through that VRF's interface (fp_crossings), or, between two
// VRFs' namespaces (two crossings), by the pipeline. Ports' ifindexes are unique among the
// attached interfaces of all namespaces (userspace leaves a port whose index collides to
// the pipeline), so the out port's entry tells its namespace. A port that transmits
// (fp_port.transmit) takes no labelled super-frame, and is reached from its own namespace
// only (a crossing's far end hands frames on to a veth peer). Nor does it take the single
// TCP segments with data a push would label while the receiving port delivers frames the
// kernel cannot take whole (see big_frames_lately).
static __always_inline void decide_delivery(struct decision *d, __u32 gso)
{
	if (d->verdict == V_PASS || (d->adj.ifindex & FP_TUNNEL_BIT))
		return;
	__u32 out = d->adj.ifindex;
	struct fp_port *op = bpf_map_lookup_elem(&fp_ports, &out);
	__u32 out_netns = op ? op->netns : 0;
	int chain = d->verdict == V_PUSH && d->in_act_chain && out_netns == d->in_netns;
	if (op && op->transmit) {
		int labelled = d->verdict == V_SWAP || d->verdict == V_PUSH || d->verdict == V_PHP_LABEL;
		// Pushes through the action chain: super-frames leave whole in the kernel too, so
		// single segments pushed meanwhile overtake nothing.
		if (out_netns != d->in_netns ||
		    (labelled && !chain && (gso || (d->tcp_data && big_frames_lately(d->in_ifindex))))) {
			d->verdict = V_PASS;
			return;
		}
		d->transmit = 1;
		d->act_chain = chain && gso;
	} else {
		// Into a veth peer, whose stack takes the skb as it is: a label pushed by
		// adjust_room leaves skb->protocol IP under the MPLS EtherType, which the
		// kernel's own MPLS (a peer namespace routing with mpls_router) drops as a bad IP
		// packet; act_mpls makes it MPLS. A vmpls peer pops it with its own chain.
		d->act_chain = chain;
	}
	if (out_netns == d->in_netns)
		return;
	__u32 vrf_netns = d->in_netns ? d->in_netns : out_netns;
	struct fp_crossing *c = bpf_map_lookup_elem(&fp_crossings, &vrf_netns);
	if ((d->in_netns && out_netns) || !c) {
		d->verdict = V_PASS;
		return;
	}
	d->cross = d->in_netns ? c->vrf_ifindex : c->root_ifindex;
	d->cross_at = d->in_netns ? c->root_ifindex : c->vrf_ifindex;
}

// A frame on an underlay interface: a datagram of one of the tunnels (outer IPv4/IPv6
// without options or fragments, UDP to the tunnel's port, from its remote to its local
// address), whose label stack is then decided on as if received on the tunnel. Anything
// else is not a candidate: the kernel's stack and the tunnel's socket get it untouched.
static __always_inline void decide_underlay(struct __sk_buff *skb, struct decision *d, __u32 gso)
{
	__u32 ifindex = skb->ifindex;
	if (!bpf_map_lookup_elem(&fp_underlay, &ifindex))
		return;
	__u8 h[FP_ETH_HLEN + FP_OUTER6] = {};
	if (bpf_skb_load_bytes(skb, 0, h, FP_ETH_HLEN + FP_OUTER4))
		return;
	__u16 et = ((__u16)h[12] << 8) | h[13];
	struct fp_tunnel_key k = {};
	__u32 olen;
	__u32 iplen; // the outer IP packet's length as its header says
	__u8 *ip = h + FP_ETH_HLEN;
	if (et == ETH_P_IP) {
		if (ip[0] != 0x45 || ip[9] != IPPROTO_UDP || (ip[6] & 0x3f) || ip[7])
			return;
		__u32 sum = 0;
#pragma unroll
		for (int i = 0; i < 20; i += 2)
			sum += ((__u32)ip[i] << 8) | ip[i + 1];
		sum = (sum & 0xffff) + (sum >> 16);
		sum = (sum & 0xffff) + (sum >> 16);
		if (sum != 0xffff)
			return;
		k.family = 4;
		__builtin_memcpy(k.remote, ip + 12, 4);
		__builtin_memcpy(k.local, ip + 16, 4);
		olen = FP_OUTER4;
		iplen = ((__u32)ip[2] << 8) | ip[3];
	} else if (et == ETH_P_IPV6) {
		if (bpf_skb_load_bytes(skb, 0, h, FP_ETH_HLEN + FP_OUTER6))
			return;
		if ((ip[0] >> 4) != 6 || ip[6] != IPPROTO_UDP)
			return;
		k.family = 6;
		__builtin_memcpy(k.remote, ip + 8, 16);
		__builtin_memcpy(k.local, ip + 24, 16);
		olen = FP_OUTER6;
		iplen = 40 + (((__u32)ip[4] << 8) | ip[5]);
	} else {
		return;
	}
	if (!proto_is(skb, k.family))
		return;
	__u8 *udp = ip + olen - 8;
	k.port = ((__u16)udp[3] << 8) | udp[2]; // network order, as stored
	__u32 *id = bpf_map_lookup_elem(&fp_tunnel_rx, &k);
	if (!id)
		return;
	d->candidate = 1;
	d->rx_port = *id;
	// One whole datagram, exactly the frame (a super-frame's lengths are its segments'
	// business), with the outer and a label in it: truncated or padded ones are the
	// socket's, which counts them.
	__u32 udplen = ((__u32)udp[4] << 8) | udp[5];
	if (!gso && ((__u64)FP_ETH_HLEN + iplen != skb->len || udplen != iplen - (olen - 8)))
		return;
	if (skb->len < FP_ETH_HLEN + olen + 4)
		return;
	d->decap = olen;
	d->outer_csum = udp[6] || udp[7];
	decide_mpls(skb, d, gso, FP_ETH_HLEN + olen);
	decide_delivery(d, gso);
}

// The one decision both programs take. Modifies nothing.
static __always_inline void decide(struct __sk_buff *skb, struct decision *d)
{
	if (skb->vlan_present || skb->pkt_type != PACKET_HOST)
		return;
	__u32 ifindex = skb->ifindex;
	d->in_ifindex = ifindex;
	__u32 gso = skb->gso_size;
	struct fp_port *port = bpf_map_lookup_elem(&fp_ports, &ifindex);
	if (!port) {
		decide_underlay(skb, d, gso);
		return;
	}
	d->rx_port = ifindex;
	d->in_netns = port->netns;
	d->in_act_chain = port->act_chain;
	__u8 eth[FP_ETH_HLEN];
	if (bpf_skb_load_bytes(skb, 0, eth, FP_ETH_HLEN))
		return;
#pragma unroll
	for (int i = 0; i < 6; i++)
		if (eth[i] != port->mac[i])
			return;
	d->candidate = 1;
	__u32 vrf = port->vrf;
	__u16 et = ((__u16)eth[12] << 8) | eth[13];
	if (skb->mark == FP_MARK_REPROTO && (et == ETH_P_IP || et == ETH_P_IPV6)) {
		// The second pass of a pop (see decide_mpls): the label is still in front of
		// the IP packet, skb->protocol now the packet's. Only that pop may follow.
		d->second_pass = 1;
		if (port->accepts_mpls)
			decide_mpls(skb, d, gso, FP_ETH_HLEN);
		if ((d->verdict != V_POP && d->verdict != V_PHP) || d->reproto)
			d->verdict = V_PASS;
	} else if (et == FP_ETH_P_MPLS_UC) {
		// The label table is global: a port that does not accept labels (a customer's)
		// would reach into the VRFs labels pop into. Passed (V_PASS), never switched.
		if (port->accepts_mpls)
			decide_mpls(skb, d, gso, FP_ETH_HLEN);
	} else if (et == ETH_P_IP) {
		decide_ip(skb, d, 4, vrf, gso);
	} else if (et == ETH_P_IPV6) {
		decide_ip(skb, d, 6, vrf, gso);
	}
	decide_delivery(d, gso);
}

// Writes the IP TTL / hop limit of the header at `off` (IPv4: with the checksum fixed).
static __always_inline int set_ttl(struct __sk_buff *skb, __u32 off, __u32 ver, __u32 ttl)
{
	if (ver == 4) {
		__u16 oldw, neww;
		if (bpf_skb_load_bytes(skb, off + 8, &oldw, 2))
			return -1;
		neww = oldw;
		((__u8 *)&neww)[0] = ttl; // TTL is the first byte of the (TTL, protocol) word
		if (bpf_l3_csum_replace(skb, off + 10, oldw, neww, 2))
			return -1;
		return bpf_skb_store_bytes(skb, off + 8, &neww, 2, 0) ? -1 : 0;
	}
	__u8 hl = ttl;
	return bpf_skb_store_bytes(skb, off + 7, &hl, 1, 0) ? -1 : 0;
}

static __always_inline int set_eth(struct __sk_buff *skb, const struct fp_adj *adj, __u16 et)
{
	__u8 eth[FP_ETH_HLEN];
	__builtin_memcpy(eth, adj->dmac, 6);
	__builtin_memcpy(eth + 6, adj->smac, 6);
	eth[12] = et >> 8;
	eth[13] = et & 0xff;
	return bpf_skb_store_bytes(skb, 0, eth, FP_ETH_HLEN, 0) ? -1 : 0;
}

// Puts an outer IPv4 + UDP header (RFC 7510) and the `n` label stack entries d->lse[] in
// front of the IP packet that follows the Ethernet header. One adjust_room: the skb's inner
// headers point at the labels (inner MAC) and the IP packet, and a GSO super-frame becomes
// SKB_GSO_UDP_TUNNEL, which the kernel cuts at the underlay with these headers on every
// segment. UDP checksum 0: RFC 7510 section 3 allows it over IPv4, and it is the only value
// right for every segment of a super-frame (adjust_room does not ask the kernel for outer
// checksums). The Ethernet header is bpf_redirect_neigh's to write.
static __always_inline int encap(struct __sk_buff *skb, const struct decision *d, __u32 n)
{
	if (n < 1 || n > FP_MAX_PUSH)
		return -1;
	// The flow's hash (of the inner packet, before the outer headers exist) picks the
	// source port: entropy for ECMP in the underlay, one port per flow.
	__u32 hash = bpf_get_hash_recalc(skb);
	__u64 flags = BPF_F_ADJ_ROOM_FIXED_GSO | BPF_F_ADJ_ROOM_ENCAP_L3_IPV4 |
		      BPF_F_ADJ_ROOM_ENCAP_L4_UDP | BPF_F_ADJ_ROOM_ENCAP_L2(4 * n);
	if (bpf_skb_adjust_room(skb, FP_OUTER4 + 4 * n, BPF_ADJ_ROOM_MAC, flags))
		return -1;
	__u32 len = skb->len - FP_ETH_HLEN;
	if (len > 0xffff)
		return -1;
	__u8 o[FP_OUTER4] = {};
	o[0] = 0x45;
	o[2] = len >> 8;
	o[3] = len & 0xff;
	o[6] = 0x40; // DF: the underlay's path MTU is the tunnel's (the pipeline answers "too big")
	o[8] = 64;
	o[9] = IPPROTO_UDP;
	__builtin_memcpy(o + 12, d->tun.local, 4);
	__builtin_memcpy(o + 16, d->tun.remote, 4);
	__u32 sum = 0;
#pragma unroll
	for (int i = 0; i < 20; i += 2)
		sum += ((__u32)o[i] << 8) | o[i + 1];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = ~sum & 0xffff;
	o[10] = sum >> 8;
	o[11] = sum & 0xff;
	__u16 sport = FP_SPORT_BASE | (hash & 0x3fff);
	o[20] = sport >> 8;
	o[21] = sport & 0xff;
	__builtin_memcpy(o + 22, &d->tun.port, 2);
	o[24] = (len - 20) >> 8;
	o[25] = (len - 20) & 0xff;
	if (bpf_skb_store_bytes(skb, FP_ETH_HLEN, o, FP_OUTER4, 0))
		return -1;
#pragma unroll
	for (int i = 0; i < FP_MAX_PUSH; i++) {
		if (i < n) {
			__u32 lse = bpf_htonl(d->lse[i]);
			if (bpf_skb_store_bytes(skb, FP_ETH_HLEN + FP_OUTER4 + 4 * i, &lse, 4, 0))
				return -1;
		}
	}
	return 0;
}

// Whether the outer UDP checksum of a tunnel's datagram (at `off`) is still to be
// computed (CHECKSUM_PARTIAL, csum_start at the outer UDP header): a datagram a local
// socket sent with checksum offload over veth arrives so. Taking the outer headers off
// would leave the kernel a checksum to compute at bytes that are gone (a pipeline's
// socket refuses such frames, a NIC would write into the frame), so such datagrams are
// the tunnel socket's. TC cannot read ip_summed; bpf_l4_csum_replace tells: without
// BPF_F_PSEUDO_HDR it changes nothing of a CHECKSUM_PARTIAL skb, and otherwise adds to the
// field, which the second call takes back out (so the bytes, and a CHECKSUM_COMPLETE sum,
// are as they were).
static __always_inline int outer_csum_partial(struct __sk_buff *skb, __u32 off)
{
	__u16 before, after;
	if (bpf_skb_load_bytes(skb, off, &before, 2))
		return 1;
	if (bpf_l4_csum_replace(skb, off, 0, bpf_htons(1), 2))
		return 1;
	if (bpf_skb_load_bytes(skb, off, &after, 2))
		return 1;
	if (after == before)
		return 1;
	bpf_l4_csum_replace(skb, off, bpf_htons(1), 0, 2);
	return 0;
}

static __always_inline __u64 decap_flags(__u32 ver)
{
	if (ver == 4)
		return BPF_F_ADJ_ROOM_DECAP_L3_IPV4;
	if (ver == 6)
		return BPF_F_ADJ_ROOM_DECAP_L3_IPV6;
	return 0;
}

static __always_inline int act(struct __sk_buff *skb, const struct decision *d)
{
	__u16 ip_et = d->ipver == 4 ? ETH_P_IP : ETH_P_IPV6;
	int tunnel = d->adj.ifindex & FP_TUNNEL_BIT;
	// Out of a tunnel: the outer headers go (with the label, for a pop), and
	// skb->protocol becomes the inner packet's.
	__s32 outer = d->decap;
	switch (d->verdict) {
	case V_SWAP: {
		if (tunnel) {
			// The stack comes off (the network header then points at the IP packet)
			// and goes back rewritten behind the outer headers.
			if (bpf_skb_adjust_room(skb, -(__s32)(4 * d->depth), BPF_ADJ_ROOM_MAC,
						BPF_F_ADJ_ROOM_FIXED_GSO))
				return -1;
			return encap(skb, d, d->depth);
		}
		if (outer && bpf_skb_adjust_room(skb, -outer, BPF_ADJ_ROOM_MAC,
						 BPF_F_ADJ_ROOM_FIXED_GSO | decap_flags(d->inner_ver)))
			return -1;
		__u32 lse = bpf_htonl(d->new_lse);
		if (bpf_skb_store_bytes(skb, FP_ETH_HLEN, &lse, 4, 0))
			return -1;
		return set_eth(skb, &d->adj, FP_ETH_P_MPLS_UC);
	}
	case V_POP:
	case V_PHP:
		if (bpf_skb_adjust_room(skb, -(outer + 4), BPF_ADJ_ROOM_MAC,
					BPF_F_ADJ_ROOM_FIXED_GSO | (outer ? decap_flags(d->ipver) : 0)))
			return -1;
		if (set_ttl(skb, FP_ETH_HLEN, d->ipver, d->new_ttl))
			return -1;
		return set_eth(skb, &d->adj, ip_et);
	case V_PHP_LABEL: {
		if (bpf_skb_adjust_room(skb, -4, BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_FIXED_GSO))
			return -1;
		__u32 next = bpf_htonl(d->new_lse);
		if (bpf_skb_store_bytes(skb, FP_ETH_HLEN, &next, 4, 0))
			return -1;
		return set_eth(skb, &d->adj, FP_ETH_P_MPLS_UC);
	}
	case V_FORWARD:
		if (set_ttl(skb, FP_ETH_HLEN, d->ipver, d->new_ttl))
			return -1;
		return set_eth(skb, &d->adj, ip_et);
	case V_PUSH: {
		__u32 n = d->nlabels;
		if (n < 1 || n > FP_MAX_PUSH)
			return -1;
		if (set_ttl(skb, FP_ETH_HLEN, d->ipver, d->new_ttl))
			return -1;
		if (tunnel)
			return encap(skb, d, n);
		if (bpf_skb_adjust_room(skb, 4 * n, BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_FIXED_GSO))
			return -1;
#pragma unroll
		for (int i = 0; i < FP_MAX_PUSH; i++) {
			if (i < n) {
				__u32 lse = bpf_htonl(d->lse[i]);
				if (bpf_skb_store_bytes(skb, FP_ETH_HLEN + 4 * i, &lse, 4, 0))
					return -1;
			}
		}
		return set_eth(skb, &d->adj, FP_ETH_P_MPLS_UC);
	}
	}
	return -1;
}

// The far end of a crossing: the frame fp_tc handed off, as it left (see fp_handoff).
static __always_inline int handed_off(struct __sk_buff *skb, __u32 *out)
{
	__u32 zero = 0;
	struct fp_handoff *h = bpf_map_lookup_elem(&fp_handoffs, &zero);
	if (!h || !h->at || h->at != skb->ifindex || h->len != skb->len)
		return 0;
	__u8 eth[12];
	if (bpf_skb_load_bytes(skb, 0, eth, 12))
		return 0;
#pragma unroll
	for (int i = 0; i < 12; i++)
		if (eth[i] != h->eth[i])
			return 0;
	h->at = 0;
	*out = h->out;
	return 1;
}

// This CPU's decision on this very frame: the socket filter's, taken once, or else made
// here. Both live in fp_decideds's entry, never on fp_tc's stack (no copy of it, and the
// stack stays under the verifier's 512 bytes): fp_tc never nests on a CPU (it runs with
// bottom halves off) and takes the entry only after the socket filter is done with it.
// NULL only if the array's one entry were missing, which it never is.
static __always_inline struct decision *recall_or_decide(struct __sk_buff *skb, struct fp_counter_set *cs)
{
	__u32 zero = 0;
	struct fp_decided *k = bpf_map_lookup_elem(&fp_decideds, &zero);
	if (!k)
		return NULL;
	__u64 at = k->at;
	k->at = 0;
	if (at && k->ifindex == skb->ifindex && k->len == skb->len && k->mark == skb->mark &&
	    bpf_ktime_get_ns() - at <= FP_RECALL_NS) {
		__u64 head[FP_HEAD / 8];
		int same = !bpf_skb_load_bytes(skb, FP_ETH_HLEN, head, FP_HEAD);
		const __u64 *kept = (const __u64 *)k->head;
#pragma unroll
		for (int i = 0; i < FP_HEAD / 8; i++)
			if (head[i] != kept[i])
				same = 0;
		if (same) {
			count(cs, C_RECALLED, 1);
			return &k->d;
		}
	}
	__builtin_memset(&k->d, 0, sizeof(k->d));
	decide(skb, &k->d);
	return &k->d;
}

// Hands a push or pop to the port's action chain (see fp_acting): everything but adding
// or removing the label stack entries is done here.
static __always_inline int to_action_chain(struct __sk_buff *skb, struct fp_counter_set *cs,
					   const struct decision *d, __u64 in_len)
{
	__u32 zero = 0;
	struct fp_acting *a = bpf_map_lookup_elem(&fp_actings, &zero);
	if (!a)
		goto fail;
	__u32 n = d->nlabels;
	if (d->verdict == V_PUSH) {
		if (n < 1 || n > FP_MAX_PUSH || set_ttl(skb, FP_ETH_HLEN, d->ipver, d->new_ttl) ||
		    set_eth(skb, &d->adj, d->ipver == 4 ? ETH_P_IP : ETH_P_IPV6))
			goto fail;
		a->len = skb->len + 4 * n;
		a->mark = FP_MARK_PUSH + n;
		a->nlabels = n;
		__builtin_memcpy(a->lse, d->lse, sizeof(a->lse));
		a->counter = C_PUSH;
	} else if (d->verdict == V_POP || d->verdict == V_PHP) {
		// The label stays in front of the IP packet until act_mpls pops it.
		if (set_ttl(skb, FP_ETH_HLEN + 4, d->ipver, d->new_ttl) ||
		    set_eth(skb, &d->adj, FP_ETH_P_MPLS_UC))
			goto fail;
		a->len = skb->len - 4;
		a->mark = FP_MARK_POP + d->ipver;
		a->nlabels = 0;
		a->counter = C_POP;
		label_stat(d->in_label, in_len);
	} else {
		goto fail;
	}
	a->out = d->adj.ifindex;
	a->peer = !d->transmit;
	skb->mark = a->mark;
	port_stat(d->rx_port, 0, in_len, d->verdict == V_POP);
	return TC_ACT_UNSPEC;
fail:
	count(cs, C_REDIRECT_FAILED, 1);
	return TC_ACT_SHOT;
}

SEC("classifier") // aya 0.14 names SCHED_CLS sections "classifier"
int fp_tc(struct __sk_buff *skb)
{
	struct fp_counter_set *cs = counter_set();
	__u32 onward;
	if (handed_off(skb, &onward)) {
		long r = bpf_redirect_peer(onward, 0);
		if (r != TC_ACT_REDIRECT) {
			count(cs, C_REDIRECT_FAILED, 1);
			return TC_ACT_SHOT;
		}
		count(cs, C_CROSSED, 1);
		return r;
	}
	struct decision *d = recall_or_decide(skb, cs);
	if (!d)
		return TC_ACT_OK;
	// A super-frame left to the stack (the router's pipeline, or the host) holds the
	// port's TCP data back behind it (see big_frames_lately); one sent on whole from
	// here does not.
	if (!d->candidate) {
		if (skb->gso_size)
			note_big_frame(skb->ifindex);
		return TC_ACT_OK;
	}
	if (d->second_pass) {
		// Counted in on its first pass, and hidden from the router's socket on both: a
		// frame whose pop no longer applies (the tables changed in between) is dropped.
		skb->mark = 0;
		if (d->verdict == V_PASS) {
			count(cs, C_REDIRECT_FAILED, 1);
			return TC_ACT_SHOT;
		}
	} else {
		count(cs, C_FRAMES_IN, 1);
	}
	if (d->verdict == V_PASS) {
		if (d->too_big || skb->gso_size)
			note_big_frame(d->in_ifindex);
		count(cs, C_PASSED, 1);
		return TC_ACT_OK;
	}
	// No socket filter runs on an underlay interface: a datagram left here reaches the
	// tunnel's socket as it came.
	if (d->decap && d->outer_csum && outer_csum_partial(skb, FP_ETH_HLEN + d->decap - 2)) {
		if (skb->gso_size)
			note_big_frame(d->in_ifindex);
		count(cs, C_PASSED, 1);
		return TC_ACT_OK;
	}
	__u64 in_len = skb->len;
	// The socket filter has already dropped this frame from the router's socket: a
	// failure from here on drops it.
	if (d->reproto && d->in_act_chain && !d->cross)
		return to_action_chain(skb, cs, d, in_len);
	if (d->reproto) {
		__u16 et = bpf_htons(d->ipver == 4 ? ETH_P_IP : ETH_P_IPV6);
		long r = bpf_skb_store_bytes(skb, 12, &et, 2, 0) ? -1
								  : bpf_redirect(skb->ifindex, BPF_F_INGRESS);
		if (r != TC_ACT_REDIRECT) {
			count(cs, C_REDIRECT_FAILED, 1);
			return TC_ACT_SHOT;
		}
		skb->mark = FP_MARK_REPROTO;
		count(cs, C_REPASSED, 1);
		return r;
	}
	if (d->act_chain)
		return to_action_chain(skb, cs, d, in_len);
	if (act(skb, d)) {
		count(cs, C_REDIRECT_FAILED, 1);
		return TC_ACT_SHOT;
	}
	__u64 out_len = skb->len;
	int tunnel = d->adj.ifindex & FP_TUNNEL_BIT;
	// Into a tunnel: the underlay interface's egress, the kernel's route and neighbour
	// (resolved or not) for the outer destination; to a transmitting port, its egress;
	// else the next veth's peer. Into another namespace: the VRF interface's peer first,
	// where this program finishes the hand-off.
	long r = tunnel	    ? bpf_redirect_neigh(d->tun.ifindex, NULL, 0, 0)
		 : d->transmit ? bpf_redirect(d->adj.ifindex, 0)
			      : bpf_redirect_peer(d->cross ? d->cross : d->adj.ifindex, 0);
	if (r != TC_ACT_REDIRECT) {
		count(cs, C_REDIRECT_FAILED, 1);
		return TC_ACT_SHOT;
	}
	if (d->cross) {
		__u32 zero = 0;
		struct fp_handoff *h = bpf_map_lookup_elem(&fp_handoffs, &zero);
		if (!h || bpf_skb_load_bytes(skb, 0, h->eth, 12)) {
			count(cs, C_REDIRECT_FAILED, 1);
			return TC_ACT_SHOT;
		}
		h->at = d->cross_at;
		h->out = d->adj.ifindex;
		h->len = out_len;
	}
	switch (d->verdict) {
	case V_SWAP:
		count(cs, C_SWAP, 1);
		label_stat(d->in_label, in_len);
		break;
	case V_POP:
	case V_PHP:
	case V_PHP_LABEL:
		count(cs, C_POP, 1);
		label_stat(d->in_label, in_len);
		break;
	case V_FORWARD:
		count(cs, C_IP_FORWARD, 1);
		break;
	case V_PUSH:
		count(cs, C_PUSH, 1);
		break;
	}
	if (d->decap)
		count(cs, C_DECAP, 1);
	if (tunnel)
		count(cs, C_ENCAP, 1);
	count(cs, C_BYTES, out_len);
	port_stat(d->rx_port, 0, in_len, d->verdict == V_POP || d->verdict == V_SWAP);
	port_stat(d->adj.ifindex, 1, out_len, 0);
	return r;
}

// Chain 1 of a port's action chain: the last step of a push or pop fp_tc handed on (see
// fp_acting), after the chain's act_mpls actions.
SEC("classifier")
int fp_act(struct __sk_buff *skb)
{
	struct fp_counter_set *cs = counter_set();
	__u32 zero = 0;
	struct fp_acting *a = bpf_map_lookup_elem(&fp_actings, &zero);
	if (!a || !a->out || skb->mark != a->mark || skb->len != a->len) {
		count(cs, C_REDIRECT_FAILED, 1);
		return TC_ACT_SHOT;
	}
	__u32 out = a->out;
	__u32 n = a->nlabels;
	a->out = 0;
	skb->mark = 0;
	if (n > FP_MAX_PUSH) {
		count(cs, C_REDIRECT_FAILED, 1);
		return TC_ACT_SHOT;
	}
#pragma unroll
	for (int i = 0; i < FP_MAX_PUSH; i++) {
		if (i < n) {
			__u32 lse = bpf_htonl(a->lse[i]);
			if (bpf_skb_store_bytes(skb, FP_ETH_HLEN + 4 * i, &lse, 4, 0)) {
				count(cs, C_REDIRECT_FAILED, 1);
				return TC_ACT_SHOT;
			}
		}
	}
	long r = a->peer ? bpf_redirect_peer(out, 0) : bpf_redirect(out, 0);
	if (r != TC_ACT_REDIRECT) {
		count(cs, C_REDIRECT_FAILED, 1);
		return TC_ACT_SHOT;
	}
	__u64 out_len = skb->len;
	count(cs, a->counter == C_PUSH ? C_PUSH : C_POP, 1);
	count(cs, C_ACT_MPLS, 1);
	count(cs, C_BYTES, out_len);
	port_stat(out, 1, out_len, 0);
	return r;
}

// fp_xdp's swap: the top label (TTL left, any stack under it) for one out label toward an
// interface that also runs fp_xdp, the frame sent there from the driver (XDP_REDIRECT):
// no skb, no TC, none of the stack's work per frame, where the kernel's own MPLS takes
// each frame through all of it. The same swap fp_tc would do; ECMP, tunnels and out ports
// without fp_xdp are fp_tc's.
static __always_inline int xdp_swap(__u8 *p, __u8 *end, const struct fp_label *e, __u32 lse,
				    __u32 in_ifindex)
{
	struct fp_adj adj = e->adj;
	__u32 out = adj.ifindex;
	if ((out & FP_TUNNEL_BIT) || e->out_label > FP_LABEL_MAX || !bpf_map_lookup_elem(&fp_xdp_ports, &out))
		return XDP_PASS;
	// The stack must end within FP_MAX_STACK entries, inside the frame (else the
	// pipeline drops and counts it).
	int bottom = 0;
	for (int i = 0; i < FP_MAX_STACK; i++) {
		__u8 *entry = p + FP_ETH_HLEN + 4 * i;
		if (entry + 4 > end)
			return XDP_PASS;
		if (entry[2] & 0x01) {
			bottom = 1;
			break;
		}
	}
	if (!bottom)
		return XDP_PASS;
	__u64 len = end - p;
	if (len - FP_ETH_HLEN > adj.mtu)
		return XDP_PASS;
	__u32 new_lse = (e->out_label << 12) | (lse & 0xf00) | ((lse & 0xff) - 1);
	__u32 be = bpf_htonl(new_lse);
	__builtin_memcpy(p + FP_ETH_HLEN, &be, 4);
	__builtin_memcpy(p, adj.dmac, 6);
	__builtin_memcpy(p + 6, adj.smac, 6);
	long r = bpf_redirect(out, 0);
	struct fp_counter_set *cs = counter_set();
	if (r != XDP_REDIRECT) {
		count(cs, C_REDIRECT_FAILED, 1);
		return XDP_DROP;
	}
	count(cs, C_XDP_SWAP, 1);
	count(cs, C_BYTES, len);
	label_stat(lse >> 12, len);
	port_stat(in_ifindex, 0, len, 1);
	port_stat(out, 1, len, 0);
	return XDP_REDIRECT;
}

// fp_xdp (SEC "xdp", on virtio-net NICs that receive labelled frames, see
// FastPath::xdp_switching), in the driver, before GRO:
// - swaps toward another such NIC (see xdp_swap);
// - pops the bottom label of a frame whose label route pops into the port's own VRF, so
//   the segments of a TCP flow that another router's MPLS GSO cut on the way merge again
//   in GRO and go on as one IPv4/IPv6 super-frame (fp_tc forwards it, the out device keeps
//   it whole where it can), where each segment would be popped and sent on alone: the
//   kernel has no MPLS GRO. The pop is exactly the pop fp_tc and the pipeline do: the IP
//   TTL (hop limit) lowered to the label's under the uniform model (the forwarding step
//   that follows decrements it), the label route's VRF the port's (a VPN label pops into
//   another: left to fp_tc and the pipeline).
// Everything else passes untouched: other routers' MACs, customer ports, labels under
// labels, TTLs that expire here, special destinations, malformed stacks.
SEC("xdp")
int fp_xdp(struct xdp_md *ctx)
{
	__u8 *p = (__u8 *)(long)ctx->data;
	__u8 *end = (__u8 *)(long)ctx->data_end;
	// Ethernet, one label, the fixed IPv4 header (IPv6's is checked below).
	if (p + FP_ETH_HLEN + 4 + 20 > end)
		return XDP_PASS;
	if (p[12] != 0x88 || p[13] != 0x47)
		return XDP_PASS;
	__u32 ifindex = ctx->ingress_ifindex;
	struct fp_port *port = bpf_map_lookup_elem(&fp_ports, &ifindex);
	if (!port || !port->accepts_mpls)
		return XDP_PASS;
#pragma unroll
	for (int i = 0; i < 6; i++)
		if (p[i] != port->mac[i])
			return XDP_PASS;
	__u32 lse = ((__u32)p[14] << 24) | ((__u32)p[15] << 16) | ((__u32)p[16] << 8) | p[17];
	__u32 label = lse >> 12;
	__u32 ttl = lse & 0xff;
	if (ttl <= 1)
		return XDP_PASS;
	struct fp_label *e = bpf_map_lookup_elem(&fp_labels, &label);
	if (!e)
		return XDP_PASS;
	if (e->action == FP_LABEL_SWAP)
		return xdp_swap(p, end, e, lse, ifindex);
	if (e->action != FP_LABEL_POP_IP || e->vrf != port->vrf || !(lse & 0x100))
		return XDP_PASS;
	__u8 *ip = p + FP_ETH_HLEN + 4;
	__u32 ver = ip[0] >> 4;
	__u16 et;
	if (ver == 4) {
		__u32 ip_ttl = ip[8];
		__u32 eff = popped_ttl(e, ttl, ip_ttl);
		if (eff <= 1 || special_daddr(4, ip + 16))
			return XDP_PASS;
		if (eff != ip_ttl) {
			// RFC 1624 eqn. 3 on the word the TTL is the high byte of.
			__u32 sum = (__u16)~(((__u32)ip[10] << 8) | ip[11]);
			sum += (__u16)~(ip_ttl << 8) + (eff << 8);
			sum = (sum & 0xffff) + (sum >> 16);
			sum = (sum & 0xffff) + (sum >> 16);
			sum = ~sum & 0xffff;
			ip[8] = eff;
			ip[10] = sum >> 8;
			ip[11] = sum & 0xff;
		}
		et = bpf_htons(ETH_P_IP);
	} else if (ver == 6) {
		if (ip + 40 > end)
			return XDP_PASS;
		__u32 eff = popped_ttl(e, ttl, ip[7]);
		if (eff <= 1 || special_daddr(6, ip + 24))
			return XDP_PASS;
		ip[7] = eff;
		et = bpf_htons(ETH_P_IPV6);
	} else {
		return XDP_PASS;
	}
	__u32 len = end - p;
	// The Ethernet addresses move up over the label (the areas overlap: last byte first),
	// the EtherType becomes the packet's, and the frame starts 4 bytes later.
#pragma unroll
	for (int i = 11; i >= 0; i--)
		p[4 + i] = p[i];
	__builtin_memcpy(p + 16, &et, 2);
	struct fp_counter_set *cs = counter_set();
	if (bpf_xdp_adjust_head(ctx, 4)) {
		// Never (the frame is longer than 4 bytes), but the frame is rewritten already.
		count(cs, C_REDIRECT_FAILED, 1);
		return XDP_DROP;
	}
	count(cs, C_XDP_POP, 1);
	label_stat(label, len);
	return XDP_PASS;
}

SEC("socket")
int fp_sock(struct __sk_buff *skb)
{
	// Decided into the per-CPU entry fp_tc recalls (see fp_decided): no second copy of
	// the decision on this program's stack.
	__u32 zero = 0;
	struct fp_decided *k = bpf_map_lookup_elem(&fp_decideds, &zero);
	if (!k) // never: the array's one entry always exists
		return skb->len;
	k->at = 0;
	__builtin_memset(&k->d, 0, sizeof(k->d));
	decide(skb, &k->d);
	if (skb->pkt_type == PACKET_HOST && skb->len >= FP_ETH_HLEN + FP_HEAD &&
	    !bpf_skb_load_bytes(skb, FP_ETH_HLEN, k->head, FP_HEAD)) {
		k->ifindex = skb->ifindex;
		k->len = skb->len;
		k->mark = skb->mark;
		k->at = bpf_ktime_get_ns();
	}
	return k->d.verdict == V_PASS && !k->d.second_pass ? skb->len : 0;
}

char _license[] SEC("license") = "GPL";
