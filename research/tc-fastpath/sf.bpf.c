// SO_ATTACH_BPF socket filter for the userspace router's AF_PACKET socket:
// drop (return 0) MPLS frames whose top label is in fp_labels (i.e. fast-pathed by tc),
// and count them in the shared map value. fp_labels is NOT created here: the loader
// reuses the fd of the tc program's map (bpf_map_get_fd_by_id).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} fp_labels SEC(".maps");

SEC("socket")
int sf(struct __sk_buff *skb)
{
	__u16 et;
	__u32 lse;
	if (bpf_skb_load_bytes(skb, 12, &et, 2))
		return skb->len;
	if (et != bpf_htons(0x8847))
		return skb->len;
	if (bpf_skb_load_bytes(skb, 14, &lse, 4))
		return skb->len;
	__u32 label = bpf_ntohl(lse) >> 12;
	__u32 *v = bpf_map_lookup_elem(&fp_labels, &label);
	if (v && *v) {
		__sync_fetch_and_add(v, 1);   // value = 1 + number of frames excluded
		return 0;
	}
	return skb->len;
}
char _license[] SEC("license") = "GPL";
