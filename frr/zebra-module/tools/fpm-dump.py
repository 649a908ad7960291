#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Minimal FPM server: accept zebra's dplane_fpm_nl TCP connections and keep
the raw byte stream of each connection in its own file.

  fpm-dump.py --out /tmp/x/r1            # writes /tmp/x/r1.conn1.fpm, .conn2.fpm ...
  fpm-dump.py --decode FILE.fpm           # print a summary of a saved stream

With --summary, a one-line decoded summary of each message is printed on
stdout as it arrives (flushed).  Standard library only.

FPM framing: u8 version (1), u8 type (1 = netlink), u16 length (big endian,
header included), then one netlink message (host byte order).
"""

import argparse
import errno
import ipaddress
import os
import select
import signal
import socket
import struct
import sys
import time

RTM = {16: "NEWLINK", 17: "DELLINK", 24: "NEWROUTE", 25: "DELROUTE",
       104: "NEWNEXTHOP", 105: "DELNEXTHOP", 28: "NEWNEIGH", 29: "DELNEIGH"}
FAMILY = {2: "inet", 10: "inet6", 28: "mpls", 0: "unspec", 7: "bridge"}
PROTO = {0: "unspec", 1: "redirect", 2: "kernel", 3: "boot", 4: "static",
         11: "zebra", 186: "bgp", 187: "isis", 188: "ospf", 189: "rip",
         192: "eigrp", 193: "ldp", 194: "sharp", 195: "pbr", 196: "static(frr)",
         197: "openfabric", 198: "srte"}
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY, RTA_PREFSRC = 1, 4, 5, 6, 7
RTA_MULTIPATH, RTA_TABLE, RTA_VIA, RTA_NEWDST = 9, 15, 18, 19
RTA_ENCAP_TYPE, RTA_ENCAP, RTA_NH_ID = 21, 22, 30


def labels(b):
    out = []
    for i in range(0, len(b) - 3, 4):
        (w,) = struct.unpack(">I", b[i:i + 4])
        out.append(w >> 12)
    return out


def addr(family, b):
    if family == 2 and len(b) == 4:
        return str(ipaddress.IPv4Address(b))
    if family == 10 and len(b) == 16:
        return str(ipaddress.IPv6Address(b))
    if family == 28:
        return "L" + "/".join(map(str, labels(b)))
    return b.hex()


def attrs(b):
    i = 0
    while i + 4 <= len(b):
        ln, ty = struct.unpack("=HH", b[i:i + 4])
        if ln < 4:
            break
        yield ty & 0x3FFF, b[i + 4:i + ln]
        i += (ln + 3) & ~3


def via(b):
    (fam,) = struct.unpack("=H", b[:2])
    return addr(fam, b[2:])


def nh_desc(family, a, ifindex=None):
    d = []
    if RTA_GATEWAY in a:
        d.append("via " + addr(family, a[RTA_GATEWAY]))
    if RTA_VIA in a:
        d.append("via " + via(a[RTA_VIA]))
    oif = ifindex if ifindex is not None else (
        struct.unpack("=i", a[RTA_OIF])[0] if RTA_OIF in a else None)
    if oif:
        d.append("oif %d" % oif)
    if RTA_NEWDST in a:
        d.append("out " + "/".join(map(str, labels(a[RTA_NEWDST]))))
    if RTA_ENCAP_TYPE in a:
        (et,) = struct.unpack("=H", a[RTA_ENCAP_TYPE][:2])
        enc = dict(attrs(a.get(RTA_ENCAP, b"")))
        if et == 1 and 1 in enc:
            d.append("encap mpls " + "/".join(map(str, labels(enc[1]))))
        else:
            d.append("encap type %d" % et)
    return " ".join(d) if d else "-"


def describe(msg):
    ln, ty, flags, seq, pid = struct.unpack("=IHHII", msg[:16])
    name = RTM.get(ty, str(ty))
    if ty not in (24, 25):
        return "%s len=%d" % (name, ln)
    fam, dlen, slen, tos, table, proto, scope, rtype, rflags = struct.unpack(
        "=BBBBBBBBI", msg[16:28])
    a = {}
    for t, v in attrs(msg[28:ln]):
        a[t] = v
    dst = addr(fam, a[RTA_DST]) if RTA_DST in a else ("0" if fam != 28 else "?")
    if fam != 28:
        dst += "/%d" % dlen
    if RTA_TABLE in a:
        table = struct.unpack("=I", a[RTA_TABLE])[0]
    parts = ["%s family=%d(%s) dst=%s proto=%d(%s) table=%d type=%d" % (
        name, fam, FAMILY.get(fam, "?"), dst, proto, PROTO.get(proto, "?"),
        table, rtype)]
    if RTA_NH_ID in a:
        parts.append("nh_id=%d" % struct.unpack("=I", a[RTA_NH_ID])[0])
    if RTA_MULTIPATH in a:
        mp = a[RTA_MULTIPATH]
        i, hops = 0, []
        while i + 8 <= len(mp):
            nlen, nflags, nhops, ifi = struct.unpack("=HBBi", mp[i:i + 8])
            if nlen < 8:
                break
            sub = dict(attrs(mp[i + 8:i + nlen]))
            hops.append(nh_desc(fam, sub, ifi))
            i += (nlen + 3) & ~3
        parts.append("multipath[" + "; ".join(hops) + "]")
    else:
        parts.append(nh_desc(fam, a))
    return " ".join(parts)


def frames(data):
    """yield (frame offset, frame length, [netlink messages]) of every
    complete FPM frame in a byte string.  One frame may hold several netlink
    messages: zebra sends a route update as RTM_DELROUTE + RTM_NEWROUTE in a
    single frame."""
    i = 0
    while i + 4 <= len(data):
        ver, typ, ln = struct.unpack(">BBH", data[i:i + 4])
        if ln < 4 or i + ln > len(data):
            break
        msgs = []
        if typ == 1:
            body, j = data[i + 4:i + ln], 0
            while j + 16 <= len(body):
                (mlen,) = struct.unpack("=I", body[j:j + 4])
                if mlen < 16 or j + mlen > len(body):
                    break
                msgs.append(body[j:j + mlen])
                j += (mlen + 3) & ~3
        yield i, ln, msgs
        i += ln


def decode_file(path):
    data = open(path, "rb").read()
    n = 0
    nf = 0
    for off, ln, msgs in frames(data):
        nf += 1
        for k, m in enumerate(msgs):
            print("%6d%s %s" % (off, "+" if k else " ", describe(m)))
            n += 1
    print("# %d frames, %d netlink messages, %d bytes" % (nf, n, len(data)))


def serve(args):
    host, port = args.listen.rsplit(":", 1)
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # A server that replaces another (a restart under test) may start while the old
    # one still listens: it closes within its 0.2 s select, later under load.
    bind_deadline = time.monotonic() + 10
    while True:
        try:
            srv.bind((host, int(port)))
            break
        except OSError as e:
            if e.errno != errno.EADDRINUSE or time.monotonic() > bind_deadline:
                raise
            time.sleep(0.1)
    srv.listen(4)
    deadline = time.monotonic() + args.max_seconds
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    conn_no = 0
    conns = {}  # socket -> [file, buffer of undecoded bytes, number]
    print("listening on %s" % args.listen, flush=True)
    while not stop and time.monotonic() < deadline:
        rl = [srv] + list(conns)
        try:
            r, _, _ = select.select(rl, [], [], 0.2)
        except InterruptedError:
            continue
        for s in r:
            if s is srv:
                c, peer = srv.accept()
                conn_no += 1
                path = "%s.conn%d.fpm" % (args.out, conn_no)
                f = open(path, "wb")
                conns[c] = [f, b"", conn_no]
                print("# connection %d from %s:%d -> %s" % (conn_no, peer[0], peer[1], path), flush=True)
                continue
            st = conns[s]
            try:
                data = s.recv(65536)
            except ConnectionError:
                data = b""
            if not data:
                st[0].close()
                print("# connection %d closed" % st[2], flush=True)
                del conns[s]
                s.close()
                continue
            st[0].write(data)
            st[0].flush()
            if args.summary:
                buf = st[1] + data
                used = 0
                for off, ln, msgs in frames(buf):
                    for k, m in enumerate(msgs):
                        print("[%d]%s %s" % (st[2], "+" if k else "", describe(m)), flush=True)
                    used = off + ln
                st[1] = buf[used:]
    for s, st in conns.items():
        st[0].close()
        s.close()
    srv.close()


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", default="127.0.0.1:2620")
    p.add_argument("--out", help="file prefix; connection N goes to PREFIX.connN.fpm")
    p.add_argument("--summary", action="store_true", help="print decoded messages")
    p.add_argument("--max-seconds", type=float, default=600.0)
    p.add_argument("--decode", metavar="FILE", help="summarise a saved stream and exit")
    args = p.parse_args()
    if args.decode:
        decode_file(args.decode)
        return
    if not args.out:
        p.error("--out is required")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    serve(args)


if __name__ == "__main__":
    main()
