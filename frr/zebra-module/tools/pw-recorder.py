#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Plays vmpls on the zebra module's pseudowire channel (a test tool).

Listens on ADDR:PORT (default 127.0.0.1:2621), accepts the module's
connections one after another, appends every line it receives to OUT
(prefixed with the connection number: "1 {json}"), and answers each PW named
in a sync or install with a status line. The status comes from the file
MODE (re-read every 0.2 s; a change is sent for every known PW at once):
  up                 -> {"op":"status","name":N,"up":true}
  down REASON...     -> {"op":"status","name":N,"up":false,"reason":"REASON..."}
  (no file)          -> up
Prints "listening" once bound, "connected N" per connection. Exits after
--max-seconds.

  pw-recorder.py --out FILE --mode FILE [--listen 127.0.0.1:2621] [--max-seconds 120]
                 [--first N (number of the first connection, default 1)]
"""
import argparse
import json
import os
import select
import socket
import sys
import time


def read_mode(path):
    try:
        with open(path) as f:
            text = f.read().strip()
    except FileNotFoundError:
        return (True, None)
    if text.startswith("down"):
        return (False, text[4:].strip() or "down")
    return (True, None)


def status_line(name, mode):
    up, reason = mode
    msg = {"op": "status", "name": name, "up": up}
    if reason:
        msg["reason"] = reason
    return (json.dumps(msg) + "\n").encode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", default="127.0.0.1:2621")
    ap.add_argument("--out", required=True)
    ap.add_argument("--mode", required=True)
    ap.add_argument("--max-seconds", type=float, default=120)
    ap.add_argument("--first", type=int, default=1, help="number of the first connection")
    a = ap.parse_args()
    host, port = a.listen.rsplit(":", 1)
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, int(port)))
    srv.listen(4)
    print("listening", flush=True)
    deadline = time.monotonic() + a.max_seconds
    out = open(a.out, "a", buffering=1)
    conn, buf, nconn, names = None, b"", a.first - 1, []
    mode = read_mode(a.mode)
    while time.monotonic() < deadline:
        rl = [srv] + ([conn] if conn else [])
        r, _, _ = select.select(rl, [], [], 0.2)
        if srv in r:
            c, _ = srv.accept()
            if conn:
                conn.close()
            conn, buf, names = c, b"", []
            nconn += 1
            print("connected %d" % nconn, flush=True)
        if conn and conn in r:
            data = conn.recv(65536)
            if not data:
                conn.close()
                conn = None
                continue
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                out.write("%d %s\n" % (nconn, line.decode(errors="replace")))
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                new = []
                if msg.get("op") == "sync":
                    names = [p["name"] for p in msg.get("pws", [])]
                    new = names
                elif msg.get("op") == "install":
                    n = msg["pw"]["name"]
                    if n not in names:
                        names.append(n)
                    new = [n]
                elif msg.get("op") == "uninstall" and msg.get("name") in names:
                    names.remove(msg["name"])
                for n in new:
                    conn.sendall(status_line(n, mode))
        m = read_mode(a.mode)
        if m != mode:
            mode = m
            print("mode %s" % (mode,), flush=True)
            if conn:
                for n in names:
                    conn.sendall(status_line(n, mode))
    return 0


if __name__ == "__main__":
    sys.exit(main())
