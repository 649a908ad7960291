#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
#
# Two PEs, LDP between their loopbacks (static routes over one link), and a
# VPWS signalled by FRR's ldpd (`l2vpn ENG type vpls`, one member interface,
# one member pseudowire mpw0), each zebra with vmpls_zebra.so whose PW
# channel goes to pw-recorder.py playing vmpls. Checks what the module
# promises for pseudowires (README.md, "Pseudowires"):
#   - ldpd signals the PW, both ends show it up (`show l2vpn atom vc json`);
#   - the channel carries hello, sync and install with the labels ldpd
#     signalled (pe1's local label is pe2's remote label and back), the
#     control word and the peer;
#   - the recorder restarted: the module reconnects and replays the PW;
#   - the recorder says `status down`: FRR shows the PW not up at that PE
#     (and ldpd signals it, the far PE shows it not up too); `up` again: up;
#   - the recorder gone (vmpls away): the PW is not up; back: up again;
#   - the l2vpn removed from ldpd: the module sends uninstall.
# The stand-in interface for the PW (zebra and ldpd need `mpw0` to exist):
# an ifb device here (this kernel has no dummy); vmpls makes it in FRR mode.
# Root only; namespaces vp<pid>-*; 198.18.0.0/15; self-cleaning (trap EXIT);
# every wait bounded. Exit 0 if every check passed.
#
#   frr/zebra-module/tools/pw-two-pe.sh
#
# VMPLS_ZEBRA_MODULE: the module to load (default: build it). KEEP=1 keeps
# the work directory.
set -euo pipefail

[[ $(id -u) == 0 ]] || { echo "pw-two-pe.sh: run as root" >&2; exit 1; }
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
rec="$repo/frr/zebra-module/tools/pw-recorder.py"
FRR=/usr/lib/frr
SO=${VMPLS_ZEBRA_MODULE:-$("$repo/scripts/build-zebra-module" | tail -1)}
[[ -f $SO ]] || { echo "pw-two-pe.sh: no module at $SO" >&2; exit 1; }

id=$$
W=$(mktemp -d /tmp/vz-pw.XXXXXX)
chmod 755 "$W"
NAMESPACES=()
FAILED=0

cleanup() {
	set +e
	local f p
	for f in "$W"/*/ldpd.pid "$W"/*/staticd.pid "$W"/*/zebra.pid; do
		[[ -f $f ]] && kill "$(cat "$f")" 2>/dev/null
	done
	for f in "$W"/*/rec.pid; do
		[[ -f $f ]] && kill "$(cat "$f")" 2>/dev/null
	done
	sleep 0.5
	for f in "$W"/*/*.pid; do
		[[ -f $f ]] || continue
		p=$(cat "$f")
		kill -0 "$p" 2>/dev/null && kill -9 "$p" 2>/dev/null
	done
	for n in "${NAMESPACES[@]}"; do ip netns del "$n" 2>/dev/null; done
	[[ ${KEEP:-0} == 1 ]] && echo "kept $W" || rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

pass() { printf 'PASS: %s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*"; FAILED=1; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
# wait_for SECONDS DESCRIPTION COMMAND...: COMMAND until it succeeds
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
		sleep 0.2
	done
	fail "$what: not within $limit s"
}

ns() { echo "vp$id-$1"; }
netns_add() {
	ip netns add "$(ns "$1")"
	NAMESPACES+=("$(ns "$1")")
	ip -n "$(ns "$1")" link set lo up
}
pe_do() { ip netns exec "$(ns "$1")" "${@:2}"; }
vtysh_pe() { pe_do "$1" vtysh --vty_socket "$W/$1" "${@:2}"; }

# --- topology: ce1 - pe1 - pe2 - ce2 ---------------------------------------
for h in pe1 pe2 ce1 ce2; do netns_add $h; done
ip -n "$(ns pe1)" link add pe1-pe2 type veth peer name pe2-pe1 netns "$(ns pe2)"
ip -n "$(ns pe1)" link add pe1-ce1 type veth peer name ce1-pe1 netns "$(ns ce1)"
ip -n "$(ns pe2)" link add pe2-ce2 type veth peer name ce2-pe2 netns "$(ns ce2)"
ip -n "$(ns pe1)" addr add 198.18.12.1/24 dev pe1-pe2
ip -n "$(ns pe2)" addr add 198.18.12.2/24 dev pe2-pe1
ip -n "$(ns pe1)" addr add 198.18.255.1/32 dev lo
ip -n "$(ns pe2)" addr add 198.18.255.2/32 dev lo
for l in "pe1 pe1-pe2" "pe2 pe2-pe1" "pe1 pe1-ce1" "pe2 pe2-ce2" "ce1 ce1-pe1" "ce2 ce2-pe2"; do
	set -- $l
	ip -n "$(ns "$1")" link set "$2" up
done
# the stand-in for the pseudowire (what vmpls makes in FRR mode)
for pe in pe1 pe2; do
	ip -n "$(ns $pe)" link add mpw0 type ifb
	ip -n "$(ns $pe)" link set mpw0 up
done

# rec_start PE [FIRST]: the recorder playing vmpls in PE's namespace, its
# connections numbered from FIRST (default 1) in $W/PE/channel.log
# (ip netns exec execs python: $! is the recorder's pid)
rec_start() {
	ip netns exec "$(ns "$1")" python3 "$rec" --out "$W/$1/channel.log" --mode "$W/$1/mode" \
		--first "${2:-1}" --max-seconds 120 >>"$W/$1/rec.out" 2>&1 &
	echo $! >"$W/$1/rec.pid"
	disown
}
rec_listening() { [[ $(grep -c "^listening" "$W/$1/rec.out") -ge ${2:-1} ]]; }

# --- one PE: recorder, zebra + module, staticd, ldpd ------------------------
# pe_start PE N REMOTE_N
pe_start() {
	local pe=$1 n=$2 r=$3 d="$W/$1"
	mkdir -p "$d"
	chown frr:frr "$d"
	echo up >"$d/mode"
	rec_start "$pe"
	cat >"$d/zebra.conf" <<-EOF2
		hostname $pe
		log file $d/zebra.log
		debug zebra pseudowires
	EOF2
	cat >"$d/staticd.conf" <<-EOF2
		hostname $pe
		log file $d/staticd.log
		ip route 198.18.255.$r/32 198.18.12.$r
	EOF2
	cat >"$d/ldpd.conf" <<-EOF2
		hostname $pe
		log file $d/ldpd.log
		mpls ldp
		 router-id 198.18.255.$n
		 address-family ipv4
		  discovery transport-address 198.18.255.$n
		  interface $pe-pe$r
		  exit
		 exit-address-family
		exit
		l2vpn ENG type vpls
		 member interface $pe-ce$n
		 member pseudowire mpw0
		  neighbor lsr-id 198.18.255.$r
		  pw-id 100
		 exit
		exit
	EOF2
	chown frr:frr "$d"/*.conf
	local common=(--vty_socket "$d" -z "$d/zserv.api" -P 0)
	pe_do "$pe" "$FRR/zebra" -d -f "$d/zebra.conf" -i "$d/zebra.pid" "${common[@]}" \
		--log "file:$d/zebra.log" -M "$SO:pw=127.0.0.1:2621"
	pe_do "$pe" "$FRR/staticd" -d -f "$d/staticd.conf" -i "$d/staticd.pid" "${common[@]}"
	pe_do "$pe" "$FRR/ldpd" -d -f "$d/ldpd.conf" -i "$d/ldpd.pid" "${common[@]}" \
		--ctl_socket "$d"
}
pe_start pe1 1 2
pe_start pe2 2 1

vc_json() { vtysh_pe "$1" -c 'show l2vpn atom vc json'; }
# vc_status PE: mpw0's status in `show l2vpn atom vc json` ("up", "down"...)
vc_status() {
	vc_json "$1" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["mpw0"]["status"])'
}
vc_is() { [[ $(vc_status "$1") == "$2" ]]; }

wait_for 30 "pe1: ldpd signals mpw0, up" vc_is pe1 up
wait_for 10 "pe2: ldpd signals mpw0, up" vc_is pe2 up

# --- the labels ldpd signalled and what the channel carried -----------------
# binding PE FIELD: FIELD of the PW to the far PE in `show l2vpn atom binding json`
binding() {
	vtysh_pe "$1" -c 'show l2vpn atom binding json' |
		python3 -c 'import json,sys; d=json.load(sys.stdin); print(list(d.values())[0][sys.argv[1]])' "$2"
}
L1=$(binding pe1 localLabel || true)
R1=$(binding pe1 remoteLabel || true)
L2=$(binding pe2 localLabel || true)
R2=$(binding pe2 remoteLabel || true)
echo "labels: pe1 local ${L1:-?} remote ${R1:-?}; pe2 local ${L2:-?} remote ${R2:-?}"
[[ -n $L1 && $L1 == "$R2" && $R1 == "$L2" ]] &&
	pass "ldpd: pe1's local label is pe2's remote label and back" ||
	fail "ldpd labels do not cross: $L1/$R1 vs $L2/$R2"

# chan PE CONN CHECK: a python check over connection CONN's messages of PE
# (msgs: the decoded lines in order); exit status = the check
chan() {
	python3 - "$W/$1/channel.log" "$2" "$3" <<-'PY'
		import json, sys
		path, conn, expr = sys.argv[1], sys.argv[2], sys.argv[3]
		msgs = []
		for line in open(path):
		    n, _, text = line.partition(" ")
		    if n == conn:
		        msgs.append(json.loads(text))
		def last_install(name):
		    pws = [m["pw"] for m in msgs if m["op"] == "install" and m["pw"]["name"] == name]
		    return pws[-1] if pws else None
		def synced(name):
		    s = [m for m in msgs if m["op"] == "sync"]
		    return [p for p in s[-1]["pws"] if p["name"] == name][0] if s and any(p["name"] == name for p in s[-1]["pws"]) else None
		sys.exit(0 if eval(expr) else 1)
	PY
}
spec() { # spec LOCAL REMOTE PEER: a python expression matching a PwSpec p
	echo "p is not None and p['local-label'] == $1 and p['remote-label'] == $2 and p['peer'] == '$3' and p['control-word'] is True and p['pw-type'] == 'ethernet'"
}
for c in "pe1 $L1 $R1 198.18.255.2" "pe2 $L2 $R2 198.18.255.1"; do
	set -- $c
	chan $1 1 "msgs[0] == {'op': 'hello', 'frr': '$(dpkg-query -W -f='${Version}' frr | sed 's/-.*//')'} and msgs[1]['op'] == 'sync'" &&
		pass "$1: channel opens with hello (FRR version) and sync" || fail "$1: no hello+sync first: $(head -2 "$W/$1/channel.log")"
	chan $1 1 "(lambda p: $(spec $2 $3 $4))(last_install('mpw0'))" &&
		pass "$1: install mpw0 local-label $2 remote-label $3 peer $4 control-word pw-type ethernet" ||
		fail "$1: install mpw0 not as signalled: $(grep install "$W/$1/channel.log" | tail -1)"
done

# --- vmpls away: not forwarding; back: the PW replayed and up ---------------
kill "$(cat "$W/pe1/rec.pid")"
wait_for 10 "pe1: vmpls gone -> FRR shows mpw0 down" vc_is pe1 down
wait_for 10 "pe1: zebra logs why" grep -q "PW mpw0: not forwarding (vmpls not connected)" "$W/pe1/zebra.log"
rec_start pe1 2
wait_for 10 "pe1: the restarted listener listens" rec_listening pe1 2
wait_for 10 "pe1: module reconnected and replayed mpw0 in its sync" \
	chan pe1 2 "(lambda p: $(spec "$L1" "$R1" 198.18.255.2))(synced('mpw0'))"
wait_for 10 "pe1: vmpls back -> mpw0 up again" vc_is pe1 up
wait_for 10 "pe2: mpw0 up" vc_is pe2 up

# --- vmpls says down: FRR shows it, ldpd signals it -------------------------
echo "down attachment down" >"$W/pe1/mode"
wait_for 10 "pe1: status down from vmpls -> FRR shows mpw0 down" vc_is pe1 down
wait_for 10 "pe1: zebra logs vmpls's reason" grep -q "PW mpw0: vmpls says down: attachment down" "$W/pe1/zebra.log"
wait_for 10 "pe2: ldpd signalled pe1's status -> mpw0 down at the far end too" vc_is pe2 down
wait_for 10 "pe2: zebra uninstalled mpw0 -> uninstall on pe2's channel" \
	chan pe2 1 "msgs[-1] == {'op': 'uninstall', 'name': 'mpw0'}"
echo up >"$W/pe1/mode"
wait_for 10 "pe1: status up from vmpls -> mpw0 up" vc_is pe1 up
wait_for 10 "pe2: mpw0 up again" vc_is pe2 up
wait_for 10 "pe2: installed again" chan pe2 1 "(lambda p: $(spec "$L2" "$R2" 198.18.255.1))(last_install('mpw0')) and msgs[-1]['op'] == 'install'"

# --- the l2vpn removed: uninstall --------------------------------------------
vtysh_pe pe1 -c 'configure terminal' -c 'no l2vpn ENG type vpls' >/dev/null
wait_for 10 "pe1: l2vpn removed -> uninstall on the channel" \
	chan pe1 2 "msgs[-1] == {'op': 'uninstall', 'name': 'mpw0'}"

grep -q "PW channel: not a message\|unknown op" "$W/pe1/zebra.log" &&
	fail "pe1: zebra complained about the channel" || pass "pe1: no channel complaints in zebra's log"

if ((FAILED)); then
	for pe in pe1 pe2; do
		echo "--- $pe zebra.log"; grep -i "vmpls\|pseudowire" "$W/$pe/zebra.log" | tail -20
		echo "--- $pe channel"; tail -10 "$W/$pe/channel.log"
	done
	echo "pw-two-pe.sh: FAILED"
	exit 1
fi
echo "pw-two-pe.sh: all checks passed"
