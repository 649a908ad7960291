// vmpls tc fast-path spike: MPLS push / swap / pop on tc ingress + bpf_redirect_peer.
// Compiled once per role/namespace with -D:
//   MODE_PUSH | MODE_SWAP | MODE_POP
//   OUT_IFINDEX=<ifindex in this netns>   (veth whose *peer* gets the frame)
//   SMAC=0x02,..  DMAC=0x02,..            (rewritten Ethernet addresses)
//   IN_LABEL / OUT_LABEL                  (swap/pop match, push/swap output)
//   REDIR_EGRESS=1                        (use bpf_redirect(ifindex,0) instead of _peer)
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <stddef.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ETH_P_MPLS_UC_ 0x8847

// stats[] slots
enum {
	S_SEEN = 0,      // frames the program acted on (matched)
	S_REDIR,         // redirect returned
	S_ADJ_ERR,       // bpf_skb_adjust_room failed
	S_ADJ_ERRNO,     // last adjust_room return value (negated)
	S_GSO,           // matched frames that were GSO (gso_segs>1 or gso_size>0)
	S_MAXLEN,        // max skb->len seen in matched frames
	S_LAST_PROTO,    // last skb->protocol (host order) seen in matched frames
	S_MAX_GSOSZ,     // max gso_size seen
	S_BIG,           // matched frames with len > 1514
	S_PASS,          // frames passed to the stack unmodified (no match)
	S_PROTO_MPLS,    // matched frames whose skb->protocol was ETH_P_MPLS_UC
	S_MAX
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, S_MAX);
	__type(key, __u32);
	__type(value, __u64);
} fp_stats SEC(".maps");

// label table shared with the socket-filter test: key = label, value = 1 if fast-pathed
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} fp_labels SEC(".maps");

static __always_inline void st_add(__u32 k, __u64 v)
{
	__u64 *p = bpf_map_lookup_elem(&fp_stats, &k);
	if (p) __sync_fetch_and_add(p, v);
}
static __always_inline void st_set(__u32 k, __u64 v)
{
	__u64 *p = bpf_map_lookup_elem(&fp_stats, &k);
	if (p) *p = v;
}
static __always_inline void st_max(__u32 k, __u64 v)
{
	__u64 *p = bpf_map_lookup_elem(&fp_stats, &k);
	if (p && *p < v) *p = v;
}

// fast path only for labels userspace has installed in fp_labels
static __always_inline int label_on(__u32 label)
{
	__u32 *v = bpf_map_lookup_elem(&fp_labels, &label);
	return v && *v;
}

static __always_inline void account(struct __sk_buff *skb)
{
	st_add(S_SEEN, 1);
	if (skb->gso_segs > 1 || skb->gso_size)
		st_add(S_GSO, 1);
	if (skb->len > 1514)
		st_add(S_BIG, 1);
	st_max(S_MAXLEN, skb->len);
	st_set(S_LAST_PROTO, bpf_ntohs(skb->protocol));
	st_max(S_MAX_GSOSZ, skb->gso_size);
	if (skb->protocol == bpf_htons(ETH_P_MPLS_UC_))
		st_add(S_PROTO_MPLS, 1);
}

static __always_inline int out(struct __sk_buff *skb, __be16 ethertype)
{
	const __u8 mac[12] = { DMAC, SMAC };
	if (bpf_skb_store_bytes(skb, 0, mac, 12, 0))
		return TC_ACT_SHOT;
	if (bpf_skb_store_bytes(skb, 12, &ethertype, 2, 0))
		return TC_ACT_SHOT;
	st_add(S_REDIR, 1);
#ifdef REDIR_EGRESS
	return bpf_redirect(OUT_IFINDEX, 0);
#else
	return bpf_redirect_peer(OUT_IFINDEX, 0);
#endif
}

SEC("tc")
int fp(struct __sk_buff *skb)
{
	__u16 eproto;
	if (bpf_skb_load_bytes(skb, 12, &eproto, 2))
		return TC_ACT_OK;

#if defined(MODE_PUSH)
	__u8 ttl;
	if (eproto == bpf_htons(ETH_P_IP)) {
		struct iphdr ip;
		if (bpf_skb_load_bytes(skb, 14, &ip, sizeof(ip)))
			return TC_ACT_OK;
		if ((ip.daddr & bpf_htonl(0xffffff00)) != bpf_htonl(0xc6120200)) // 198.18.2.0/24
			goto pass;
		ttl = ip.ttl;
	} else if (eproto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr ip6;
		if (bpf_skb_load_bytes(skb, 14, &ip6, sizeof(ip6)))
			return TC_ACT_OK;
		if (ip6.daddr.in6_u.u6_addr32[0] != bpf_htonl(0x20010db8) ||
		    ip6.daddr.in6_u.u6_addr32[1] != bpf_htonl(0x00020000))  // 2001:db8:2::/64
			goto pass;
		ttl = ip6.hop_limit;
	} else
		goto pass;
	if (ttl <= 1)
		goto pass;
	if (!label_on(OUT_LABEL))
		goto pass;
	account(skb);
	long r = bpf_skb_adjust_room(skb, 4, BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_FIXED_GSO);
	if (r) {
		st_add(S_ADJ_ERR, 1);
		st_set(S_ADJ_ERRNO, -r);
		return TC_ACT_SHOT;
	}
	__u32 lse = bpf_htonl(((__u32)OUT_LABEL << 12) | (1 << 8) | (__u32)(ttl - 1));
	if (bpf_skb_store_bytes(skb, 14, &lse, 4, 0))
		return TC_ACT_SHOT;
	return out(skb, bpf_htons(ETH_P_MPLS_UC_));

#elif defined(MODE_SWAP)
	if (eproto != bpf_htons(ETH_P_MPLS_UC_))
		goto pass;
	__u32 lse;
	if (bpf_skb_load_bytes(skb, 14, &lse, 4))
		return TC_ACT_OK;
	lse = bpf_ntohl(lse);
	if ((lse >> 12) != IN_LABEL)
		goto pass;
	__u32 ttl = lse & 0xff;
	if (ttl <= 1)
		goto pass;  // slow path (ICMP) is userspace's job
	if (!label_on(IN_LABEL))
		goto pass;
	account(skb);
	lse = ((__u32)OUT_LABEL << 12) | (lse & 0xf00) | (ttl - 1);
	lse = bpf_htonl(lse);
	if (bpf_skb_store_bytes(skb, 14, &lse, 4, 0))
		return TC_ACT_SHOT;
	return out(skb, bpf_htons(ETH_P_MPLS_UC_));

#elif defined(MODE_POP)
	if (eproto != bpf_htons(ETH_P_MPLS_UC_))
		goto pass;
	__u32 lse;
	__u8 ver;
	if (bpf_skb_load_bytes(skb, 14, &lse, 4) || bpf_skb_load_bytes(skb, 18, &ver, 1))
		return TC_ACT_OK;
	lse = bpf_ntohl(lse);
	if ((lse >> 12) != IN_LABEL || !(lse & 0x100))
		goto pass;
	if ((lse & 0xff) <= 1)
		goto pass;
	if (!label_on(IN_LABEL))
		goto pass;
	ver >>= 4;
	if (ver != 4 && ver != 6)
		goto pass;
	account(skb);
	long r = bpf_skb_adjust_room(skb, -4, BPF_ADJ_ROOM_MAC, BPF_F_ADJ_ROOM_FIXED_GSO);
	if (r) {
		st_add(S_ADJ_ERR, 1);
		st_set(S_ADJ_ERRNO, -r);
		return TC_ACT_SHOT;
	}
	if (ver == 4) {
		// decrement IPv4 TTL, incremental header checksum fix
		__u16 oldw, neww;
		if (bpf_skb_load_bytes(skb, 14 + offsetof(struct iphdr, ttl), &oldw, 2))
			return TC_ACT_SHOT;
		__u8 *b = (__u8 *)&neww;
		neww = oldw;
		b[0] -= 1;                       // ttl is the first byte of the (ttl,protocol) word
		if (bpf_l3_csum_replace(skb, 14 + offsetof(struct iphdr, check), oldw, neww, 2))
			return TC_ACT_SHOT;
		if (bpf_skb_store_bytes(skb, 14 + offsetof(struct iphdr, ttl), &neww, 2, 0))
			return TC_ACT_SHOT;
		return out(skb, bpf_htons(ETH_P_IP));
	} else {
		__u8 hl;
		if (bpf_skb_load_bytes(skb, 14 + offsetof(struct ipv6hdr, hop_limit), &hl, 1))
			return TC_ACT_SHOT;
		hl -= 1;
		if (bpf_skb_store_bytes(skb, 14 + offsetof(struct ipv6hdr, hop_limit), &hl, 1, 0))
			return TC_ACT_SHOT;
		return out(skb, bpf_htons(ETH_P_IPV6));
	}
#else
#error "MODE_PUSH|MODE_SWAP|MODE_POP"
#endif
pass:
	st_add(S_PASS, 1);
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
