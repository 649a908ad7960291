//! Hand-made Ethernet frames, written onto a lab interface with an AF_PACKET socket:
//! malformed label stacks, bad IP headers, anything a test wants a router to see.
//!
//! The builders here make well-formed pieces ([`mpls_entry`], [`ipv4_udp`],
//! [`ethernet`], [`ipv6_packet`], [`icmpv4`], [`arp`], [`neighbor_solicit`], ...); a
//! test breaks them on purpose afterwards (cuts the frame, flips a checksum byte, clears
//! the bottom-of-stack bit). [`flood`] writes frames as fast as the socket takes them
//! for a while, and a [`Sniffer`] collects what arrives on an interface, so a test can
//! check the exact reply or the exact forwarded frame.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use vmpls_wire::mpls;

use crate::netns;

/// Ethertype of MPLS unicast.
pub const ETHERTYPE_MPLS: u16 = 0x8847;
/// Ethertype of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// Ethertype of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// Ethertype of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// Ethertype (TPID) of an 802.1Q VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;

/// IPv4 flags-and-offset word: don't fragment.
pub const IPV4_DF: u16 = 0x4000;
/// IPv4 flags-and-offset word: more fragments.
pub const IPV4_MF: u16 = 0x2000;

/// An Ethernet frame: `dst`, `src`, `ethertype`, then `payload` (no padding, no FCS:
/// veth carries frames of any length).
pub fn ethernet(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + payload.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// One MPLS label stack entry (RFC 3032): 20-bit label, 3-bit traffic class,
/// bottom-of-stack bit, TTL.
pub fn mpls_entry(label: u32, tc: u8, bottom: bool, ttl: u8) -> [u8; 4] {
    mpls::Repr { label, tc, bottom, ttl }.to_u32().to_be_bytes()
}

/// An IPv4 packet (20-byte header, no options, DF clear, valid header checksum)
/// carrying a UDP datagram with `payload` (UDP checksum 0: none).
pub fn ipv4_udp(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    ttl: u8,
    src_port: u16,
    dst_port: u16,
    payload: &[u8],
) -> Vec<u8> {
    let udp_len = 8 + payload.len();
    let total = u16::try_from(20 + udp_len).unwrap_or(u16::MAX);
    let mut p = vec![0u8; 20];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&total.to_be_bytes());
    p[4..6].copy_from_slice(&0x5a5au16.to_be_bytes());
    p[8] = ttl;
    p[9] = 17;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let c = vmpls_wire::checksum::checksum(&p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(&src_port.to_be_bytes());
    p.extend_from_slice(&dst_port.to_be_bytes());
    p.extend_from_slice(&u16::try_from(udp_len).unwrap_or(u16::MAX).to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(payload);
    p
}

/// An IPv4 packet: a 20-byte header with a valid checksum, then `payload`. `frag` is the
/// flags-and-fragment-offset word ([`IPV4_DF`], [`IPV4_MF`], offset in 8-byte units).
pub fn ipv4_packet(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    ttl: u8,
    protocol: u8,
    ident: u16,
    frag: u16,
    payload: &[u8],
) -> Vec<u8> {
    let total = u16::try_from(20 + payload.len()).unwrap_or(u16::MAX);
    let mut p = vec![0u8; 20];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&total.to_be_bytes());
    p[4..6].copy_from_slice(&ident.to_be_bytes());
    p[6..8].copy_from_slice(&frag.to_be_bytes());
    p[8] = ttl;
    p[9] = protocol;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    let c = vmpls_wire::checksum::checksum(&p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// Sets the TTL of the IPv4 packet `p` and rewrites its header checksum.
pub fn set_ipv4_ttl(p: &mut [u8], ttl: u8) {
    let ihl = usize::from(p[0] & 0x0f) * 4;
    p[8] = ttl;
    p[10..12].fill(0);
    let c = vmpls_wire::checksum::checksum(&p[..ihl]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
}

/// An ICMP message: `msg_type`, `code`, the four bytes after the checksum (`rest`: an
/// echo's identifier and sequence number, unused in most errors), then `data`; with its
/// checksum.
pub fn icmpv4(msg_type: u8, code: u8, rest: [u8; 4], data: &[u8]) -> Vec<u8> {
    let mut m = vec![msg_type, code, 0, 0];
    m.extend_from_slice(&rest);
    m.extend_from_slice(data);
    let c = vmpls_wire::checksum::checksum(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    m
}

/// An IPv6 packet: the fixed header (traffic class and flow label 0) with `next_header`,
/// then `payload`.
pub fn ipv6_packet(src: Ipv6Addr, dst: Ipv6Addr, hop_limit: u8, next_header: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 40];
    p[0] = 0x60;
    let len = u16::try_from(payload.len()).unwrap_or(u16::MAX);
    p[4..6].copy_from_slice(&len.to_be_bytes());
    p[6] = next_header;
    p[7] = hop_limit;
    p[8..24].copy_from_slice(&src.octets());
    p[24..40].copy_from_slice(&dst.octets());
    p.extend_from_slice(payload);
    p
}

/// IPv6 next-header values of the extension headers.
pub mod ext {
    /// Hop-by-hop options.
    pub const HOP_BY_HOP: u8 = 0;
    /// Routing header.
    pub const ROUTING: u8 = 43;
    /// Fragment header.
    pub const FRAGMENT: u8 = 44;
    /// Destination options.
    pub const DEST_OPTS: u8 = 60;
    /// No next header.
    pub const NONE: u8 = 59;
}

/// An IPv6 hop-by-hop or destination options header of `len` bytes (a multiple of 8,
/// at least 8) naming `next`, its options one PadN; or, with `routing`, a routing header
/// of type 253 (experimental) with no segments left, padded the same way.
pub fn ipv6_options_header(next: u8, len: usize, routing: bool) -> Vec<u8> {
    let len = len.max(8).div_ceil(8) * 8;
    let mut h = vec![0u8; len];
    h[0] = next;
    h[1] = u8::try_from(len / 8 - 1).unwrap_or(u8::MAX);
    if routing {
        h[2] = 253; // routing type
        h[3] = 0; // segments left
    } else {
        h[2] = 1; // PadN
        h[3] = u8::try_from(len - 4).unwrap_or(u8::MAX);
    }
    h
}

/// An IPv6 fragment header naming `next`: fragment offset `offset` (8-byte units),
/// more-fragments flag `more`, identification `ident`.
pub fn ipv6_fragment_header(next: u8, offset: u16, more: bool, ident: u32) -> [u8; 8] {
    let mut h = [0u8; 8];
    h[0] = next;
    h[2..4].copy_from_slice(&((offset << 3) | u16::from(more)).to_be_bytes());
    h[4..8].copy_from_slice(&ident.to_be_bytes());
    h
}

/// The checksum over an upper-layer message with the pseudo header of `src` and `dst`.
fn transport_checksum(src: IpAddr, dst: IpAddr, protocol: u8, message: &[u8]) -> u16 {
    use vmpls_wire::checksum as c;
    let len = u32::try_from(message.len()).unwrap_or(u32::MAX);
    let pseudo = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => c::pseudo_header_v4(s, d, protocol, len),
        (IpAddr::V6(s), IpAddr::V6(d)) => c::pseudo_header_v6(s, d, protocol, len),
        _ => 0,
    };
    c::finish(c::add(pseudo, c::sum(message)))
}

/// A UDP datagram (header and `payload`) with its checksum for `src` -> `dst` (0 is
/// sent as 0xffff, as RFC 768 asks).
pub fn udp(src: IpAddr, dst: IpAddr, src_port: u16, dst_port: u16, payload: &[u8]) -> Vec<u8> {
    let len = u16::try_from(8 + payload.len()).unwrap_or(u16::MAX);
    let mut d = Vec::with_capacity(8 + payload.len());
    d.extend_from_slice(&src_port.to_be_bytes());
    d.extend_from_slice(&dst_port.to_be_bytes());
    d.extend_from_slice(&len.to_be_bytes());
    d.extend_from_slice(&[0, 0]);
    d.extend_from_slice(payload);
    let c = match transport_checksum(src, dst, 17, &d) {
        0 => 0xffff,
        c => c,
    };
    d[6..8].copy_from_slice(&c.to_be_bytes());
    d
}

/// An ICMPv6 message `msg_type`/`code` with `body` (everything after the checksum), its
/// checksum computed for `src` -> `dst`.
pub fn icmpv6(src: Ipv6Addr, dst: Ipv6Addr, msg_type: u8, code: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![msg_type, code, 0, 0];
    m.extend_from_slice(body);
    let c = transport_checksum(IpAddr::V6(src), IpAddr::V6(dst), 58, &m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    m
}

/// A neighbour solicitation for `target` from `src` (with a source link-layer address
/// option carrying `source_mac`) to `dst`, as a whole IPv6 packet (hop limit 255).
pub fn neighbor_solicit(src: Ipv6Addr, dst: Ipv6Addr, target: Ipv6Addr, source_mac: [u8; 6]) -> Vec<u8> {
    let mut body = vec![0u8; 4];
    body.extend_from_slice(&target.octets());
    body.extend_from_slice(&[1, 1]);
    body.extend_from_slice(&source_mac);
    ipv6_packet(src, dst, 255, 58, &icmpv6(src, dst, 135, 0, &body))
}

/// A neighbour advertisement for `target` with a target link-layer address option
/// carrying `target_mac`, flags router / solicited / override, from `src` to `dst`, as
/// a whole IPv6 packet (hop limit 255).
pub fn neighbor_advert(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    target: Ipv6Addr,
    target_mac: [u8; 6],
    solicited: bool,
    override_: bool,
) -> Vec<u8> {
    let flags = 0x80 | u8::from(solicited) << 6 | u8::from(override_) << 5;
    let mut body = vec![flags, 0, 0, 0];
    body.extend_from_slice(&target.octets());
    body.extend_from_slice(&[2, 1]);
    body.extend_from_slice(&target_mac);
    ipv6_packet(src, dst, 255, 58, &icmpv6(src, dst, 136, 0, &body))
}

/// ARP operation: request.
pub const ARP_REQUEST: u16 = 1;
/// ARP operation: reply.
pub const ARP_REPLY: u16 = 2;

/// An ARP packet for IPv4 over Ethernet (28 bytes): operation, sender and target
/// hardware and protocol addresses.
pub fn arp(
    op: u16,
    sender_mac: [u8; 6],
    sender_ip: Ipv4Addr,
    target_mac: [u8; 6],
    target_ip: Ipv4Addr,
) -> Vec<u8> {
    let mut a = vec![0, 1, 0x08, 0x00, 6, 4];
    a.extend_from_slice(&op.to_be_bytes());
    a.extend_from_slice(&sender_mac);
    a.extend_from_slice(&sender_ip.octets());
    a.extend_from_slice(&target_mac);
    a.extend_from_slice(&target_ip.octets());
    a
}

/// A packet socket that only sends (protocol 0: it receives nothing).
fn raw_socket() -> anyhow::Result<OwnedFd> {
    vmpls_sys::packet::socket(false).context("opening an AF_PACKET socket (needs root)")
}

/// The index of `ifname` in the calling thread's namespace.
fn ifindex(ifname: &str) -> anyhow::Result<u32> {
    if vmpls_sys::IfName::new(ifname).is_none() {
        bail!("bad interface name {ifname:?}");
    }
    vmpls_sys::if_nametoindex(ifname).with_context(|| format!("no interface {ifname}"))
}

fn mac_here(ifname: &str) -> anyhow::Result<[u8; 6]> {
    let name = vmpls_sys::IfName::new(ifname).with_context(|| format!("bad interface name {ifname:?}"))?;
    vmpls_sys::iface::mac(&name).with_context(|| format!("no interface {ifname}"))
}

/// The MAC address of interface `ifname` in the namespace `ns`.
pub fn interface_mac(ns: &str, ifname: &str) -> anyhow::Result<[u8; 6]> {
    netns::in_netns(ns, || mac_here(ifname))?
}

/// An AF_PACKET socket that sends onto one interface.
struct Sender {
    fd: OwnedFd,
    ifindex: u32,
}

impl Sender {
    /// Opens it in the current network namespace.
    fn open(ifname: &str) -> anyhow::Result<Sender> {
        let fd = raw_socket()?;
        Ok(Sender { fd, ifindex: ifindex(ifname)? })
    }

    /// Sends one frame as it is, whatever its length: the kernel decides.
    fn send(&self, frame: &[u8]) -> io::Result<()> {
        vmpls_sys::packet::send_to(&self.fd, self.ifindex, frame).map(|_| ())
    }
}

fn send_here(ifname: &str, frames: &[Vec<u8>]) -> anyhow::Result<usize> {
    let sender = Sender::open(ifname)?;
    for (n, frame) in frames.iter().enumerate() {
        if frame.len() < 14 {
            bail!("frame {n} is {} bytes, shorter than an Ethernet header", frame.len());
        }
        sender
            .send(frame)
            .with_context(|| format!("sending frame {n} ({} bytes) on {ifname}", frame.len()))?;
    }
    Ok(frames.len())
}

/// Writes `frames` (whole Ethernet frames, at least 14 bytes each) onto interface
/// `ifname` in namespace `ns`, as they are; the peer of a veth receives them.
/// Returns how many were sent.
pub fn send_frames(ns: &str, ifname: &str, frames: &[Vec<u8>]) -> anyhow::Result<usize> {
    netns::in_netns(ns, || send_here(ifname, frames))?
}

/// Tries to write one frame of any length (shorter than an Ethernet header too) onto
/// `ifname` in `ns`. The outer error is about the socket or the interface; the inner
/// one is the kernel's answer to this frame (`EINVAL` for a frame it will not send).
pub fn try_send_frame(ns: &str, ifname: &str, frame: &[u8]) -> anyhow::Result<io::Result<()>> {
    netns::in_netns(ns, || Sender::open(ifname).map(|s| s.send(frame)))?
}

/// An open AF_PACKET socket writing onto one interface of a namespace: for a test that
/// sends many frames over time without opening a socket (and entering the namespace)
/// for each.
pub struct Injector {
    sender: Sender,
    ifname: String,
}

impl Injector {
    /// Opens a socket on `ifname` in namespace `ns`.
    pub fn open(ns: &str, ifname: &str) -> anyhow::Result<Injector> {
        let sender = netns::in_netns(ns, || Sender::open(ifname))??;
        Ok(Injector { sender, ifname: ifname.to_string() })
    }

    /// Writes one frame as it is (any length: the kernel decides, and its refusal is
    /// the error).
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        self.sender.send(frame)
    }

    /// Writes `frames` in order; fails on the first the kernel refuses.
    pub fn send_all(&self, frames: &[Vec<u8>]) -> anyhow::Result<()> {
        for (n, f) in frames.iter().enumerate() {
            self.send(f)
                .with_context(|| format!("sending frame {n} ({} bytes) on {}", f.len(), self.ifname))?;
        }
        Ok(())
    }
}

/// What [`flood`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FloodStats {
    /// Frames the kernel took.
    pub sent: u64,
    /// Frames it refused for want of buffers (`ENOBUFS`, `EAGAIN`): not sent.
    pub refused: u64,
    /// How long the flood ran.
    pub elapsed: Duration,
}

/// Writes `frames` onto `ifname` in `ns` over and over, in order, as fast as the socket
/// takes them, until `duration` has passed or `max_frames` were sent. Frames the
/// kernel refuses for want of buffers are counted and skipped; any other error ends
/// the flood with that error.
pub fn flood(
    ns: &str,
    ifname: &str,
    frames: &[Vec<u8>],
    duration: Duration,
    max_frames: u64,
) -> anyhow::Result<FloodStats> {
    if frames.is_empty() {
        bail!("nothing to flood with");
    }
    netns::in_netns(ns, || -> anyhow::Result<FloodStats> {
        let sender = Sender::open(ifname)?;
        let start = Instant::now();
        let mut stats = FloodStats::default();
        'outer: loop {
            for f in frames {
                match sender.send(f) {
                    Ok(()) => stats.sent += 1,
                    Err(e) if matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::EAGAIN)) => {
                        stats.refused += 1;
                    }
                    Err(e) => {
                        return Err(e).with_context(|| format!("flooding {ifname} ({} bytes)", f.len()));
                    }
                }
                let n = stats.sent + stats.refused;
                if stats.sent >= max_frames || (n % 64 == 0 && start.elapsed() >= duration) {
                    break 'outer;
                }
            }
            crate::check_interrupt()?;
        }
        stats.elapsed = start.elapsed();
        Ok(stats)
    })?
}

/// Which frames a [`Sniffer`] leaves to the kernel to drop, so a bulk flow crossing the
/// same link does not crowd out the frames a test looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SniffFilter {
    /// Keep every frame.
    All,
    /// Skip untagged IPv4 TCP that is not a fragment (a TCP flow's segments and ACKs).
    SkipIpv4Tcp,
}

impl SniffFilter {
    /// The classic BPF program, or `None` for no filter.
    fn program(self) -> Option<Vec<libc::sock_filter>> {
        let op = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter { code: code as u16, jt, jf, k };
        use libc::{BPF_ABS, BPF_B, BPF_H, BPF_JEQ, BPF_JMP, BPF_JSET, BPF_K, BPF_LD, BPF_RET};
        match self {
            SniffFilter::All => None,
            SniffFilter::SkipIpv4Tcp => Some(vec![
                op(BPF_LD | BPF_H | BPF_ABS, 0, 0, 12),       // 0: ethertype
                op(BPF_JMP | BPF_JEQ | BPF_K, 0, 4, 0x0800),  // 1: IPv4? else keep
                op(BPF_LD | BPF_B | BPF_ABS, 0, 0, 23),       // 2: protocol
                op(BPF_JMP | BPF_JEQ | BPF_K, 0, 2, 6),       // 3: TCP? else keep
                op(BPF_LD | BPF_H | BPF_ABS, 0, 0, 20),       // 4: flags, offset
                op(BPF_JMP | BPF_JSET | BPF_K, 0, 1, 0x3fff), // 5: fragment? keep : skip
                op(BPF_RET | BPF_K, 0, 0, 0x0004_0000),       // 6: keep (whole frame)
                op(BPF_RET | BPF_K, 0, 0, 0),                 // 7: skip
            ]),
        }
    }
}

/// One frame a [`Sniffer`] saw arrive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sniffed {
    /// The frame, from the Ethernet header on.
    pub frame: Vec<u8>,
    /// When it was read.
    pub at: Instant,
}

/// Collects the frames that arrive on an interface (not the ones sent from it) on a
/// background thread, from [`Sniffer::start`] until [`Sniffer::stop`].
#[derive(Debug)]
pub struct Sniffer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<io::Result<Vec<Sniffed>>>>,
}

fn sniff_socket(ifname: &str, filter: SniffFilter) -> anyhow::Result<OwnedFd> {
    use vmpls_sys::{packet, sockopt};
    let fd = raw_socket()?;
    let index = ifindex(ifname)?;
    // The filter goes on before the socket is bound: no unfiltered frame gets in.
    if let Some(prog) = filter.program() {
        packet::attach_filter(&fd, &prog).context("attaching the filter")?;
    }
    sockopt::set_int(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 16 << 20).context("SO_RCVBUFFORCE")?;
    let tv = libc::timeval { tv_sec: 0, tv_usec: 20_000 };
    sockopt::set(&fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv).context("SO_RCVTIMEO")?;
    packet::bind(&fd, index, packet::ETH_P_ALL).with_context(|| format!("binding to {ifname}"))?;
    Ok(fd)
}

fn sniff_loop(fd: &OwnedFd, stop: &AtomicBool) -> io::Result<Vec<Sniffed>> {
    let mut frames = Vec::new();
    let mut buf = vec![0u8; 1 << 17];
    // One more read after the stop flag, so frames queued until then are kept.
    let mut last = false;
    loop {
        let (n, pkttype) = match vmpls_sys::packet::recv_from(fd, &mut buf) {
            Ok(r) => r,
            Err(e) => match e.raw_os_error() {
                Some(libc::EAGAIN | libc::EINTR) => {
                    if last {
                        return Ok(frames);
                    }
                    last = stop.load(Ordering::SeqCst);
                    continue;
                }
                _ => return Err(e),
            },
        };
        if pkttype != vmpls_sys::packet::PACKET_OUTGOING {
            frames.push(Sniffed { frame: buf[..n].to_vec(), at: Instant::now() });
        }
    }
}

impl Sniffer {
    /// Starts collecting the frames that arrive on `ifname` in namespace `ns`, less
    /// those `filter` skips. Frames that arrive after this returns are collected.
    pub fn start(ns: &str, ifname: &str, filter: SniffFilter) -> anyhow::Result<Sniffer> {
        let fd = netns::in_netns(ns, || sniff_socket(ifname, filter))??;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(format!("sniff-{ifname}"))
            .spawn(move || sniff_loop(&fd, &flag))
            .context("spawning the sniffer thread")?;
        Ok(Sniffer { stop, thread: Some(thread) })
    }

    /// Stops and returns the frames collected, in arrival order.
    pub fn stop(mut self) -> anyhow::Result<Vec<Sniffed>> {
        self.finish()
    }

    fn finish(&mut self) -> anyhow::Result<Vec<Sniffed>> {
        self.stop.store(true, Ordering::SeqCst);
        match self.thread.take() {
            Some(t) => match t.join() {
                Ok(r) => r.context("reading frames"),
                Err(_) => bail!("the sniffer thread panicked"),
            },
            None => Ok(Vec::new()),
        }
    }
}

impl Drop for Sniffer {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_label_entries() {
        assert_eq!(mpls_entry(1002, 0, true, 63), [0x00, 0x3e, 0xa1, 0x3f]);
        assert_eq!(mpls_entry(13, 7, false, 0), [0x00, 0x00, 0xde, 0x00]);
        assert_eq!(mpls_entry(0xfffff, 0, false, 255), [0xff, 0xff, 0xf0, 0xff]);
    }

    #[test]
    fn builds_valid_ipv4_udp() {
        let p = ipv4_udp(Ipv4Addr::new(198, 18, 1, 2), Ipv4Addr::new(198, 18, 2, 2), 64, 1000, 2000, b"abcd");
        assert_eq!(p.len(), 32);
        assert!(vmpls_wire::checksum::verify(&p[..20]));
        assert_eq!(u16::from_be_bytes([p[2], p[3]]), 32);
        assert_eq!(u16::from_be_bytes([p[24], p[25]]), 12);
        let f = ethernet([1; 6], [2; 6], ETHERTYPE_MPLS, &p);
        assert_eq!(&f[12..14], &[0x88, 0x47]);
        assert_eq!(f.len(), 46);
    }

    #[test]
    fn builds_ipv4_icmp_and_fragments() {
        let (a, b) = (Ipv4Addr::new(198, 18, 1, 2), Ipv4Addr::new(198, 18, 2, 2));
        let icmp = icmpv4(8, 0, [0, 7, 0, 1], b"ping");
        assert!(vmpls_wire::icmpv4::Packet::new_checked(&icmp[..]).unwrap().verify_checksum());
        let mut p = ipv4_packet(a, b, 1, 1, 0x1234, IPV4_MF | 3, &icmp);
        let ip = vmpls_wire::ipv4::Packet::new_checked(&p[..]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!((ip.ttl(), ip.protocol(), ip.more_frags(), ip.frag_offset()), (1, 1, true, 24));
        set_ipv4_ttl(&mut p, 9);
        let ip = vmpls_wire::ipv4::Packet::new_checked(&p[..]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(ip.ttl(), 9);
    }

    #[test]
    fn builds_ipv6_extension_headers_udp_and_neighbor_discovery() {
        let (a, b): (Ipv6Addr, Ipv6Addr) =
            ("2001:db8:1::2".parse().unwrap(), "2001:db8:1::1".parse().unwrap());
        let h = ipv6_options_header(ext::DEST_OPTS, 20, false);
        assert_eq!((h.len(), h[0], h[1], h[2], usize::from(h[3])), (24, 60, 2, 1, 20));
        let r = ipv6_options_header(17, 8, true);
        assert_eq!(&r[..4], &[17, 0, 253, 0]);
        assert_eq!(ipv6_fragment_header(17, 185, true, 7), [17, 0, 0x05, 0xc9, 0, 0, 0, 7]);
        let d = udp(IpAddr::V6(a), IpAddr::V6(b), 1000, 9, b"data");
        assert!(vmpls_wire::udp::Packet::new_checked(&d[..]).unwrap().verify_checksum_v6(a, b));
        let ns = neighbor_solicit(a, b, b, [2, 0, 0, 0, 0, 9]);
        let ip = vmpls_wire::ipv6::Packet::new_checked(&ns[..]).unwrap();
        assert_eq!((ip.hop_limit(), ip.next_header()), (255, 58));
        let icmp = vmpls_wire::icmpv6::Packet::new_checked(ip.payload()).unwrap();
        assert!(icmp.verify_checksum(a, b));
        assert_eq!(
            vmpls_wire::icmpv6::NdRepr::parse(&icmp).unwrap(),
            vmpls_wire::icmpv6::NdRepr::NeighborSolicit { target: b, source_mac: Some([2, 0, 0, 0, 0, 9]) }
        );
        let na = neighbor_advert(b, a, b, [2, 0, 0, 0, 0, 8], false, true);
        let ip = vmpls_wire::ipv6::Packet::new_checked(&na[..]).unwrap();
        let icmp = vmpls_wire::icmpv6::Packet::new_checked(ip.payload()).unwrap();
        assert!(icmp.verify_checksum(b, a));
        assert_eq!(
            vmpls_wire::icmpv6::NdRepr::parse(&icmp).unwrap(),
            vmpls_wire::icmpv6::NdRepr::NeighborAdvert {
                router: true,
                solicited: false,
                override_: true,
                target: b,
                target_mac: Some([2, 0, 0, 0, 0, 8]),
            }
        );
    }

    #[test]
    fn builds_arp() {
        let a = arp(ARP_REPLY, [2; 6], Ipv4Addr::new(198, 18, 1, 2), [3; 6], Ipv4Addr::new(198, 18, 1, 1));
        let repr =
            vmpls_wire::arp::Repr::parse(&vmpls_wire::arp::Packet::new_checked(&a[..]).unwrap()).unwrap();
        assert_eq!(repr.operation, vmpls_wire::arp::Operation::Reply);
        assert_eq!((repr.sender_hardware_addr, repr.target_hardware_addr), ([2; 6], [3; 6]));
        assert_eq!(repr.target_protocol_addr, Ipv4Addr::new(198, 18, 1, 1));
    }

    #[test]
    fn sniff_filter_jumps_stay_inside_the_program() {
        let prog = SniffFilter::SkipIpv4Tcp.program().unwrap();
        for (i, op) in prog.iter().enumerate() {
            assert!(i + 1 + usize::from(op.jt) < prog.len() || op.code & 0x07 == libc::BPF_RET as u16);
            assert!(i + 1 + usize::from(op.jf) < prog.len() || op.code & 0x07 == libc::BPF_RET as u16);
        }
        assert!(SniffFilter::All.program().is_none());
    }
}
