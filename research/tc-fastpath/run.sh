#!/bin/bash
# vmpls tc/eBPF MPLS fast-path spike. Reproduces everything end to end; cleans up on exit.
#   ./run.sh > full.log full run (baseline + fast path, v4/v6, core MTU 1500/65535, captures,
#                       socket-filter test, bpf_redirect egress variant)
# Needs: apt-get install clang llvm libbpf-dev bpftool gcc iperf3 ethtool tcpdump jq iproute2 python3
# Files: fp.bpf.c (tc push/swap/pop), sf.bpf.c + sftest.c (AF_PACKET socket-filter map-sharing test)
# Output: out.<pid>/ (iperf JSON, pcaps, nstat snapshots, results.tsv); full log to stdout.
# Env: T=10 (iperf seconds)  MTUS="65535 1500"  SKIP_SF=1  SKIP_EGRESS=1
set -u
cd "$(dirname "$0")"
D=$PWD
T=${T:-10}
MTUS=${MTUS:-"65535 1500"}
P=tcs$$-
CE1=${P}ce1 PE1=${P}pe1 PC=${P}p PE2=${P}pe2 CE2=${P}ce2
NSS="$CE1 $PE1 $PC $PE2 $CE2"
OUT=$D/out.$$
mkdir -p "$OUT" "$OUT/obj"
CFLAGS="-O2 -g -target bpf -I/usr/include/x86_64-linux-gnu"

cleanup() {
	set +e
	[ -n "${TRI:-}" ] && { echo 0 > "$TRI/events/skb/kfree_skb/enable"; rmdir "$TRI"; }
	[ -n "${TRMOUNTED:-}" ] && umount /sys/kernel/tracing
	[ -f "$OUT/iperf.pid" ] && kill "$(cat "$OUT/iperf.pid")" 2>/dev/null
	for pid in $(jobs -p); do kill "$pid" 2>/dev/null; done
	for n in $NSS; do ip netns del "$n" 2>/dev/null; done
	echo "cleanup done (netns $P* removed)"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

x() { local n=$1; shift; ip netns exec "$n" "$@"; }
log() { echo "== $*"; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

# ---------------------------------------------------------------- topology
for n in $NSS; do ip netns add "$n"; x "$n" ip link set lo up; done
# name pairs: ns:if mac
mkpair() { # nsA ifA macA nsB ifB macB
	ip link add "$2" netns "$1" address "$3" type veth peer name "$5" netns "$4" address "$6"
	x "$1" ip link set "$2" up; x "$4" ip link set "$5" up
}
M_CE1=02:00:00:00:01:01
M_PE1W=02:00:00:00:02:01 M_PE1E=02:00:00:00:02:02
M_PW=02:00:00:00:03:01   M_PE=02:00:00:00:03:02
M_PE2W=02:00:00:00:04:01 M_PE2E=02:00:00:00:04:02
M_CE2=02:00:00:00:05:01
mkpair "$CE1" to-pe1 $M_CE1  "$PE1" to-ce1 $M_PE1W
mkpair "$PE1" to-p   $M_PE1E "$PC"  to-pe1 $M_PW
mkpair "$PC"  to-pe2 $M_PE   "$PE2" to-p   $M_PE2W
mkpair "$PE2" to-ce2 $M_PE2E "$CE2" to-pe2 $M_CE2

addr() { x "$1" ip addr add "$3" dev "$2"; x "$1" ip -6 addr add "$4" dev "$2" nodad; }
addr "$CE1" to-pe1 198.18.1.2/24  2001:db8:1::2/64
addr "$PE1" to-ce1 198.18.1.1/24  2001:db8:1::1/64
addr "$PE1" to-p   198.18.10.1/24 2001:db8:10::1/64
addr "$PC"  to-pe1 198.18.10.2/24 2001:db8:10::2/64
addr "$PC"  to-pe2 198.18.11.1/24 2001:db8:11::1/64
addr "$PE2" to-p   198.18.11.2/24 2001:db8:11::2/64
addr "$PE2" to-ce2 198.18.2.1/24  2001:db8:2::1/64
addr "$CE2" to-pe2 198.18.2.2/24  2001:db8:2::2/64
neigh() { x "$1" ip neigh replace "$3" lladdr "$4" dev "$2" nud permanent; }
neigh "$CE1" to-pe1 198.18.1.1 $M_PE1W;  neigh "$CE1" to-pe1 2001:db8:1::1 $M_PE1W
neigh "$PE1" to-ce1 198.18.1.2 $M_CE1;   neigh "$PE1" to-ce1 2001:db8:1::2 $M_CE1
neigh "$PE1" to-p 198.18.10.2 $M_PW;     neigh "$PE1" to-p 2001:db8:10::2 $M_PW
neigh "$PC" to-pe1 198.18.10.1 $M_PE1E;  neigh "$PC" to-pe1 2001:db8:10::1 $M_PE1E
neigh "$PC" to-pe2 198.18.11.2 $M_PE2W;  neigh "$PC" to-pe2 2001:db8:11::2 $M_PE2W
neigh "$PE2" to-p 198.18.11.1 $M_PE;     neigh "$PE2" to-p 2001:db8:11::1 $M_PE
neigh "$PE2" to-ce2 198.18.2.2 $M_CE2;   neigh "$PE2" to-ce2 2001:db8:2::2 $M_CE2
neigh "$CE2" to-pe2 198.18.2.1 $M_PE2E;  neigh "$CE2" to-pe2 2001:db8:2::1 $M_PE2E
for n in $PE1 $PC $PE2; do
	x "$n" sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
done
x "$CE1" ip route add default via 198.18.1.1;  x "$CE1" ip -6 route add default via 2001:db8:1::1
x "$CE2" ip route add default via 198.18.2.1;  x "$CE2" ip -6 route add default via 2001:db8:2::1
x "$PE1" ip route add 198.18.2.0/24 via 198.18.10.2;  x "$PE1" ip -6 route add 2001:db8:2::/64 via 2001:db8:10::2
x "$PC"  ip route add 198.18.2.0/24 via 198.18.11.2;  x "$PC"  ip -6 route add 2001:db8:2::/64 via 2001:db8:11::2
x "$PC"  ip route add 198.18.1.0/24 via 198.18.10.1;  x "$PC"  ip -6 route add 2001:db8:1::/64 via 2001:db8:10::1
x "$PE2" ip route add 198.18.1.0/24 via 198.18.11.1;  x "$PE2" ip -6 route add 2001:db8:1::/64 via 2001:db8:11::1

x "$CE2" iperf3 -s -D -I "$OUT/iperf.pid"
sleep 0.5
x "$CE1" ping -c1 -W2 198.18.2.2 >/dev/null && x "$CE1" ping -6 -c1 -W2 2001:db8:2::2 >/dev/null \
	|| { echo "FATAL: no connectivity"; exit 1; }
log "topology up ($NSS); veth offloads on p:to-pe1:"
x "$PC" ethtool -k to-pe1 | grep -E '^(tcp-segmentation-offload|generic-segmentation-offload|generic-receive-offload|tx-checksumming|rx-checksumming):'
DMESG0=$(dmesg | wc -l)

set_core_mtu() {
	x "$PE1" ip link set to-p mtu "$1";  x "$PC" ip link set to-pe1 mtu "$1"
	x "$PC" ip link set to-pe2 mtu "$1"; x "$PE2" ip link set to-p mtu "$1"
}

# ---------------------------------------------------------------- tc programs
ifidx() { x "$1" cat "/sys/class/net/$2/ifindex"; }
macdef() { echo "0x${1//:/,0x}"; }
build() { # name mode outns outif smac dmac inlabel outlabel [extra]
	clang $CFLAGS -DMODE_$2 -DOUT_IFINDEX="$(ifidx "$3" "$4")" -DSMAC="$(macdef "$5")" -DDMAC="$(macdef "$6")" \
		-DIN_LABEL="$7" -DOUT_LABEL="$8" ${9:-} -c fp.bpf.c -o "$OUT/obj/$1.o" || exit 1
}
REDIR_FLAG=""
build_all() {
	build pe1 PUSH "$PE1" to-p   $M_PE1E $M_PW   0    1002 "$REDIR_FLAG"
	build p   SWAP "$PC"  to-pe2 $M_PE   $M_PE2W 1002 2002 "$REDIR_FLAG"
	build pe2 POP  "$PE2" to-ce2 $M_PE2E $M_CE2  2002 0    "$REDIR_FLAG"
}
le32() { printf '0x%02x 0x%02x 0x%02x 0x%02x' $(($1&255)) $((($1>>8)&255)) $((($1>>16)&255)) $((($1>>24)&255)); }
prog_id() { x "$1" tc filter show dev "$2" ingress | sed -n 's/.* id \([0-9]*\).*/\1/p' | head -1; }
map_id() { # ns dev mapname
	local pid; pid=$(prog_id "$1" "$2")
	for m in $(bpftool prog show id "$pid" -j | jq -r '.map_ids[]'); do
		[ "$(bpftool map show id "$m" -j | jq -r .name)" = "$3" ] && echo "$m"
	done
}
attach1() { # ns dev obj label
	x "$1" tc qdisc add dev "$2" clsact
	x "$1" tc filter add dev "$2" ingress bpf da obj "$OUT/obj/$3.o" sec tc || { echo "FATAL: tc attach $3"; exit 1; }
	# control plane: install the label in the fast-path table
	bpftool map update id "$(map_id "$1" "$2" fp_labels)" key $(le32 "$4") value 1 0 0 0
}
attach_fp() {
	attach1 "$PE1" to-ce1 pe1 1002
	attach1 "$PC"  to-pe1 p   1002
	attach1 "$PE2" to-p   pe2 2002
}
detach_fp() {
	x "$PE1" tc qdisc del dev to-ce1 clsact 2>/dev/null
	x "$PC"  tc qdisc del dev to-pe1 clsact 2>/dev/null
	x "$PE2" tc qdisc del dev to-p   clsact 2>/dev/null
}
stats() { # print fp_stats of the three programs
	for spec in "$PE1 to-ce1 pe1" "$PC to-pe1 p" "$PE2 to-p pe2"; do
		set -- $spec
		bpftool map dump id "$(map_id "$1" "$2" fp_stats)" -j | python3 -c '
import json,sys
names="seen redir adj_err adj_errno gso maxlen last_proto max_gso_size big pass skbproto_mpls".split()
d={}
for e in json.load(sys.stdin):
    k=e.get("key"); v=e.get("value")
    if isinstance(k,list): k=int("".join(x[2:] for x in reversed(k)),16)
    if isinstance(v,list): v=int("".join(x[2:] for x in reversed(v)),16)
    d[k]=v
print("  %-4s"%sys.argv[1]+" ".join("%s=%s"%(n, hex(d[i]) if n=="last_proto" else d[i]) for i,n in enumerate(names) if i in d))
' "$3:"
	done
}

# ---------------------------------------------------------------- measurement
NSTAT_KEYS='TcpInCsumErrors|TcpRetransSegs|IpInDiscards|IpInHdrErrors|IpInAddrErrors|Ip6InDiscards|Ip6InHdrErrors|Ip6InAddrErrors|Ip6InTooBigErrors|TcpExtTCPRcvQDrop|TcpExtTCPOFOQueue|TcpExtTCPBacklogDrop|IpExtInCsumErrors|Ip6InCsumErrors|UdpInCsumErrors|TcpInErrs|IpInReceives|Ip6InReceives|TcpInSegs'
nsnap() { x "$1" nstat -az 2>/dev/null | awk '{print $1, $2}'; }
ndiff() { # before after -> nonzero deltas of interest
	join <(sort "$1") <(sort "$2") | awk -v re="^($NSTAT_KEYS)\$" '$1 ~ re && $3-$2 != 0 {printf " %s=%d", $1, $3-$2}'
}
rxdrops() { x "$1" ip -s -j link show dev "$2" | jq -r '.[0].stats64.rx | "rx_pkts=\(.packets) rx_dropped=\(.dropped) rx_errors=\(.errors)"'; }
RES=$OUT/results.tsv
printf 'mode\tfam\tcore_mtu\tGbit/s(recv)\tretrans\tload_before\tload_after\n' > "$RES"
run_iperf() { # mode fam mtu
	local dst=198.18.2.2; [ "$2" = v6 ] && dst=2001:db8:2::2
	local tag="$1-$2-$3" lb la
	nsnap "$CE2" > "$OUT/$tag.ce2.before"
	local drop0; drop0=$(rxdrops "$CE2" to-pe2)
	lb=$(load)
	x "$CE1" timeout $((T+20)) iperf3 -c "$dst" -t "$T" -J > "$OUT/$tag.json" 2>&1
	la=$(load)
	nsnap "$CE2" > "$OUT/$tag.ce2.after"
	local g r
	g=$(jq -r '.end.sum_received.bits_per_second/1e9 | .*100 | round/100' "$OUT/$tag.json" 2>/dev/null || echo ERR)
	r=$(jq -r '.end.sum_sent.retransmits' "$OUT/$tag.json" 2>/dev/null || echo ERR)
	[ -z "$g" ] || [ "$g" = null ] && g="ERR($(jq -r .error "$OUT/$tag.json" 2>/dev/null))"
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$g" "$r" "$lb" "$la" | tee -a "$RES"
	echo "  ce2 nstat deltas:$(ndiff "$OUT/$tag.ce2.before" "$OUT/$tag.ce2.after")"
	echo "  ce2 to-pe2 before: $drop0 ; after: $(rxdrops "$CE2" to-pe2)"
}

capsum() { # pcap
	tcpdump -r "$1" -nn -e 2>/dev/null | awk '
	{ mpls = ($0 ~ /ethertype MPLS unicast/); match($0, /length [0-9]+/); len = substr($0, RSTART+7, RLENGTH-7)+0
	  n++; if (mpls) m++; if (len > 1514) big++; if (len > max) max = len; if (min == "" || len < min) min = len
	  if (mpls && !lab) { match($0, /label [0-9]+/); lab = substr($0, RSTART, RLENGTH) }
	  if (len > 1514) { bl[len]++ } }
	END { printf "  frames=%d mpls=%d (%s) >1514=%d min=%d max=%d\n", n, m, lab, big, min, max }'
	echo "  sample:"; tcpdump -r "$1" -nn -e -c 3 2>/dev/null | sed 's/^/    /' | cut -c1-220
}

captures() { # fam mtu : tcpdump on p's west veth and on ce2 during a 3 s iperf
	local dst=198.18.2.2; [ "$1" = v6 ] && dst=2001:db8:2::2
	local fa="$OUT/cap-p-west-$1-$2.pcap" fb="$OUT/cap-ce2-$1-$2.pcap"
	x "$PC"  timeout 8 tcpdump -i to-pe1 -Q in -nn -s 96 -c 4000 -w "$fa" >/dev/null 2>&1 & local pa=$!
	x "$CE2" timeout 8 tcpdump -i to-pe2 -Q in -nn -s 96 -c 4000 -w "$fb" >/dev/null 2>&1 & local pb=$!
	sleep 1.5
	x "$CE1" timeout 10 iperf3 -c "$dst" -t 3 > "$OUT/cap-iperf-$1-$2.txt" 2>&1
	wait $pa $pb 2>/dev/null
	echo " capture p:to-pe1 ingress (core, labelled hop) $1 core-mtu $2:"; capsum "$fa"
	echo " capture ce2:to-pe2 ingress (after pop) $1 core-mtu $2:";       capsum "$fb"
}

log "load at start: $(load)"
build_all
clang $CFLAGS -c sf.bpf.c -o sf.bpf.o && gcc -O2 -o sftest sftest.c -lbpf || exit 1
for rep in $(seq "${REPS:-2}"); do
for mtu in $MTUS; do
	set_core_mtu "$mtu"
	for fam in v4 v6; do
		log "kernel-ip $fam core-mtu $mtu"
		run_iperf kernel-ip "$fam" "$mtu"
		log "tc-fastpath $fam core-mtu $mtu"
		attach_fp
		run_iperf tc-fastpath "$fam" "$mtu"
		echo " program stats after run:"; stats
		[ "$rep" = 1 ] && captures "$fam" "$mtu"
		detach_fp
	done
done
done

# ---------------------------------------------------------------- socket filter sharing the tc map
if [ -z "${SKIP_SF:-}" ]; then
	log "AF_PACKET + SO_ATTACH_BPF socket filter on p:to-pe1 reading the tc program's fp_labels map"
	set_core_mtu 65535
	attach_fp
	MID=$(map_id "$PC" to-pe1 fp_labels)
	echo " fp_labels map id $MID (tc prog id $(prog_id "$PC" to-pe1)); before: $(bpftool map dump id "$MID" -j | jq -c .)"
	x "$PC" ./sftest "$MID" to-pe1 5 > "$OUT/sftest.txt" 2>&1 &
	SFP=$!
	sleep 0.5
	x "$CE1" timeout 10 iperf3 -c 198.18.2.2 -t 3 > "$OUT/sftest-iperf.txt" 2>&1
	wait $SFP
	sed 's/^/  /' "$OUT/sftest.txt"
	echo " fp_labels after (value = 1 + frames excluded by the socket filter): $(bpftool map dump id "$MID" -j | jq -c .)"
	echo " tc p stats:"; stats | grep ' p:'
	detach_fp
fi

# kfree_skb drop reasons (private ftrace instance; system-wide, so other jobs can add noise)
TRI=""; TRMOUNTED=""
trace_on() {
	[ -d /sys/kernel/tracing/events ] || { mount -t tracefs nodev /sys/kernel/tracing && TRMOUNTED=1; }
	TRI=/sys/kernel/tracing/instances/tcspike$$
	mkdir -p "$TRI" && echo 1 > "$TRI/events/skb/kfree_skb/enable"
}
trace_off() {
	[ -n "$TRI" ] || return
	echo 0 > "$TRI/events/skb/kfree_skb/enable"
	echo "  kfree_skb (drop) events while attached, by location/reason (top 6):"
	sed -n 's/.*location=\([^ ]*\).*reason: \([A-Z_]*\).*/\1 \2/p' "$TRI/trace" | sed 's/+0x[0-9a-f/x]*//' | sort | uniq -c | sort -rn | head -6 | sed 's/^/    /'
	rmdir "$TRI"; TRI=""
}

# ---------------------------------------------------------------- bpf_redirect (egress) variant
# A cold start cannot work (pe2's pop fails on the SYN, see stats), so the flow is established
# over kernel IP first and the egress-redirect programs are attached mid-stream; the program
# counters then show how far the GSO frames get.
if [ -z "${SKIP_EGRESS:-}" ]; then
	REDIR_FLAG=-DREDIR_EGRESS=1; build_all
	for mtu in 65535 1500; do
		log "variant: bpf_redirect(ifindex, 0) egress instead of redirect_peer, core-mtu $mtu, v4"
		set_core_mtu "$mtu"
		echo " cold start (programs attached before connect):"
		attach_fp
		x "$CE2" timeout 25 iperf3 -s -1 -p $((5300+${#mtu})) >/dev/null 2>&1 & SP1=$!
		sleep 0.5
		x "$CE1" timeout 15 iperf3 -c 198.18.2.2 -p $((5300+${#mtu})) -t 3 --connect-timeout 3000 2>&1 | tail -2 | sed 's/^/  /'
		stats; detach_fp; kill $SP1 2>/dev/null; wait $SP1 2>/dev/null
		echo " mid-stream attach (iperf -t 8, programs attached at t=3 s):"
		x "$CE2" timeout 40 iperf3 -s -1 -p $((5310+${#mtu})) >/dev/null 2>&1 & SP2=$!
		sleep 0.5
		x "$CE1" timeout 20 iperf3 -c 198.18.2.2 -p $((5310+${#mtu})) -t 8 -i 1 > "$OUT/egress-$mtu.txt" 2>&1 &
		IP=$!
		sleep 3
		echo "  pe1 to-p tx_dropped before attach: $(x "$PE1" ip -s -j link show dev to-p | jq '.[0].stats64.tx.dropped')"
		trace_on; attach_fp; sleep 4; trace_off
		stats
		for n in "$PE1 to-p" "$PC to-pe1" "$PC to-pe2" "$PE2 to-p"; do
			set -- $n; echo "  ${1#$P} $2: $(x "$1" ip -s -j link show dev "$2" | jq -c '.[0].stats64 | {rx:.rx.packets,rxdrop:.rx.dropped,tx:.tx.packets,txdrop:.tx.dropped}')"
		done
		wait $IP; detach_fp; kill $SP2 2>/dev/null; wait $SP2 2>/dev/null
		grep -E 'sec|error' "$OUT/egress-$mtu.txt" | head -12 | sed 's/^/  /'
	done
	REDIR_FLAG=""
fi

log "kernel messages during the run (all of dmesg; other jobs on the host also log here):"
dmesg | tail -n +$((DMESG0+1)) | tail -40
log "results ($RES):"
column -t -s$'\t' "$RES"
log "load at end: $(load)"
