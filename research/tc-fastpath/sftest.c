// usage: sftest <fp_labels map id> <ifname> <seconds>
// Opens two AF_PACKET sockets on ifname (one plain, one with the eBPF socket filter that
// shares the tc program's fp_labels map) and counts frames (and MPLS frames) on each.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <errno.h>
#include <poll.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <sys/socket.h>
#include <linux/if_packet.h>
#include <linux/if_ether.h>
#include <bpf/libbpf.h>
#include <bpf/bpf.h>

static int mksock(int ifindex)
{
	int s = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, htons(ETH_P_ALL));
	if (s < 0) { perror("socket"); exit(1); }
	struct sockaddr_ll sll = { .sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL), .sll_ifindex = ifindex };
	if (bind(s, (void *)&sll, sizeof(sll))) { perror("bind"); exit(1); }
	int rb = 64 << 20; setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &rb, sizeof(rb));
	return s;
}

int main(int argc, char **argv)
{
	if (argc < 4) { fprintf(stderr, "usage\n"); return 2; }
	int map_id = atoi(argv[1]), ifindex = if_nametoindex(argv[2]), secs = atoi(argv[3]);
	int mfd = bpf_map_get_fd_by_id(map_id);
	if (mfd < 0) { perror("bpf_map_get_fd_by_id"); return 1; }
	struct bpf_object *obj = bpf_object__open_file("sf.bpf.o", NULL);
	if (!obj) { perror("open sf.bpf.o"); return 1; }
	struct bpf_map *m = bpf_object__find_map_by_name(obj, "fp_labels");
	int err = bpf_map__reuse_fd(m, mfd);
	if (err) { fprintf(stderr, "reuse_fd: %d\n", err); return 1; }
	if ((err = bpf_object__load(obj))) { fprintf(stderr, "load: %d\n", err); return 1; }
	int pfd = bpf_program__fd(bpf_object__find_program_by_name(obj, "sf"));
	printf("socket filter prog fd %d loaded, sharing tc map id %d (fd %d)\n", pfd, map_id, mfd);

	int s_plain = mksock(ifindex), s_filt = mksock(ifindex);
	if (setsockopt(s_filt, SOL_SOCKET, SO_ATTACH_BPF, &pfd, sizeof(pfd))) { perror("SO_ATTACH_BPF"); return 1; }
	/* drain anything queued before the filter was attached */
	static unsigned char buf[70000];
	while (recv(s_filt, buf, sizeof(buf), MSG_TRUNC) >= 0) ;

	long n[2] = {0}, mpls[2] = {0}, big[2] = {0}, maxlen[2] = {0};
	time_t end = time(NULL) + secs;
	struct pollfd pf[2] = { { s_plain, POLLIN }, { s_filt, POLLIN } };
	while (time(NULL) < end) {
		poll(pf, 2, 200);
		for (int i = 0; i < 2; i++) {
			ssize_t r;
			while ((r = recv(pf[i].fd, buf, sizeof(buf), MSG_TRUNC)) >= 0) {
				n[i]++;
				if (r > maxlen[i]) maxlen[i] = r;
				if (r > 1514) big[i]++;
				if (r >= 14 && buf[12] == 0x88 && buf[13] == 0x47) mpls[i]++;
			}
		}
	}
	printf("plain  AF_PACKET: frames=%ld mpls=%ld >1514=%ld maxlen=%ld\n", n[0], mpls[0], big[0], maxlen[0]);
	printf("filter AF_PACKET: frames=%ld mpls=%ld >1514=%ld maxlen=%ld\n", n[1], mpls[1], big[1], maxlen[1]);
	struct tpacket_stats st[2]; socklen_t l = sizeof(st[0]);
	getsockopt(s_plain, SOL_PACKET, PACKET_STATISTICS, &st[0], &l); l = sizeof(st[1]);
	getsockopt(s_filt, SOL_PACKET, PACKET_STATISTICS, &st[1], &l);
	printf("PACKET_STATISTICS plain: packets=%u drops=%u ; filter: packets=%u drops=%u\n",
	       st[0].tp_packets, st[0].tp_drops, st[1].tp_packets, st[1].tp_drops);
	return 0;
}
