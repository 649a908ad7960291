//! Test scaffolding shared by vmpls's tests (a dev-dependency only): network namespaces of
//! their own, veth links between them, code run inside one, and a plain packet socket to
//! see the wire the way any other program does. Needs root, and `ip` (iproute2).
//!
//! Every [`Netns`] has a name no other test, in this process or another, uses
//! (`vmpls-<pid>-<n>-<tag>`), and is deleted when dropped: when the test ends, fails or
//! panics (unwinding drops it); the interfaces in it go with it.

#![deny(unsafe_code)]

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub use vmpls_sys::event::{readable, wait_readable};
pub use vmpls_sys::process::is_root;

/// A directory of the test's own (`vmpls-<pid>-<tag>` under the system's temporary
/// directory), emptied when made and removed on drop, also when the test fails.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("vmpls-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the test's directory");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `ip ARGS` and panics with its error output if it fails.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

/// Runs `ip ARGS` and returns its standard output; panics if it fails.
pub fn ip_output(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn mac_str(m: [u8; 6]) -> String {
    m.map(|b| format!("{b:02x}")).join(":")
}

/// A network namespace of the test's own, with `lo` up; deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// A fresh namespace, its name built from `tag` (keep it short: it shows in `ip netns`).
    pub fn new(tag: &str) -> Netns {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let ns = Netns { name: format!("vmpls-{}-{n}-{tag}", std::process::id()) };
        ip(&["netns", "add", &ns.name]);
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// A fresh namespace with IPv6 off, so the kernel's own chatter (router solicitations,
    /// MLD, neighbour discovery) does not land in the sockets under test.
    pub fn without_ipv6(tag: &str) -> Netns {
        let ns = Netns::new(tag);
        ns.sysctl(&["net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"]);
        ns
    }

    /// The name, as `ip netns` shows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n NS ARGS`.
    pub fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        ip(&all);
    }

    /// Runs `ip -n NS ARGS` and returns its standard output.
    pub fn ip_output(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        ip_output(&all)
    }

    /// Runs `ARGS` inside the namespace (`ip netns exec`) and returns its standard output;
    /// panics if it fails.
    pub fn exec(&self, args: &[&str]) -> String {
        let mut all = vec!["netns", "exec", &self.name];
        all.extend_from_slice(args);
        ip_output(&all)
    }

    /// Sets sysctls (`key=value`) inside the namespace.
    pub fn sysctl(&self, settings: &[&str]) {
        let mut args = vec!["sysctl", "-qw"];
        args.extend_from_slice(settings);
        self.exec(&args);
    }

    fn file(&self) -> File {
        File::open(format!("/run/netns/{}", self.name)).expect("open the namespace")
    }

    /// Runs `f` on a thread inside the namespace and returns its result; a panic in `f`
    /// goes on in the caller. Sockets opened there stay in the namespace wherever they
    /// are used later.
    pub fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        vmpls_sys::netns::run_in(&self.file(), f).expect("enter the namespace")
    }

    /// Moves the calling thread into the namespace, for good: only on a thread the test
    /// owns and ends afterwards.
    pub fn enter(&self) {
        vmpls_sys::netns::enter(self.file()).expect("enter the namespace");
    }

    /// A veth pair inside this namespace: `a` (MAC `a_mac`, `aa:bb:..`) -- `b` (MAC
    /// `b_mac`), both with `mtu`, both up.
    pub fn veth(&self, (a, a_mac): (&str, &str), (b, b_mac): (&str, &str), mtu: u32) {
        let mtu = mtu.to_string();
        self.ip(&["link", "add", a, "address", a_mac, "mtu", &mtu, "type", "veth", "peer", "name", b]);
        self.ip(&["link", "set", b, "address", b_mac, "mtu", &mtu]);
        self.ip(&["link", "set", a, "up"]);
        self.ip(&["link", "set", b, "up"]);
    }

    /// The index of `ifname` in the namespace.
    pub fn ifindex(&self, ifname: &str) -> u32 {
        self.run(|| vmpls_sys::if_nametoindex(ifname))
            .unwrap_or_else(|| panic!("no {ifname} in {}", self.name))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
    }
}

/// One end of a veth link: its namespace, name, MAC address.
#[derive(Debug, Clone, Copy)]
pub struct End<'a> {
    /// The namespace it is in.
    pub ns: &'a Netns,
    /// The interface name.
    pub ifname: &'a str,
    /// Its MAC address; `None`: the kernel's random one.
    pub mac: Option<[u8; 6]>,
}

/// A veth pair from `a` to `b` with `mtu`, both ends up.
pub fn veth(a: End<'_>, b: End<'_>, mtu: u32) {
    let mtu = mtu.to_string();
    ip(&[
        "link",
        "add",
        a.ifname,
        "netns",
        a.ns.name(),
        "mtu",
        &mtu,
        "type",
        "veth",
        "peer",
        "name",
        b.ifname,
        "netns",
        b.ns.name(),
        "mtu",
        &mtu,
    ]);
    for end in [a, b] {
        if let Some(mac) = end.mac {
            end.ns.ip(&["link", "set", end.ifname, "address", &mac_str(mac)]);
        }
        end.ns.ip(&["link", "set", end.ifname, "up"]);
    }
}

/// A plain packet socket (no virtio-net header) bound to one interface for every
/// protocol: the wire as any other program sees it. It does not see its own frames.
#[derive(Debug)]
pub struct PacketSocket(OwnedFd);

impl PacketSocket {
    /// Opens it on `ifname` in the calling thread's namespace (inside [`Netns::run`]).
    pub fn open(ifname: &str) -> PacketSocket {
        PacketSocket::open_index(vmpls_sys::if_nametoindex(ifname).unwrap_or_else(|| panic!("no {ifname}")))
    }

    /// Opens it on interface `ifindex` of the calling thread's namespace.
    pub fn open_index(ifindex: u32) -> PacketSocket {
        use vmpls_sys::packet;
        let fd = packet::socket(false).expect("open a packet socket");
        packet::set_option(&fd, packet::PACKET_IGNORE_OUTGOING, 1).expect("PACKET_IGNORE_OUTGOING");
        vmpls_sys::sockopt::force_recv_buffer(&fd, 8 << 20);
        packet::bind(&fd, ifindex, packet::ETH_P_ALL).expect("bind the packet socket");
        PacketSocket(fd)
    }

    /// Sends one frame as it is.
    pub fn send(&self, frame: &[u8]) {
        let n = vmpls_sys::packet::send(&self.0, frame).expect("send");
        assert_eq!(n, frame.len(), "a short send");
    }

    /// The next frame (not our own), or `None` once `deadline` passes.
    pub fn recv(&self, deadline: Instant) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; 70000];
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            if !wait_readable(self, left.min(Duration::from_millis(100))) {
                continue;
            }
            match vmpls_sys::packet::recv_from(&self.0, &mut buf) {
                Ok((_, vmpls_sys::packet::PACKET_OUTGOING)) | Err(_) => continue,
                Ok((n, _)) => {
                    buf.truncate(n);
                    return Some(buf);
                }
            }
        }
    }

    /// The frames received (not our own) until `quiet` passes without one (10 s at most).
    pub fn drain(&self, quiet: Duration) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            match self.recv(Instant::now() + quiet) {
                Some(f) => out.push(f),
                None => break,
            }
        }
        out
    }
}

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}
