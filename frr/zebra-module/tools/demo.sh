#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
#
# Proof that vmpls_zebra.so + dplane_fpm_nl hand Debian FRR 8.4.4's MPLS
# state to an FPM server on a kernel without MPLS, in network namespaces of
# its own.  Root only.  Self-cleaning (trap EXIT), every wait bounded.
#
#   frr/zebra-module/tools/demo.sh [--root DIR] [FIXTURE_DIR]
#
# --root DIR: the FRR of the Debian root DIR (scripts/make-frr-root, e.g.
# trixie's 10.3): the module is built there, the daemons and vtysh run
# chrooted into it (in each namespace, with /proc, /sys and /dev bound), the
# work directory is under DIR/run/vmpls, and the fixtures are named
# frr<major>-<name>.fpm.
#
# FIXTURE_DIR (default: a temporary directory, printed at the end; pass
# frr/fixtures to refresh the committed fixtures) receives the raw FPM
# streams: static-lsp-add-del.fpm, labelled-static-route.fpm,
# nhg-labelled-static-route.fpm, ldp-r1.fpm, replay-after-restart.fpm,
# fpm-reconnect-replay.fpm, plus a decoded .txt
# next to each.
set -euo pipefail

ROOT=
if [[ ${1:-} == --root ]]; then
	ROOT=$(cd "${2:?--root needs a directory}" && pwd)
	shift 2
fi

[[ $(id -u) == 0 ]] || { echo "demo.sh: run as root" >&2; exit 1; }
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
tools="$repo/frr/zebra-module/tools"
dump="$tools/fpm-dump.py"
FRR=/usr/lib/frr

command -v ping >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q iputils-ping >&2
build_module() { "$repo/scripts/build-zebra-module" ${ROOT:+--root "$ROOT"} | tail -1; }
SO=$(build_module)
[[ -f $SO ]] || { echo "demo.sh: module build failed" >&2; exit 1; }

# paths as the daemons see them (inside the root)
inside() { echo "${1#"$ROOT"}"; }
# run a command of the FRR under test in namespace $1 (chrooted with --root)
in_frr() {
	local n=$1
	shift
	if [[ -z $ROOT ]]; then
		ip netns exec "$n" "$@"
	else
		# ip netns exec gives a private mount namespace with this netns's /sys
		ip netns exec "$n" env R="$ROOT" sh -c 'mount --rbind /proc "$R/proc" && mount --rbind /sys "$R/sys" &&
			mount --rbind /dev "$R/dev" && exec chroot "$R" "$@"' sh "$@"
	fi
}
frr_version=$(if [[ -n $ROOT ]]; then chroot "$ROOT" dpkg-query -W -f='${Version}' frr; else dpkg-query -W -f='${Version}' frr; fi)
frr_upstream=${frr_version%%-*}
fixpre=
[[ -n $ROOT ]] && fixpre="frr${frr_upstream%%.*}-"
# FRR >= 10: staticd (and zebra's YANG parts) are configured through mgmtd,
# which must run first; staticd takes no -f (mgmtd reads only
# /etc/frr/<daemon>.conf), so static routes are configured with vtysh after
# the start. mgmtd's sockets are in /var/run/frr/<pathspace>: one pathspace
# (-N) per router keeps the routers apart.
MGMTD=0
((${frr_upstream%%.*} >= 10)) && MGMTD=1

id=$$
if [[ -n $ROOT ]]; then
	mkdir -p "$ROOT/run/vmpls"
	W=$(mktemp -d "$ROOT/run/vmpls/vz-demo.XXXXXX")
else
	W=$(mktemp -d /tmp/vz-demo.XXXXXX)
fi
chmod 755 "$W"
fixdir=${1:-$W/fixtures}
mkdir -p "$fixdir"
fixdir=$(cd "$fixdir" && pwd)
NAMESPACES=()
DUMP_PIDS=()
FAILED=0

cleanup() {
	set +e
	local f p
	for f in "$W"/*/*.pid; do
		[[ -f $f ]] || continue
		p=$(cat "$f" 2>/dev/null)
		[[ -n $p ]] && kill "$p" 2>/dev/null
	done
	for p in "${DUMP_PIDS[@]}"; do kill "$p" 2>/dev/null; done
	sleep 1
	for f in "$W"/*/*.pid; do
		[[ -f $f ]] || continue
		p=$(cat "$f" 2>/dev/null)
		[[ -n $p ]] && kill -0 "$p" 2>/dev/null && kill -9 "$p" 2>/dev/null
	done
	for p in "${DUMP_PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
	for n in "${NAMESPACES[@]}"; do ip netns del "$n" 2>/dev/null; done
	if [[ ${KEEP:-0} != 1 ]]; then rm -rf "$W/r" "$W/s" "$W/r1" "$W/r2" "$W/bad"; fi
}
trap cleanup EXIT

say() { printf '\n=== %s\n' "$*"; }
pass() { printf 'PASS: %s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*"; FAILED=1; }
check() { # check DESCRIPTION CMD...
	local d=$1; shift
	if "$@" >/dev/null 2>&1; then pass "$d"; else fail "$d"; fi
}
wait_until() { # wait_until SECONDS CMD...
	local t=$1 i; shift
	for ((i = 0; i < t * 2; i++)); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.5
	done
	return 1
}

ns() { # ns NAME: create namespace vz<pid><NAME>
	local n="vz$id$1"
	ip netns add "$n"
	NAMESPACES+=("$n")
	ip -n "$n" link set lo up
}
LINKNO=0
link() { # link NS1 IF1 ADDR1 NS2 IF2 ADDR2 (unique names while in the root namespace)
	LINKNO=$((LINKNO + 1))
	local a="vz${id}l${LINKNO}a" b="vz${id}l${LINKNO}b"
	ip link add "$a" type veth peer name "$b"
	ip link set "$a" netns "vz$id$1"
	ip link set "$b" netns "vz$id$4"
	ip -n "vz$id$1" link set "$a" name "$2"
	ip -n "vz$id$4" link set "$b" name "$5"
	ip -n "vz$id$1" addr add "$3" dev "$2"
	ip -n "vz$id$4" addr add "$6" dev "$5"
	ip -n "vz$id$1" link set "$2" up
	ip -n "vz$id$4" link set "$5" up
}

# daemon NS DIR DAEMON [extra args]: one FRR daemon, private dirs and sockets
daemon() {
	local short=$1 n="vz$id$1" dir=$2 d=$3
	shift 3
	local extra=("$@")
	[[ -f $dir/$d.conf ]] || echo "hostname $short" >"$dir/$d.conf"
	local conf=(-f "$(inside "$dir")/$d.conf")
	if ((MGMTD)); then
		extra+=(-N "$n")
		[[ $d == staticd || $d == mgmtd ]] && conf=()
	fi
	if [[ -n $ROOT ]]; then chroot "$ROOT" chown -R frr:frr "$(inside "$dir")"; else chown -R frr:frr "$dir"; fi
	dir=$(inside "$dir")
	[[ $d == ldpd ]] && extra+=(--ctl_socket "$dir")
	[[ $d == zebra ]] && extra+=(-M "$(inside "$SO")" -M dplane_fpm_nl)
	in_frr "$n" timeout 20 "$FRR/$d" -d "${conf[@]}" -i "$dir/$d.pid" \
		--vty_socket "$dir" -z "$dir/zserv.api" -P 0 --log "file:$dir/$d.log" \
		"${extra[@]}"
}
stop_daemon() { # stop_daemon DIR DAEMON
	local p
	p=$(cat "$1/$2.pid" 2>/dev/null) || return 0
	kill "$p" 2>/dev/null || true
	for _ in $(seq 1 20); do kill -0 "$p" 2>/dev/null || break; sleep 0.25; done
	kill -9 "$p" 2>/dev/null || true
	rm -f "$1/$2.pid"
}
vty() { # vty NS DIR vtysh-args...
	local n="vz$id$1" dir=$2
	shift 2
	# (no -N: vtysh would look for the vty sockets in DIR/<pathspace>; it
	# talks to mgmtd through mgmtd.vty like to the others)
	[[ -f $dir/vtysh.conf ]] || : >"$dir/vtysh.conf"
	in_frr "$n" timeout 20 vtysh --config_dir "$(inside "$dir")" --vty_socket "$(inside "$dir")" "$@"
}
fpm_listen() { # fpm_listen NS PREFIX: background FPM server in NS
	ip netns exec "vz$id$1" timeout 600 python3 "$dump" --out "$2" --summary \
		--max-seconds 590 >"$2.log" 2>&1 &
	DUMP_PIDS+=($!)
	wait_until 5 grep -q listening "$2.log"
}
stop_listen() { # stop the most recent FPM server
	local p=${DUMP_PIDS[-1]}
	kill "$p" 2>/dev/null || true
	wait "$p" 2>/dev/null || true
}
decoded() { python3 "$dump" --decode "$1"; }
# for the checks that run them under bash -c
export -f vty in_frr inside
export ROOT id MGMTD

echo "module: $SO"
echo "work dir: $W"

###########################################################################
say "1. static LSPs: mpls lsp add, then no mpls lsp"
ns s
ns p
link s s0 198.18.10.1/24 p p0 198.18.10.2/24
link s s1 198.18.11.1/24 p p1 198.18.11.2/24
ip -n "vz${id}p" addr add 198.18.60.1/32 dev lo
ip -n "vz${id}p" addr add 198.18.61.1/32 dev lo
echo "namespace vz${id}s: ifindex s0=$(ip netns exec "vz${id}s" cat /sys/class/net/s0/ifindex) s1=$(ip netns exec "vz${id}s" cat /sys/class/net/s1/ifindex)"
S="$W/s"
mkdir -p "$S"
cat >"$S/zebra.conf" <<EOF
hostname s
fpm address 127.0.0.1 port 2620
no fpm use-next-hop-groups
EOF
fpm_listen s "$W/lsp"
((MGMTD)) && daemon s "$S" mgmtd
daemon s "$S" zebra
daemon s "$S" staticd
wait_until 15 grep -q "connection 1" "$W/lsp.log" || fail "zebra connected to FPM"
wait_until 10 grep -q "198.18.11.0/24" "$W/lsp.log" || true
vty s "$S" -c 'conf t' -c 'mpls lsp 100 198.18.10.2 200' -c 'mpls lsp 101 198.18.10.2 implicit-null'
wait_until 10 grep -q "dst=L101" "$W/lsp.log" || true
vty s "$S" -c 'show mpls table'
vty s "$S" -c 'conf t' -c 'no mpls lsp 100 198.18.10.2 200' -c 'no mpls lsp 101 198.18.10.2 implicit-null'
wait_until 10 grep -q "DELROUTE family=28(mpls) dst=L101" "$W/lsp.log" || true
stop_daemon "$S" staticd
stop_daemon "$S" zebra
stop_daemon "$S" mgmtd
wait_until 10 grep -q "connection 1 closed" "$W/lsp.log" || true
stop_listen
cp "$W/lsp.conn1.fpm" "$fixdir/${fixpre}static-lsp-add-del.fpm"
decoded "$fixdir/${fixpre}static-lsp-add-del.fpm" | tee "$fixdir/${fixpre}static-lsp-add-del.txt"
check "LSP 100 -> 200 arrived as RTM_NEWROUTE AF_MPLS" grep -q "NEWROUTE family=28(mpls) dst=L100 .*out 200" "$fixdir/${fixpre}static-lsp-add-del.txt"
check "LSP 101 implicit-null arrived as RTM_NEWROUTE AF_MPLS" grep -q "NEWROUTE family=28(mpls) dst=L101 " "$fixdir/${fixpre}static-lsp-add-del.txt"
check "no mpls lsp 100 arrived as RTM_DELROUTE" grep -q "DELROUTE family=28(mpls) dst=L100" "$fixdir/${fixpre}static-lsp-add-del.txt"
check "no mpls lsp 101 arrived as RTM_DELROUTE" grep -q "DELROUTE family=28(mpls) dst=L101" "$fixdir/${fixpre}static-lsp-add-del.txt"

###########################################################################
say "2. labelled static routes: single, ECMP, update, delete; kernel gets them unlabelled"
fpm_listen s "$W/lsr"
((MGMTD)) && daemon s "$S" mgmtd
daemon s "$S" zebra
daemon s "$S" staticd
wait_until 15 grep -q "connection 1" "$W/lsr.log" || fail "zebra connected to FPM"
wait_until 10 grep -q "198.18.11.0/24" "$W/lsr.log" || true
vty s "$S" -c 'conf t' -c 'ip route 198.18.60.0/24 198.18.10.2 label 300'
vty s "$S" -c 'conf t' -c 'ip route 198.18.61.0/24 198.18.10.2 label 301' -c 'ip route 198.18.61.0/24 198.18.11.2 label 302'
wait_until 10 grep -q "198.18.61.0/24.*multipath" "$W/lsr.log" || true
vty s "$S" -c 'show ip route static'
echo "--- kernel (ip route) in vz${id}s:"
ip -n "vz${id}s" route | tee "$W/kernel-static.txt"
check "kernel: 198.18.60.0/24 via 198.18.10.2, no encap" grep -q "^198.18.60.0/24 via 198.18.10.2 dev s0 proto static metric 20 *$" "$W/kernel-static.txt"
check "kernel: ECMP 198.18.61.0/24 without encap" bash -c "! grep -q encap '$W/kernel-static.txt' && grep -A2 '^198.18.61.0/24' '$W/kernel-static.txt' | grep -q 'nexthop via 198.18.11.2'"
echo "--- ping from the router itself over the unlabelled kernel route:"
if ip netns exec "vz${id}s" ping -c 2 -W 2 198.18.60.1; then pass "ping 198.18.60.1 from the router"; else fail "ping 198.18.60.1 from the router"; fi
vty s "$S" -c 'conf t' -c 'ip route 198.18.60.0/24 198.18.11.2 label 303' -c 'no ip route 198.18.60.0/24 198.18.10.2 label 300'
wait_until 10 grep -q "198.18.60.0/24.*encap mpls 303" "$W/lsr.log" || true
check "update: kernel 198.18.60.0/24 now via 198.18.11.2" bash -c "ip -n vz${id}s route show 198.18.60.0/24 | grep -q 'via 198.18.11.2 dev s1'"
vty s "$S" -c 'conf t' -c 'no ip route 198.18.60.0/24 198.18.11.2 label 303' -c 'no ip route 198.18.61.0/24 198.18.10.2 label 301' -c 'no ip route 198.18.61.0/24 198.18.11.2 label 302'
wait_until 10 grep -q "DELROUTE family=2(inet) dst=198.18.61.0/24" "$W/lsr.log" || true
sleep 1
check "delete: kernel has no 198.18.60.0/24 and no 198.18.61.0/24" bash -c "! ip -n vz${id}s route | grep -q '198.18.6[01].0/24'"
stop_daemon "$S" staticd
stop_daemon "$S" zebra
stop_daemon "$S" mgmtd
wait_until 10 grep -q "connection 1 closed" "$W/lsr.log" || true
stop_listen
cp "$W/lsr.conn1.fpm" "$fixdir/${fixpre}labelled-static-route.fpm"
decoded "$fixdir/${fixpre}labelled-static-route.fpm" | tee "$fixdir/${fixpre}labelled-static-route.txt"
check "AF_INET route with RTA_ENCAP mpls 300" grep -q "NEWROUTE family=2(inet) dst=198.18.60.0/24 .*encap mpls 300" "$fixdir/${fixpre}labelled-static-route.txt"
check "ECMP labelled route with RTA_MULTIPATH" grep -q "dst=198.18.61.0/24 .*multipath\[via 198.18.10.2 oif [0-9]* encap mpls 301; via 198.18.11.2 oif [0-9]* encap mpls 302\]" "$fixdir/${fixpre}labelled-static-route.txt"
check "deletes arrived" grep -q "DELROUTE family=2(inet) dst=198.18.61.0/24" "$fixdir/${fixpre}labelled-static-route.txt"

###########################################################################
say "2b. the same with FRR's default 'fpm use-next-hop-groups': next-hop objects and RTA_NH_ID"
printf 'hostname s\nfpm address 127.0.0.1 port 2620\n' >"$S/zebra.conf"
fpm_listen s "$W/nhg"
((MGMTD)) && daemon s "$S" mgmtd
daemon s "$S" zebra
daemon s "$S" staticd
wait_until 15 grep -q "connection 1" "$W/nhg.log" || fail "zebra connected to FPM"
wait_until 10 grep -q "198.18.11.0/24" "$W/nhg.log" || true
vty s "$S" -c 'conf t' -c 'ip route 198.18.60.0/24 198.18.10.2 label 300' -c 'ip route 198.18.61.0/24 198.18.10.2 label 301' -c 'ip route 198.18.61.0/24 198.18.11.2 label 302'
wait_until 10 grep -q "198.18.61.0/24" "$W/nhg.log" || true
sleep 1
vty s "$S" -c 'conf t' -c 'no ip route 198.18.60.0/24 198.18.10.2 label 300' -c 'no ip route 198.18.61.0/24 198.18.10.2 label 301' -c 'no ip route 198.18.61.0/24 198.18.11.2 label 302'
wait_until 10 grep -q "DELROUTE family=2(inet) dst=198.18.61.0/24" "$W/nhg.log" || true
stop_daemon "$S" staticd
stop_daemon "$S" zebra
stop_daemon "$S" mgmtd
wait_until 10 grep -q "connection 1 closed" "$W/nhg.log" || true
stop_listen
cp "$W/nhg.conn1.fpm" "$fixdir/${fixpre}nhg-labelled-static-route.fpm"
decoded "$fixdir/${fixpre}nhg-labelled-static-route.fpm" | tee "$fixdir/${fixpre}nhg-labelled-static-route.txt"
check "next-hop groups: RTM_NEWNEXTHOP sent" grep -q "NEWNEXTHOP" "$fixdir/${fixpre}nhg-labelled-static-route.txt"
# back to the lab's zebra.conf for what follows
printf 'hostname s\nfpm address 127.0.0.1 port 2620\nno fpm use-next-hop-groups\n' >"$S/zebra.conf"

###########################################################################
say "3. a zebra of another version: the module refuses to load"
mkdir -p "$W/bad"
chown frr:frr "$W/bad"
BAD=$(VMPLS_ZEBRA_MODULE_DIR="$(inside "$W/bad/mod")" VMPLS_ZEBRA_CFLAGS="-DVMPLS_FRR_VERSION_OVERRIDE=\"8.4.3\"" \
	build_module 2>/dev/null)
echo "hostname bad" >"$W/bad/zebra.conf"
B=$(inside "$W/bad")
if [[ -n $ROOT ]]; then chroot "$ROOT" chown -R frr:frr "$B"; else chown -R frr:frr "$W/bad"; fi
set +e
in_frr "vz${id}s" timeout 20 "$FRR/zebra" -f "$B/zebra.conf" -i "$B/zebra.pid" \
	--vty_socket "$B" -z "$B/zserv.api" -P 0 -M "$(inside "$BAD")" -M dplane_fpm_nl >"$W/bad/out" 2>&1
rc=$?
set -e
cat "$W/bad/out"
echo "zebra exit status: $rc"
check "zebra with a module built for 8.4.3 exits 1" test "$rc" = 1
check "with a clear message" grep -q "compiled for FRRouting 8.4.3 but is loaded into zebra $frr_upstream" "$W/bad/out"
check "and libfrr's own load failure message" grep -q 'module "/.*vmpls_zebra.so" initialisation failed' "$W/bad/out"

###########################################################################
say "4. OSPF + LDP between r1 and r2 (r3: a stub behind r2, no FRR)"
ns r1
ns r2
ns r3
link r1 r1e0 198.18.12.1/24 r2 r2e0 198.18.12.2/24
link r2 r2e1 198.18.23.2/24 r3 r3e0 198.18.23.3/24
ip -n "vz${id}r1" addr add 198.18.0.1/32 dev lo
ip -n "vz${id}r2" addr add 198.18.0.2/32 dev lo
ip -n "vz${id}r3" addr add 198.18.80.1/32 dev lo
ip -n "vz${id}r3" route add default via 198.18.23.2
ip netns exec "vz${id}r2" sysctl -q -w net.ipv4.ip_forward=1
for r in r1 r2; do
	echo "namespace vz${id}$r: $(ip -n "vz${id}$r" -o link | awk -F': ' '{printf "%s=%s ", $2, $1}')"
done
for r in 1 2; do
	D="$W/r$r"
	mkdir -p "$D"
	cat >"$D/zebra.conf" <<EOF
hostname r$r
fpm address 127.0.0.1 port 2620
no fpm use-next-hop-groups
EOF
	cat >"$D/ospfd.conf" <<EOF
hostname r$r
interface r${r}e0
 ip ospf network point-to-point
 ip ospf hello-interval 1
 ip ospf dead-interval 4
router ospf
 ospf router-id 198.18.0.$r
 network 198.18.0.$r/32 area 0
 network 198.18.12.0/24 area 0
$([[ $r == 2 ]] && printf ' redistribute static\n redistribute connected\n')
EOF
	cat >"$D/ldpd.conf" <<EOF
hostname r$r
mpls ldp
 router-id 198.18.0.$r
 address-family ipv4
  discovery transport-address 198.18.0.$r
  interface r${r}e0
 exit-address-family
EOF
	cat >"$D/staticd.conf" <<EOF
hostname r$r
$([[ $r == 2 ]] && echo 'ip route 198.18.80.0/24 198.18.23.3')
EOF
	fpm_listen "r$r" "$W/r$r-fpm"
	[[ $r == 1 ]] && R1_DUMP=${DUMP_PIDS[-1]}
	((MGMTD)) && daemon "r$r" "$D" mgmtd
	daemon "r$r" "$D" zebra
	daemon "r$r" "$D" staticd
	daemon "r$r" "$D" ospfd
	daemon "r$r" "$D" ldpd
	((MGMTD)) && [[ $r == 2 ]] && vty r2 "$D" -c 'conf t' -c 'ip route 198.18.80.0/24 198.18.23.3'
done
if wait_until 90 bash -c "vty r1 $W/r1 -c 'show mpls ldp neighbor' | grep -q OPERATIONAL"; then
	pass "LDP session OPERATIONAL"
else
	fail "LDP session OPERATIONAL"
fi
wait_until 30 grep -q "198.18.80.0/24.*encap mpls" "$W/r1-fpm.log" || true
sleep 3
vty r1 "$W/r1" -c 'show mpls ldp neighbor' -c 'show mpls table' -c 'show ip route'
vty r2 "$W/r2" -c 'show mpls table'
echo "--- kernel (ip route) in vz${id}r1:"
ip -n "vz${id}r1" route | tee "$W/kernel-r1.txt"
check "r1 kernel: plain route to r2's loopback" grep -q "^198.18.0.2 .*via 198.18.12.2 dev r1e0 proto ospf" "$W/kernel-r1.txt"
check "r1 kernel: plain route to 198.18.80.0/24 (LDP label stripped)" grep -q "^198.18.80.0/24 via 198.18.12.2 dev r1e0 proto ospf metric 20 *$" "$W/kernel-r1.txt"
check "show mpls table non-empty on r1" bash -c "vty r1 $W/r1 -c 'show mpls table' | grep -q LDP"
check "show mpls table non-empty on r2" bash -c "vty r2 $W/r2 -c 'show mpls table' | grep -q LDP"
echo "--- r1 pings r3's 198.18.80.1 from its loopback over the unlabelled kernel route:"
if ip netns exec "vz${id}r1" ping -c 2 -W 2 -I 198.18.0.1 198.18.80.1; then pass "ping over the LDP route"; else fail "ping over the LDP route"; fi

###########################################################################
say "5. restart r1's FRR (zebra, then staticd, ospfd, ldpd, as watchfrr does when zebra dies): a new FPM connection carries everything again"
for d in ldpd ospfd staticd zebra mgmtd; do stop_daemon "$W/r1" "$d"; done
wait_until 10 grep -q "connection 1 closed" "$W/r1-fpm.log" || true
cp "$W/r1-fpm.conn1.fpm" "$fixdir/${fixpre}ldp-r1.fpm"
decoded "$fixdir/${fixpre}ldp-r1.fpm" | tee "$fixdir/${fixpre}ldp-r1.txt"
check "r1: LDP LSPs (proto ldp) over FPM" grep -q "NEWROUTE family=28(mpls) .*proto=193(ldp)" "$fixdir/${fixpre}ldp-r1.txt"
check "r1: LDP-labelled route over FPM" grep -q "NEWROUTE family=2(inet) dst=198.18.80.0/24 proto=188(ospf) .*encap mpls" "$fixdir/${fixpre}ldp-r1.txt"
check "r1: plain OSPF route over FPM" grep -q "NEWROUTE family=2(inet) dst=198.18.0.2/32 proto=188(ospf)" "$fixdir/${fixpre}ldp-r1.txt"
((MGMTD)) && daemon r1 "$W/r1" mgmtd
for d in zebra staticd ospfd ldpd; do daemon r1 "$W/r1" "$d"; done
wait_until 15 grep -q "connection 2" "$W/r1-fpm.log" || fail "zebra reconnected"
wait_until 90 grep -q "^\[2\] NEWROUTE family=2(inet) dst=198.18.80.0/24 .*encap mpls" "$W/r1-fpm.log" || true
wait_until 30 bash -c "[ \$(grep -c '^\[2\] NEWROUTE family=28(mpls) .*proto=193(ldp)' $W/r1-fpm.log) -ge 3 ]" || true
sleep 3
vty r1 "$W/r1" -c 'show mpls table'

say "6. restart the FPM server (vmpls) while r1's zebra runs: zebra reconnects and replays its tables"
kill "$R1_DUMP" 2>/dev/null || true
wait "$R1_DUMP" 2>/dev/null || true
cp "$W/r1-fpm.conn2.fpm" "$fixdir/${fixpre}replay-after-restart.fpm"
decoded "$fixdir/${fixpre}replay-after-restart.fpm" | tee "$fixdir/${fixpre}replay-after-restart.txt"
check "after the restart: LSPs again" grep -q "NEWROUTE family=28(mpls) .*proto=193(ldp)" "$fixdir/${fixpre}replay-after-restart.txt"
check "after the restart: labelled route again" grep -q "NEWROUTE family=2(inet) dst=198.18.80.0/24 proto=188(ospf) .*encap mpls" "$fixdir/${fixpre}replay-after-restart.txt"
fpm_listen r1 "$W/r1-fpmb"
wait_until 30 grep -q "connection 1 " "$W/r1-fpmb.log" || fail "zebra reconnected to the new FPM server"
wait_until 15 grep -q "NEWROUTE family=28(mpls) dst=L18" "$W/r1-fpmb.log" || true
sleep 3
stop_listen
cp "$W/r1-fpmb.conn1.fpm" "$fixdir/${fixpre}fpm-reconnect-replay.fpm"
decoded "$fixdir/${fixpre}fpm-reconnect-replay.fpm" | tee "$fixdir/${fixpre}fpm-reconnect-replay.txt"
check "reconnect replay: LSPs" grep -q "NEWROUTE family=28(mpls) .*proto=193(ldp)" "$fixdir/${fixpre}fpm-reconnect-replay.txt"
check "reconnect replay: labelled route" grep -q "NEWROUTE family=2(inet) dst=198.18.80.0/24 proto=188(ospf) .*encap mpls" "$fixdir/${fixpre}fpm-reconnect-replay.txt"

say "done"
echo "fixtures: $fixdir"
ls -l "$fixdir"
if ((FAILED)); then echo "SOME CHECKS FAILED"; exit 1; fi
echo "ALL CHECKS PASSED"
