#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
#
# Two PEs with one netns VRF each (zebra -n), iBGP VPNv4 between their
# loopbacks over labelled static routes, each zebra with vmpls_zebra.so and
# FPM to a capturing server (fpm-dump.py).  Checks what the module promises
# for netns VRFs (README.md, "VRFs as network namespaces"):
#   - the VRF interface: named like the VRF, the same ifindex T in the VRF's
#     namespace and in the PE's, both up;
#   - FPM: the remote CE subnet in table T with [transport label, VPN label],
#     the local VPN label as a pop to RTA_OIF = T (pe1: `label vpn export
#     auto`, pe2: a fixed `label vpn export 5002`), the local connected
#     subnet in table T;
#   - the FPM server restarted: zebra replays the VRF's routes in table T;
#   - the VRF's namespace deleted: its routes deleted from FPM in table T and
#     the VRF interface gone;
#   - a VRF created at runtime gets its VRF interface; after a SIGKILL of
#     zebra, the next zebra takes over the pair left behind;
#   - zebra stopped: the VRF interface gone, no crash.
# Root only; namespaces vz<pid>-*; 198.18.0.0/15; self-cleaning (trap EXIT);
# every wait bounded.  Exit 0 if every check passed.
#
#   frr/zebra-module/tools/vpn-two-pe.sh [FIXTURE_DIR]
#
# With FIXTURE_DIR, the captured streams go there (vpn-pe1.fpm, vpn-pe2.fpm,
# vpn-pe2-replay.fpm and a decoded .txt of each).  VMPLS_ZEBRA_MODULE: the module to load
# (default: build it).  VMPLS_FRR_ROOT: a Debian root (scripts/make-frr-root, e.g.
# trixie's FRR 10.3) whose FRR runs instead of the host's, chrooted (the module then
# comes from `scripts/build-zebra-module --root`; FRR >= 9 gets mgmtd, staticd's
# configuration goes through it).
#
# How a PE runs its daemons with its own /run/netns (zebra -n takes every
# namespace there as a VRF), the recipe `vmpls lab vpn` uses too:
#   ip netns exec PE unshare --mount --propagation slave \
#       sh -c 'mount -t tmpfs vmpls-netns /run/netns && exec sleep 600' &
#   HOLDER=$!                                   # keeps the mount namespace
#   nsenter -t $HOLDER -m -n ip netns add red   # a VRF of this PE only
#   nsenter -t $HOLDER -m -n ip link set pe1-ce1 netns red
#   nsenter -t $HOLDER -m -n /usr/lib/frr/zebra -n -M vmpls_zebra.so ...
set -euo pipefail

[[ $(id -u) == 0 ]] || { echo "vpn-two-pe.sh: run as root" >&2; exit 1; }
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
dump="$repo/frr/zebra-module/tools/fpm-dump.py"
FRR=/usr/lib/frr
ROOT=${VMPLS_FRR_ROOT:-}
if [[ -n $ROOT ]]; then
	ROOT=$(cd "$ROOT" && pwd)
	[[ -x $ROOT$FRR/zebra ]] || { echo "vpn-two-pe.sh: no FRR in the root $ROOT" >&2; exit 1; }
	SO=${VMPLS_ZEBRA_MODULE:-$("$repo/scripts/build-zebra-module" --root "$ROOT" | tail -1)}
else
	SO=${VMPLS_ZEBRA_MODULE:-$("$repo/scripts/build-zebra-module" | tail -1)}
fi
[[ -f $SO ]] || { echo "vpn-two-pe.sh: no module at $SO" >&2; exit 1; }
# what the daemons see (inside the root): the module and the work directory
SO_IN=${SO#"$ROOT"}
[[ -z $ROOT || $SO_IN != "$SO" ]] || { echo "vpn-two-pe.sh: the module $SO is not inside $ROOT" >&2; exit 1; }
# FRR 9 and later: staticd gets its configuration from mgmtd only
MGMTD=0
[[ -x $ROOT$FRR/mgmtd ]] && MGMTD=1
# FRR 10: the netns VRF backend is every daemon's switch (-w), and mgmtd needs it (it
# names the interfaces of the VRFs in the configuration it commits to zebra and staticd,
# which abort on names without the VRF: netns_ifname_split()); FRR 8.4: zebra's only (-n)
NETNS_ALL=0
if [[ -n $ROOT ]]; then
	chroot "$ROOT" "$FRR/staticd" --help 2>&1 | grep -q -- --vrfwnetns && NETNS_ALL=1
else
	"$FRR/staticd" --help 2>&1 | grep -q -- --vrfwnetns && NETNS_ALL=1
fi

id=$$
mkdir -p "$ROOT/run/vmpls"
W=$(mktemp -d "$ROOT/run/vmpls/vz-vpn.XXXXXX")
WI=${W#"$ROOT"}
chmod 755 "$W"
fixdir=${1:-}
NAMESPACES=()
FAILED=0

cleanup() {
	set +e
	local f p
	# daemons first (zebra removes its VRF interfaces on the way out), then
	# the holders of the private mount namespaces and the FPM servers
	for f in "$W"/*/bgpd.pid "$W"/*/staticd.pid "$W"/*/zebra.pid "$W"/*/mgmtd.pid; do
		[[ -f $f ]] && kill "$(cat "$f")" 2>/dev/null
	done
	sleep 1
	for f in "$W"/*/*.pid; do
		[[ -f $f ]] || continue
		p=$(cat "$f")
		kill -0 "$p" 2>/dev/null && kill -9 "$p" 2>/dev/null
	done
	for n in "${NAMESPACES[@]}"; do ip netns del "$n" 2>/dev/null; done
	# mgmtd's pathspaces
	[[ $MGMTD == 1 ]] && rm -rf "$ROOT/run/frr/vz$id-pe1" "$ROOT/run/frr/vz$id-pe2"
	[[ ${KEEP:-0} == 1 ]] || rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

pass() { printf 'PASS: %s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*"; FAILED=1; }

# wait_for SECONDS DESCRIPTION COMMAND...: COMMAND until it succeeds
now_ms() { echo $(($(date +%s%N) / 1000000)); }
wait_for() {
	local limit=$1 what=$2 start
	shift 2
	start=$(now_ms)
	while :; do
		if "$@" >/dev/null 2>&1; then
			local ms=$(($(now_ms) - start))
			pass "$what ($((ms / 1000)).$((ms % 1000 / 100)) s)"
			return 0
		fi
		(($(now_ms) - start < limit * 1000)) || break
		sleep 0.1
	done
	# the checks after it go on (and say what else is wrong)
	fail "$what: not within $limit s"
}

ns() { echo "vz$id-$1"; }
netns_add() {
	ip netns add "$(ns "$1")"
	NAMESPACES+=("$(ns "$1")")
	ip -n "$(ns "$1")" link set lo up
}
# pe_do PE CMD...: CMD in PE's network namespace and private mount namespace
pe_do() { nsenter -t "$(cat "$W/$1/holder.pid")" -m -n -- "${@:2}"; }
# frr_do PE CMD...: the same, chrooted into the FRR root if there is one (FRR's
# programs and the root's iproute2, whose /run/netns is the PE's)
frr_do() {
	if [[ -n $ROOT ]]; then pe_do "$1" chroot "$ROOT" "${@:2}"; else pe_do "$@"; fi
}
vtysh_pe() { frr_do "$1" vtysh --vty_socket "$WI/$1" "${@:2}"; }
# decoded PE [STREAM]: PE's FPM stream (default: the first connection)
decoded() { python3 "$dump" --decode "$W/$1/${2:-fpm.conn1.fpm}"; }

# --- topology: ce1 - pe1 - pe2 - ce2 ---------------------------------------
for h in pe1 pe2 ce1 ce2; do netns_add $h; done
ip -n "$(ns pe1)" link add pe1-pe2 type veth peer name pe2-pe1 netns "$(ns pe2)"
ip -n "$(ns pe1)" link add pe1-ce1 type veth peer name ce1-pe1 netns "$(ns ce1)"
ip -n "$(ns pe2)" link add pe2-ce2 type veth peer name ce2-pe2 netns "$(ns ce2)"
ip -n "$(ns pe1)" addr add 198.18.12.1/24 dev pe1-pe2
ip -n "$(ns pe2)" addr add 198.18.12.2/24 dev pe2-pe1
ip -n "$(ns pe1)" addr add 198.18.255.1/32 dev lo
ip -n "$(ns pe2)" addr add 198.18.255.2/32 dev lo
ip -n "$(ns ce1)" addr add 198.18.101.2/24 dev ce1-pe1
ip -n "$(ns ce2)" addr add 198.18.102.2/24 dev ce2-pe2
for l in "pe1 pe1-pe2" "pe2 pe2-pe1" "ce1 ce1-pe1" "ce2 ce2-pe2"; do
	set -- $l
	ip -n "$(ns "$1")" link set "$2" up
done

# fpm_server_start PE NAME: an FPM server in PE's namespace writing
# $W/PE/NAME.connN.fpm
fpm_server_start() {
	ip netns exec "$(ns "$1")" python3 "$dump" --out "$W/$1/$2" --max-seconds 120 \
		>"$W/$1/$2-dump.out" 2>&1 &
	echo $! >"$W/$1/$2-dump.pid"
	disown
}

# the options of every daemon of PE (paths as the daemons see them)
common_args() {
	local d="$WI/$1"
	echo "--vty_socket $d -z $d/zserv.api -P 0"
	[[ $MGMTD == 1 ]] && echo "-N vz$id-$1"
	[[ $NETNS_ALL == 1 ]] && echo "--vrfwnetns"
	return 0
}
zebra_start() {
	local d="$WI/$1"
	local netns=-n
	[[ $NETNS_ALL == 1 ]] && netns= # in common_args
	frr_do "$1" "$FRR/zebra" $netns -d -f "$d/zebra.conf" -i "$d/zebra.pid" \
		$(common_args "$1") --log "file:$d/zebra.log" -M "$SO_IN" -M dplane_fpm_nl
}

# --- one PE: private /run/netns with its VRF red, FPM server, FRR ----------
# pe_start PE N CE_IF CE_PREFIX VPN_LABEL REMOTE_LO
pe_start() {
	local pe=$1 n=$2 ceif=$3 ceaddr=$4 vpnlabel=$5 remote=$6 d="$W/$1" di="$WI/$1"
	mkdir -p "$d" "$ROOT/run/netns"
	# with a root: the VRFs in the root's /run/netns, where its FRR looks, and the
	# root's /proc, /sys (of the PE's namespace) and /dev, all private to the holder
	ip netns exec "$(ns "$pe")" unshare --mount --propagation slave \
		sh -c 'r=$1
			# the root a mount point: `ip -n` remounts / (--make-rslave) in it
			if [ -n "$r" ]; then mount --bind "$r" "$r" || exit 1; fi
			mount -t tmpfs vmpls-netns "$r/run/netns" || exit 1
			if [ -n "$r" ]; then
				mount --rbind /proc "$r/proc" && mount -t sysfs sysfs "$r/sys" &&
					mount --rbind /dev "$r/dev" || exit 1
			fi
			exec sleep 600' sh "$ROOT" &
	echo $! >"$d/holder.pid"
	disown
	local i
	for ((i = 0; i < 50; i++)); do
		grep -q vmpls-netns "/proc/$(cat "$d/holder.pid")/mountinfo" 2>/dev/null && break
		sleep 0.1
	done
	frr_do "$pe" chown frr:frr "$di"
	frr_do "$pe" ip netns add red
	# FRR 10's bgpd gives zebra the VRF's VPN label only while the VRF's loopback
	# is up (vpn_leak_zebra_vrf_label_update(): if_get_vrf_loopback())
	frr_do "$pe" ip -n red link set lo up
	frr_do "$pe" ip link set "$ceif" netns red
	frr_do "$pe" ip -n red addr add "$ceaddr" dev "$ceif"
	frr_do "$pe" ip -n red link set "$ceif" up

	fpm_server_start "$pe" fpm

	cat >"$d/zebra.conf" <<-EOF
		hostname $pe
		log file $di/zebra.log
		fpm address 127.0.0.1 port 2620
		no fpm use-next-hop-groups
	EOF
	cat >"$d/staticd.conf" <<-EOF
		hostname $pe
		log file $di/staticd.log
	EOF
	cat >"$d/bgpd.conf" <<-EOF
		hostname $pe
		log file $di/bgpd.log
		router bgp 65000
		 bgp router-id 198.18.255.$n
		 no bgp default ipv4-unicast
		 neighbor $remote remote-as 65000
		 neighbor $remote update-source 198.18.255.$n
		 neighbor $remote timers 1 3
		 neighbor $remote timers connect 1
		 address-family ipv4 vpn
		  neighbor $remote activate
		 exit-address-family
		exit
		router bgp 65000 vrf red
		 bgp router-id 198.18.255.$n
		 address-family ipv4 unicast
		  redistribute connected
		  label vpn export $vpnlabel
		  rd vpn export 65000:$n
		  rt vpn both 65000:1
		  export vpn
		  import vpn
		 exit-address-family
		exit
	EOF
	frr_do "$pe" sh -c "chown frr:frr $di/*.conf"
	if [[ $MGMTD == 1 ]]; then
		# mgmtd makes its pathspace directory there (a fresh root has none)
		mkdir -p "$ROOT/run/frr"
		frr_do "$pe" "$FRR/mgmtd" -d --log "file:$di/mgmtd.log" -i "$di/mgmtd.pid" $(common_args "$pe")
	fi
	zebra_start "$pe"
	if [[ $MGMTD == 1 ]]; then
		# staticd refuses a file (-f): mgmtd gives it its configuration
		frr_do "$pe" "$FRR/staticd" -d --log "file:$di/staticd.log" -i "$di/staticd.pid" $(common_args "$pe")
	else
		frr_do "$pe" "$FRR/staticd" -d -f "$di/staticd.conf" -i "$di/staticd.pid" $(common_args "$pe")
	fi
	frr_do "$pe" "$FRR/bgpd" -d -f "$di/bgpd.conf" -i "$di/bgpd.pid" $(common_args "$pe")
}

pe_start pe1 1 pe1-ce1 198.18.101.1/24 auto 198.18.255.2
pe_start pe2 2 pe2-ce2 198.18.102.1/24 5002 198.18.255.1
# staticd refuses labelled routes in its file: the labelled transport
# between the loopbacks (the kernel gets the module's plain copies)
vtysh_pe pe1 -c 'configure terminal' -c 'ip route 198.18.255.2/32 198.18.12.2 label 100'
vtysh_pe pe2 -c 'configure terminal' -c 'ip route 198.18.255.1/32 198.18.12.1 label 200'
# an interface of the VRF configured through vtysh (on FRR 10: through mgmtd, which
# must share zebra's VRF backend)
vtysh_pe pe1 -c 'configure terminal' -c 'interface pe1-ce1 vrf red' -c 'description customer red' || true
described() { vtysh_pe pe1 -c 'show interface pe1-ce1 vrf red' | grep -q "Description: customer red"; }
if described; then
	pass "pe1: an interface of VRF red configured through vtysh"
else
	fail "pe1: interface pe1-ce1 vrf red: configuring it through vtysh failed$(kill -0 "$(cat "$W/pe1/zebra.pid")" 2>/dev/null || echo ': zebra died')"
fi

# --- the VRF interfaces -----------------------------------------------------
# vrf_ifindex PE: "T" if red exists in both namespaces with one ifindex, up
vrf_ifindex() {
	local a b
	a=$(frr_do "$1" ip -o link show red 2>/dev/null | awk -F': ' '/state UP|,UP/ {print $1}')
	b=$(frr_do "$1" ip -n red -o link show red 2>/dev/null | awk -F': ' '/state UP|,UP/ {print $1}')
	[[ -n $a && $a == "$b" ]] && echo "$a"
}
for pe in pe1 pe2; do
	wait_for 5 "$pe: VRF interface red up in both namespaces with one ifindex" vrf_ifindex $pe
done
T1=$(vrf_ifindex pe1 || true)
T2=$(vrf_ifindex pe2 || true)
echo "VRF interface / table id: pe1 $T1, pe2 $T2"
if [[ -z $T1 || -z $T2 ]]; then
	# nothing below can pass without the table ids
	for pe in pe1 pe2; do echo "--- $pe zebra.log"; tail -20 "$W/$pe/zebra.log"; done
	echo "vpn-two-pe.sh: FAILED"
	exit 1
fi

# --- what FPM carries -------------------------------------------------------
# has PE REGEX: a decoded message of PE's FPM stream matches
has() {
	local text
	text=$(decoded "$1")
	grep -qE "$2" <<<"$text"
}
# vpn_label PE T: the label of PE's pop to the VRF interface T (its VPN label)
vpn_label() {
	decoded "$1" | sed -nE "s/.*NEWROUTE family=28\(mpls\) dst=L([0-9]+) .* oif $2\$/\1/p" | tail -1
}
wait_for 15 "pe1: iBGP VPNv4 session up and pe2's route imported into red" \
	has pe1 "NEWROUTE family=2\(inet\) dst=198.18.102.0/24 proto=186\(bgp\) table=$T1 "
wait_for 5 "pe2: pe1's route imported into red" \
	has pe2 "NEWROUTE family=2\(inet\) dst=198.18.101.0/24 proto=186\(bgp\) table=$T2 "
wait_for 5 "pe1: a VPN label pops to the VRF interface" has pe1 "family=28\(mpls\) dst=L[0-9]+ .* oif $T1\$"
wait_for 5 "pe2: a VPN label pops to the VRF interface" has pe2 "family=28\(mpls\) dst=L[0-9]+ .* oif $T2\$"
L1=$(vpn_label pe1 "$T1" || true)
L2=$(vpn_label pe2 "$T2" || true)
echo "VPN labels: pe1 (auto) ${L1:-?}, pe2 (fixed) ${L2:-?}"
[[ $L2 == 5002 ]] && pass "pe2's fixed VPN label is 5002" || fail "pe2's VPN label: ${L2:-none}"
[[ -n $L1 ]] && pass "pe1's VPN label allocated ($L1)" || fail "pe1's VPN label: none"

check() { if has "$1" "$2"; then pass "$3"; else fail "$3"; fi; }
check pe1 "dst=198.18.102.0/24 proto=186\(bgp\) table=$T1 type=1 via 198.18.12.2 oif [0-9]+ encap mpls 100/$L2\$" \
	"pe1: remote CE subnet in table $T1 with labels [100, $L2]"
check pe2 "dst=198.18.101.0/24 proto=186\(bgp\) table=$T2 type=1 via 198.18.12.1 oif [0-9]+ encap mpls 200/$L1\$" \
	"pe2: remote CE subnet in table $T2 with labels [200, $L1]"
check pe1 "NEWROUTE family=28\(mpls\) dst=L$L1 proto=186\(bgp\) table=254 type=1 oif $T1\$" \
	"pe1: VPN label $L1 (auto) pops to RTA_OIF $T1"
check pe2 "NEWROUTE family=28\(mpls\) dst=L5002 proto=186\(bgp\) table=254 type=1 oif $T2\$" \
	"pe2: VPN label 5002 (fixed) pops to RTA_OIF $T2"
check pe1 "NEWROUTE family=2\(inet\) dst=198.18.101.0/24 proto=2\(kernel\) table=$T1 type=1 oif [0-9]+\$" \
	"pe1: connected CE subnet in table $T1"
check pe2 "NEWROUTE family=2\(inet\) dst=198.18.102.0/24 proto=2\(kernel\) table=$T2 type=1 oif [0-9]+\$" \
	"pe2: connected CE subnet in table $T2"
if has pe1 "dst=198.18.10[12].0/24 .* table=254 "; then
	fail "pe1: a VRF route in table 254"
else
	pass "pe1: no VRF route in table 254"
fi
if [[ -n $(frr_do pe1 ip -n red route show 198.18.102.0/24) ]]; then
	fail "pe1: the VPN route is in the VRF namespace's kernel"
else
	pass "pe1: the VPN route is not in the VRF namespace's kernel (FPM only)"
fi
grep -q "vmpls: MPLS turned on" "$W/pe1/zebra.log" &&
	pass "zebra's log says the module turned MPLS on" || fail "no 'MPLS turned on' in zebra's log"

# --- the FPM server restarts: zebra replays the VRF's routes in table T ----
old_server=$(cat "$W/pe2/fpm-dump.pid")
kill "$old_server" 2>/dev/null || true
# the new server cannot bind while the old one still listens (once in CI under load)
wait_for 10 "pe2: the first FPM server stopped" bash -c "! kill -0 $old_server 2>/dev/null"
fpm_server_start pe2 replay
# zebra retries every 3 s; its first tries may meet no listener while python starts.
listening() { grep -q "^listening" "$W/pe2/replay-dump.out"; }
wait_for 15 "pe2: the restarted FPM server listens" listening
listening || { echo "--- pe2 replay-dump.out"; cat "$W/pe2/replay-dump.out"; }
replayed() {
	local text
	text=$(decoded pe2 replay.conn1.fpm) || return 1
	grep -qE "NEWROUTE family=28\(mpls\) dst=L5002 .* oif $T2\$" <<<"$text" &&
		grep -qE "NEWROUTE family=2\(inet\) dst=198.18.101.0/24 proto=186\(bgp\) table=$T2 .* encap mpls 200/$L1\$" <<<"$text" &&
		grep -qE "NEWROUTE family=2\(inet\) dst=198.18.102.0/24 proto=2\(kernel\) table=$T2 " <<<"$text"
}
if ! replayed; then
	# Under load zebra 8.4 was once seen to stay away after a refused try (CI, once in
	# many runs): naming the FPM server again is zebra's own reconnect command. What is
	# checked is what the replay carries, not zebra's retry timer.
	sleep 5
	replayed || vtysh_pe pe2 -c 'configure terminal' -c 'fpm address 127.0.0.1 port 2620' >/dev/null 2>&1 || true
fi
wait_for 15 "pe2: FPM reconnected -> VPN label pop, VPN route and connected route replayed in table $T2" replayed

# --- the VRF deleted --------------------------------------------------------
frr_do pe1 ip netns del red
wait_for 5 "pe1: VRF deleted -> connected route deleted in table $T1" \
	has pe1 "DELROUTE family=2\(inet\) dst=198.18.101.0/24 proto=[0-9]+\([a-z()]+\) table=$T1 "
wait_for 5 "pe1: VRF deleted -> VPN route deleted in table $T1" \
	has pe1 "DELROUTE family=2\(inet\) dst=198.18.102.0/24 proto=[0-9]+\([a-z()]+\) table=$T1 "
wait_for 5 "pe1: VRF deleted -> VRF interface gone" \
	bash -c "! nsenter -t $(cat "$W/pe1/holder.pid") -m -n ip link show red"

# --- a VRF created at runtime; a VRF interface left behind by a killed zebra -
# vrf_if_of PE VRF: the VRF interface's ifindex if it is up in both namespaces
vrf_if_of() {
	local a b
	a=$(frr_do "$1" ip -o link show "$2" 2>/dev/null | awk -F': ' '/,UP/ {print $1}')
	b=$(frr_do "$1" ip -n "$2" -o link show "$2" 2>/dev/null | awk -F': ' '/,UP/ {print $1}')
	[[ -n $a && $a == "$b" ]] && echo "$a"
}
# zebra 8.4 and 10.3 crash (in dplane_fpm_nl's pthread) when a netns VRF goes
# while its route deletes wait in the dataplane, unless the module hands them
# another socket (vz_process_after_kernel)
if kill -0 "$(cat "$W/pe1/zebra.pid")" 2>/dev/null; then
	pass "pe1: zebra still runs after the VRF's namespace was deleted"
else
	fail "pe1: zebra died after the VRF's namespace was deleted: $(tail -3 "$W/pe1/zebra.log" | tr '\n' ' ')"
fi
frr_do pe1 ip netns add blue
frr_do pe1 ip -n blue link set lo up
wait_for 5 "pe1: VRF blue created at runtime -> its VRF interface" vrf_if_of pe1 blue
kill -9 "$(cat "$W/pe1/zebra.pid")" 2>/dev/null || true
wait_for 5 "pe1: zebra killed (SIGKILL)" bash -c "! kill -0 $(cat "$W/pe1/zebra.pid")"
vrf_if_of pe1 blue >/dev/null && echo "pe1: the killed zebra left VRF interface blue behind"
zebra_start pe1
wait_for 5 "pe1: restarted zebra took over the VRF interface left behind" \
	grep -q "VRF blue: taking over the VRF interface a previous zebra left behind" "$W/pe1/zebra.log"
wait_for 5 "pe1: VRF interface blue up again in both namespaces" vrf_if_of pe1 blue
if [[ $(grep -c "VRF blue: VRF interface" "$W/pe1/zebra.log") -le 2 ]]; then
	pass "pe1: VRF interface blue made once, not again and again"
else
	fail "pe1: VRF interface blue made or removed repeatedly: $(grep -c "VRF blue: VRF interface" "$W/pe1/zebra.log") log lines"
fi
kill "$(cat "$W/pe1/zebra.pid")" 2>/dev/null || true
wait_for 5 "pe1: zebra stopped -> VRF interface blue gone" \
	bash -c "! nsenter -t $(cat "$W/pe1/holder.pid") -m -n ip link show blue"

# --- zebra stops: the other VRF interface goes too, and zebra exits cleanly -
kill "$(cat "$W/pe2/bgpd.pid")" "$(cat "$W/pe2/staticd.pid")" 2>/dev/null || true
kill "$(cat "$W/pe2/zebra.pid")" 2>/dev/null || true
wait_for 5 "pe2: zebra stopped -> VRF interface gone" \
	bash -c "! nsenter -t $(cat "$W/pe2/holder.pid") -m -n ip link show red"
wait_for 5 "pe2: zebra exited" bash -c "! kill -0 $(cat "$W/pe2/zebra.pid")"
if grep -q "Received signal 11" "$W/pe2/zebra.log"; then
	fail "pe2: zebra -n crashed on SIGTERM: $(grep -m1 -A6 'Received signal' "$W/pe2/zebra.log" | tr '\n' ' ')"
elif grep -q "Zebra final shutdown" "$W/pe2/zebra.log"; then
	pass "pe2: zebra -n with a netns VRF shut down on SIGTERM without crashing"
else
	fail "pe2: zebra's log has no final shutdown"
fi
sleep 0.5
if [[ -n $fixdir ]]; then
	mkdir -p "$fixdir"
	for f in "pe1/fpm.conn1.fpm vpn-pe1" "pe2/fpm.conn1.fpm vpn-pe2" "pe2/replay.conn1.fpm vpn-pe2-replay"; do
		set -- $f
		cp "$W/$1" "$fixdir/$2.fpm"
		python3 "$dump" --decode "$fixdir/$2.fpm" >"$fixdir/$2.txt"
	done
	echo "fixtures: $fixdir/vpn-pe1.fpm, vpn-pe2.fpm, vpn-pe2-replay.fpm (+ .txt)"
fi

if ((FAILED)); then
	for pe in pe1 pe2; do
		echo "--- $pe zebra.log"; tail -20 "$W/$pe/zebra.log"
		echo "--- $pe FPM"; decoded $pe 2>/dev/null | tail -30
	done
	echo "vpn-two-pe.sh: FAILED"
	exit 1
fi
echo "vpn-two-pe.sh: all checks passed"
