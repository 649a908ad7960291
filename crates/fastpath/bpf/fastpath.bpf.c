// SPDX-License-Identifier: GPL-2.0
//
// vmpls in-kernel MPLS fast path (TC ingress + bpf_redirect_peer on veth).
//
// Two programs share one decision function and the maps below:
//   fp_tc    (SEC "classifier", SCHED_CLS, tcx ingress on the router's veth ports): swaps, pops,
//            pushes or IP-forwards the frames the maps describe and hands them on with
//            bpf_redirect_peer(out veth); everything else TC_ACT_OK (the router's slow path).
//   fp_sock  (SEC "socket", SOCKET_FILTER, SO_ATTACH_BPF on the router's AF_PACKET SOCK_RAW
//            socket): AF_PACKET taps run before tc ingress, so this returns 0 (drop)
//            exactly for the frames fp_tc will redirect and keeps everything else.
//
// The decision reads the frame only with bpf_skb_load_bytes (works in both program types)
// and is complete before anything is modified: a frame that is passed on is untouched.
// See crates/fastpath/src/lib.rs for the map layout as seen from userspace.

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
#define FP_ROUTE_LOCAL 1
#define FP_ROUTE_FORWARD 2

struct fp_adj {
	__u32 ifindex; // out veth in this netns; its peer receives the frame
	__u32 mtu;     // L3 bytes the out port takes
	__u8 dmac[6];
	__u8 smac[6];
};

struct fp_port {
	__u32 vrf;
	__u8 mac[6];
	__u8 pad[2];
};

struct fp_label {
	__u32 action; // FP_LABEL_*
	__u32 out_label;
	__u32 vrf;
	__u32 uniform;
	struct fp_adj adj;
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
};

_Static_assert(sizeof(struct fp_adj) == 20, "fp_adj layout");
_Static_assert(sizeof(struct fp_port) == 12, "fp_port layout");
_Static_assert(sizeof(struct fp_label) == 36, "fp_label layout");
_Static_assert(sizeof(struct fp_key4) == 12, "fp_key4 layout");
_Static_assert(sizeof(struct fp_key6) == 24, "fp_key6 layout");
_Static_assert(sizeof(struct fp_route) == 48, "fp_route layout");

enum {
	C_FRAMES_IN = 0,
	C_SWAP,
	C_PUSH,
	C_POP,
	C_IP_FORWARD,
	C_PASSED,
	C_BYTES,
	C_REDIRECT_FAILED,
	C_MAX
};

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
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, C_MAX);
	__type(key, __u32);
	__type(value, __u64);
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

enum verdict { V_PASS = 0, V_SWAP, V_POP, V_FORWARD, V_PUSH, V_PHP };

struct decision {
	__u32 verdict;   // V_*
	__u32 candidate; // port known, untagged, PACKET_HOST, to the port's MAC
	__u32 in_label;  // V_SWAP, V_POP
	__u32 new_lse;   // V_SWAP: the rewritten top entry, host order
	__u32 ipver;     // V_POP, V_FORWARD, V_PUSH: 4 or 6
	__u32 new_ttl;   // V_POP, V_FORWARD, V_PUSH: IP TTL / hop limit to write
	__u32 nlabels;   // V_PUSH
	__u32 lse[FP_MAX_PUSH]; // V_PUSH: entries to write, host order, [0] outermost
	struct fp_adj adj;
};

struct ipinfo {
	__u32 ver;
	__u32 ttl;
	__u32 l3len;   // IP header length (IPv6: the fixed 40 bytes)
	__u32 l4len;   // TCP/UDP header length, GSO frames only
	__u32 l4proto; // GSO frames only
	__u32 tot_len; // IPv4 total length, IPv6 40 + payload length
	__u8 daddr[16];
};

static __always_inline void count(__u32 idx, __u64 v)
{
	__u64 *p = bpf_map_lookup_elem(&fp_counters, &idx);
	if (p)
		*p += v;
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

static __always_inline void port_stat(__u32 ifindex, int tx, __u64 bytes)
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
		if (hlen > 20 && bpf_skb_load_bytes(skb, off + 20, h + 20, hlen - 20))
			return -1;
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
		ip->l4proto = h[9];
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
		if (!gso) {
			if ((__u64)off + ip->tot_len != skb->len)
				return -1;
			return 0;
		}
		ip->l4proto = h[6]; // extension headers: not parsed, such GSO frames pass
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
// IPv6 multicast and link-local.
static __always_inline int special_dst(const struct ipinfo *ip)
{
	if (ip->ver == 4)
		return (ip->daddr[0] & 0xf0) == 0xe0 ||
		       (ip->daddr[0] == 0xff && ip->daddr[1] == 0xff && ip->daddr[2] == 0xff &&
			ip->daddr[3] == 0xff);
	return ip->daddr[0] == 0xff || (ip->daddr[0] == 0xfe && (ip->daddr[1] & 0xc0) == 0x80);
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

static __always_inline void decide_mpls(struct __sk_buff *skb, struct decision *d, __u32 gso)
{
	__u32 lse;
	if (bpf_skb_load_bytes(skb, FP_ETH_HLEN, &lse, 4))
		return;
	lse = bpf_ntohl(lse);
	__u32 label = lse >> 12;
	__u32 ttl = lse & 0xff;
	if (ttl <= 1)
		return;
	struct fp_label *e = bpf_map_lookup_elem(&fp_labels, &label);
	if (!e)
		return;

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
				if (bpf_skb_load_bytes(skb, FP_ETH_HLEN + 4 * i, &x, 4))
					return;
				if (bpf_ntohl(x) & 0x100) {
					depth = i + 1;
					break;
				}
			}
		}
		if (!depth)
			return;
		if (!gso) {
			if (skb->len < FP_ETH_HLEN || skb->len - FP_ETH_HLEN > e->adj.mtu)
				return;
		} else {
			__u32 off = FP_ETH_HLEN + 4 * depth;
			struct ipinfo ip;
			if (parse_ip(skb, off, ip_version(skb, off), gso, &ip))
				return;
			if (l3_size(&ip, gso, 4 * depth) > e->adj.mtu)
				return;
		}
		d->verdict = V_SWAP;
		d->in_label = label;
		d->new_lse = (out_label << 12) | (lse & 0xf00) | (ttl - 1);
		d->adj = e->adj;
		return;
	}

	if (e->action == FP_LABEL_PHP) {
		// Penultimate-hop pop of the bottom label: the IP packet goes on to `adj`, with
		// no IP hop here (uniform: IP TTL = min(IP TTL, label TTL - 1)). Labels below
		// it are the pipeline's.
		if (!(lse & 0x100))
			return;
		__u32 ver = ip_version(skb, FP_ETH_HLEN + 4);
		if ((ver != 4 && ver != 6) || !proto_is(skb, ver))
			return;
		struct ipinfo ip;
		if (parse_ip(skb, FP_ETH_HLEN + 4, ver, gso, &ip))
			return;
		if (gso && ip.l4proto != IPPROTO_TCP) // adjust_room keeps only TCP GSO
			return;
		if (l3_size(&ip, gso, 0) > e->adj.mtu)
			return;
		__u32 new_ttl = ip.ttl;
		if (e->uniform && ttl - 1 < new_ttl)
			new_ttl = ttl - 1;
		d->verdict = V_PHP;
		d->in_label = label;
		d->ipver = ver;
		d->new_ttl = new_ttl;
		d->adj = e->adj;
		return;
	}

	if (e->action != FP_LABEL_POP_IP || !(lse & 0x100))
		return;
	__u32 ver = ip_version(skb, FP_ETH_HLEN + 4);
	if ((ver != 4 && ver != 6) || !proto_is(skb, ver))
		return;
	struct ipinfo ip;
	if (parse_ip(skb, FP_ETH_HLEN + 4, ver, gso, &ip))
		return;
	if (gso && ip.l4proto != IPPROTO_TCP) // adjust_room keeps only TCP GSO
		return;
	__u32 eff = ip.ttl;
	if (e->uniform && ttl < eff)
		eff = ttl;
	if (eff <= 1 || special_dst(&ip))
		return;
	struct fp_route *r = route_lookup(e->vrf, &ip);
	if (!r || r->action != FP_ROUTE_FORWARD || r->nlabels != 0)
		return;
	if (l3_size(&ip, gso, 0) > r->adj.mtu)
		return;
	d->verdict = V_POP;
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
	struct fp_route *r = route_lookup(vrf, &ip);
	if (!r || r->action != FP_ROUTE_FORWARD)
		return;
	__u32 n = r->nlabels;
	if (n > FP_MAX_PUSH)
		return;
	if (n && gso && ip.l4proto != IPPROTO_TCP) // adjust_room keeps only TCP GSO
		return;
	if (l3_size(&ip, gso, 4 * n) > r->adj.mtu)
		return;
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
	d->adj = r->adj;
}

// The one decision both programs take. Modifies nothing.
static __always_inline void decide(struct __sk_buff *skb, struct decision *d)
{
	if (skb->vlan_present || skb->pkt_type != PACKET_HOST)
		return;
	__u32 ifindex = skb->ifindex;
	struct fp_port *port = bpf_map_lookup_elem(&fp_ports, &ifindex);
	if (!port)
		return;
	__u8 eth[FP_ETH_HLEN];
	if (bpf_skb_load_bytes(skb, 0, eth, FP_ETH_HLEN))
		return;
#pragma unroll
	for (int i = 0; i < 6; i++)
		if (eth[i] != port->mac[i])
			return;
	d->candidate = 1;
	__u32 vrf = port->vrf;
	__u32 gso = skb->gso_size;
	__u16 et = ((__u16)eth[12] << 8) | eth[13];
	if (et == FP_ETH_P_MPLS_UC)
		decide_mpls(skb, d, gso);
	else if (et == ETH_P_IP)
		decide_ip(skb, d, 4, vrf, gso);
	else if (et == ETH_P_IPV6)
		decide_ip(skb, d, 6, vrf, gso);
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

static __always_inline int act(struct __sk_buff *skb, const struct decision *d)
{
	__u16 ip_et = d->ipver == 4 ? ETH_P_IP : ETH_P_IPV6;
	switch (d->verdict) {
	case V_SWAP: {
		__u32 lse = bpf_htonl(d->new_lse);
		if (bpf_skb_store_bytes(skb, FP_ETH_HLEN, &lse, 4, 0))
			return -1;
		return set_eth(skb, &d->adj, FP_ETH_P_MPLS_UC);
	}
	case V_POP:
	case V_PHP:
		if (bpf_skb_adjust_room(skb, -4, BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_FIXED_GSO))
			return -1;
		if (set_ttl(skb, FP_ETH_HLEN, d->ipver, d->new_ttl))
			return -1;
		return set_eth(skb, &d->adj, ip_et);
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

SEC("classifier") // aya 0.14 names SCHED_CLS sections "classifier"
int fp_tc(struct __sk_buff *skb)
{
	struct decision d = {};
	decide(skb, &d);
	if (!d.candidate)
		return TC_ACT_OK;
	count(C_FRAMES_IN, 1);
	if (d.verdict == V_PASS) {
		count(C_PASSED, 1);
		return TC_ACT_OK;
	}
	__u32 in_ifindex = skb->ifindex;
	__u64 in_len = skb->len;
	// The socket filter has already dropped this frame from the router's socket: a
	// failure from here on drops it.
	if (act(skb, &d)) {
		count(C_REDIRECT_FAILED, 1);
		return TC_ACT_SHOT;
	}
	__u64 out_len = skb->len;
	long r = bpf_redirect_peer(d.adj.ifindex, 0);
	if (r != TC_ACT_REDIRECT) {
		count(C_REDIRECT_FAILED, 1);
		return TC_ACT_SHOT;
	}
	switch (d.verdict) {
	case V_SWAP:
		count(C_SWAP, 1);
		label_stat(d.in_label, in_len);
		break;
	case V_POP:
	case V_PHP:
		count(C_POP, 1);
		label_stat(d.in_label, in_len);
		break;
	case V_FORWARD:
		count(C_IP_FORWARD, 1);
		break;
	case V_PUSH:
		count(C_PUSH, 1);
		break;
	}
	count(C_BYTES, out_len);
	port_stat(in_ifindex, 0, in_len);
	port_stat(d.adj.ifindex, 1, out_len);
	return r;
}

SEC("socket")
int fp_sock(struct __sk_buff *skb)
{
	struct decision d = {};
	decide(skb, &d);
	return d.verdict == V_PASS ? skb->len : 0;
}

char _license[] SEC("license") = "GPL";
