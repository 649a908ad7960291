//! Test scaffolding: network namespaces of our own (`vfp-<pid>-<tag>`, deleted on drop
//! even on panic), veth links between them, threads inside a namespace, raw AF_PACKET
//! sockets and frame builders. Needs root.

#![allow(dead_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::time::{Duration, Instant};

pub struct Netns(pub String);

impl Netns {
    /// A fresh namespace; `ipv6` off keeps the kernel's chatter (RS, MLD) off the links.
    pub fn new(tag: &str, ipv6: bool) -> Netns {
        let ns = Netns(format!("vfp-{}-{tag}", std::process::id()));
        run("ip", &["netns", "add", &ns.0]);
        if !ipv6 {
            ns.exec(&[
                "sysctl",
                "-qw",
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            ]);
        }
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// `ip -n NS ARGS`.
    pub fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", &self.0];
        all.extend_from_slice(args);
        run("ip", &all);
    }

    /// `ip netns exec NS ARGS`, its stdout.
    pub fn exec(&self, args: &[&str]) -> String {
        let mut all = vec!["netns", "exec", &self.0];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// Puts the calling thread into the namespace.
    pub fn enter(&self) {
        let file = std::fs::File::open(format!("/run/netns/{}", self.0)).expect("open netns");
        // SAFETY: setns(2) on a descriptor we own; it changes only this thread's network
        // namespace.
        let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns: {}", io::Error::last_os_error());
    }

    /// Runs `f` on a thread inside the namespace.
    pub fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        std::thread::scope(|s| {
            s.spawn(|| {
                self.enter();
                f()
            })
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
        })
    }

    pub fn ifindex(&self, ifname: &str) -> u32 {
        let name = std::ffi::CString::new(ifname).unwrap();
        // SAFETY: a valid NUL-terminated string, alive across the call.
        let i = self.run(|| unsafe { libc::if_nametoindex(name.as_ptr()) });
        assert_ne!(i, 0, "no {ifname} in {}", self.0);
        i
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

pub fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("run {cmd}: {e}"));
    assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn mac_str(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// A veth pair `a_if` (in `a`, MAC `a_mac`) -- `b_if` (in `b`), both up.
pub fn veth(a: &Netns, a_if: &str, a_mac: [u8; 6], b: &Netns, b_if: &str, b_mac: [u8; 6], mtu: u32) {
    let mtu = mtu.to_string();
    let (am, bm) = (mac_str(a_mac), mac_str(b_mac));
    run(
        "ip",
        &[
            "link", "add", a_if, "netns", &a.0, "address", &am, "mtu", &mtu, "type", "veth", "peer", "name",
            b_if, "netns", &b.0, "address", &bm, "mtu", &mtu,
        ],
    );
    a.ip(&["link", "set", a_if, "up"]);
    b.ip(&["link", "set", b_if, "up"]);
}

/// A raw AF_PACKET socket bound to one interface, all protocols.
pub struct PacketSocket(OwnedFd);

impl PacketSocket {
    /// Opens it on the calling thread's namespace (call inside `Netns::run`).
    pub fn open(ifindex: u32) -> PacketSocket {
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain socket(2), checked below.
        let fd =
            unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, i32::from(proto)) };
        assert!(fd >= 0, "socket: {}", io::Error::last_os_error());
        // SAFETY: a descriptor we just opened and own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_ll is plain old data; zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: `sll` is a valid sockaddr_ll of the length passed.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&raw const sll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        assert_eq!(r, 0, "bind: {}", io::Error::last_os_error());
        PacketSocket(fd)
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }

    pub fn send(&self, frame: &[u8]) {
        // SAFETY: `frame` is valid for reads of its length.
        let n = unsafe { libc::send(self.0.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        assert_eq!(n, frame.len() as isize, "send: {}", io::Error::last_os_error());
    }

    /// Frames received (not our own transmissions) until `quiet` passes without one.
    pub fn drain(&self, quiet: Duration) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let mut pfd = libc::pollfd { fd: self.0.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd.
            let r = unsafe { libc::poll(&mut pfd, 1, quiet.as_millis() as i32) };
            if r <= 0 {
                break;
            }
            let mut buf = vec![0u8; 70000];
            // SAFETY: sockaddr_ll is plain old data.
            let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            // SAFETY: `buf` and `sll` are valid for writes of the lengths passed.
            let n = unsafe {
                libc::recvfrom(
                    self.0.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                    (&raw mut sll).cast(),
                    &mut len,
                )
            };
            if n < 0 {
                continue;
            }
            if sll.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            buf.truncate(n as usize);
            out.push(buf);
        }
        out
    }
}

/// An MPLS label stack entry.
pub fn lse(label: u32, tc: u8, bos: bool, ttl: u8) -> [u8; 4] {
    ((label << 12) | (u32::from(tc) << 9) | (u32::from(bos) << 8) | u32::from(ttl)).to_be_bytes()
}

/// An IPv4/UDP packet 198.18.0.1 -> `dst` with `payload` bytes and a valid header checksum.
pub fn ipv4_udp(dst: [u8; 4], ttl: u8, payload: usize) -> Vec<u8> {
    let total = 20 + 8 + payload;
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[8] = ttl;
    p[9] = 17;
    p[12..16].copy_from_slice(&[198, 18, 0, 1]);
    p[16..20].copy_from_slice(&dst);
    let c = !fold(sum16(&p[..20]));
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&1234u16.to_be_bytes());
    p[22..24].copy_from_slice(&5678u16.to_be_bytes());
    p[24..26].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
    for (i, b) in p[28..].iter_mut().enumerate() {
        *b = i as u8;
    }
    p
}

pub fn sum16(b: &[u8]) -> u32 {
    b.chunks(2).map(|c| u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0))).sum()
}

pub fn fold(mut s: u32) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// An Ethernet frame.
pub fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + payload.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}
