//! ICMP and ICMPv6 echo ("ping") from inside a namespace, with raw sockets.
//!
//! Native, so a lab needs no iputils. Besides echo replies it reports the ICMP errors
//! that come back for its own requests (fragmentation needed and packet too big with
//! their MTU, time exceeded, unreachable), which is what router tests check.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::{check_interrupt, netns};

/// How to ping.
#[derive(Debug, Clone)]
pub struct PingOptions {
    /// Echo requests to send.
    pub count: u32,
    /// Time between requests.
    pub interval: Duration,
    /// How long to wait for outstanding replies after the last request.
    pub timeout: Duration,
    /// Payload bytes after the 8-byte ICMP header.
    pub size: usize,
    /// Set don't-fragment (IPv4 DF; no local fragmentation for IPv6).
    pub dont_fragment: bool,
    /// TTL / hop limit; `None`: the system default.
    pub ttl: Option<u8>,
    /// Stop as soon as this many replies arrived (e.g. 1 to probe reachability);
    /// `None`: wait for all.
    pub stop_after: Option<u32>,
}

impl Default for PingOptions {
    fn default() -> Self {
        Self {
            count: 3,
            interval: Duration::from_millis(100),
            timeout: Duration::from_secs(1),
            size: 56,
            dont_fragment: false,
            ttl: None,
            stop_after: None,
        }
    }
}

/// An ICMP error that came back for one of our requests, or a local send error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IcmpError {
    /// IPv4 destination unreachable, fragmentation needed (type 3 code 4).
    FragmentationNeeded {
        /// Who sent it.
        from: IpAddr,
        /// The next-hop MTU it announced.
        mtu: u32,
    },
    /// ICMPv6 packet too big (type 2).
    PacketTooBig {
        /// Who sent it.
        from: IpAddr,
        /// The MTU it announced.
        mtu: u32,
    },
    /// Time exceeded (TTL or hop limit reached zero).
    TimeExceeded {
        /// Who sent it.
        from: IpAddr,
    },
    /// Destination unreachable with another code.
    Unreachable {
        /// Who sent it.
        from: IpAddr,
        /// The ICMP code.
        code: u8,
    },
    /// Another ICMP error type (parameter problem, ...).
    Other {
        /// Who sent it.
        from: IpAddr,
        /// The ICMP type.
        icmp_type: u8,
        /// The ICMP code.
        code: u8,
    },
    /// The local stack refused to send: the packet is larger than the path MTU it
    /// knows (EMSGSIZE), typically after an earlier fragmentation-needed.
    LocalMessageTooLong,
}

/// One echo reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PingReply {
    /// The sequence number.
    pub seq: u16,
    /// Who answered.
    pub from: IpAddr,
    /// Round-trip time.
    pub rtt: Duration,
}

/// What a ping run saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PingResult {
    /// Requests sent (or refused locally).
    pub sent: u32,
    /// Replies received (duplicates not counted).
    pub received: u32,
    /// The replies, in arrival order.
    pub replies: Vec<PingReply>,
    /// ICMP errors for our requests, in arrival order.
    pub errors: Vec<IcmpError>,
}

impl PingResult {
    /// The MTU from the first fragmentation-needed or packet-too-big error, if any.
    pub fn reported_mtu(&self) -> Option<u32> {
        self.errors.iter().find_map(|e| match e {
            IcmpError::FragmentationNeeded { mtu, .. } | IcmpError::PacketTooBig { mtu, .. } => Some(*mtu),
            _ => None,
        })
    }
}

static NEXT_ID: AtomicU16 = AtomicU16::new(0);

/// Pings `dst` from inside the network namespace `ns`.
pub fn ping(ns: &str, dst: IpAddr, opts: &PingOptions) -> anyhow::Result<PingResult> {
    netns::in_netns(ns, || ping_here(dst, opts))?
}

/// Waits (up to `timeout`) until `dst` answers one echo request from namespace `ns`
/// (ARP or neighbour discovery first), calling `alive` between attempts (to fail early
/// when a router died), then checks that 3 of 3 requests are answered.
pub fn ping_until_answered(
    ns: &str,
    dst: IpAddr,
    timeout: Duration,
    alive: &mut dyn FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let start = Instant::now();
    let once = PingOptions {
        count: 1,
        timeout: Duration::from_millis(300),
        stop_after: Some(1),
        ..PingOptions::default()
    };
    loop {
        check_interrupt()?;
        alive()?;
        if ping(ns, dst, &once)?.received > 0 {
            break;
        }
        if start.elapsed() >= timeout {
            anyhow::bail!("no answer from {dst} after {timeout:?}");
        }
    }
    let r = ping(ns, dst, &PingOptions::default())?;
    if r.received != r.sent {
        anyhow::bail!("{} of {} replies from {dst} (ICMP errors: {:?})", r.received, r.sent, r.errors);
    }
    Ok(())
}

/// Pings `dst` from the calling thread's network namespace.
pub fn ping_here(dst: IpAddr, opts: &PingOptions) -> anyhow::Result<PingResult> {
    let id =
        (std::process::id() as u16).wrapping_mul(31).wrapping_add(NEXT_ID.fetch_add(1, Ordering::Relaxed));
    let socket = open_socket(dst, opts).context("opening a raw ICMP socket (needs root)")?;
    let fd = socket.as_fd();
    let mut result = PingResult::default();
    let mut sent_at: HashMap<u16, Instant> = HashMap::new();
    let mut answered: Vec<u16> = Vec::new();
    let start = Instant::now();
    let mut next_send = start;
    let mut seq: u16 = 0;
    let mut last_send = start;
    let mut buf = vec![0u8; 65536 + 512];
    loop {
        check_interrupt()?;
        let now = Instant::now();
        let done_sending = result.sent >= opts.count;
        if !done_sending && now >= next_send {
            seq = seq.wrapping_add(1);
            let packet = echo_request(dst, id, seq, opts.size);
            match vmpls_sys::ip::send_to(fd, &packet, dst) {
                Ok(_) => {
                    sent_at.insert(seq, Instant::now());
                }
                Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {
                    result.errors.push(IcmpError::LocalMessageTooLong);
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("sending an echo request to {dst}"));
                }
            }
            result.sent += 1;
            last_send = Instant::now();
            next_send = last_send + opts.interval;
            continue;
        }
        if opts.stop_after.is_some_and(|n| result.received >= n) {
            break;
        }
        if done_sending && (answered.len() == sent_at.len() || now >= last_send + opts.timeout) {
            break;
        }
        let wake = if done_sending { last_send + opts.timeout } else { next_send };
        let wait = wake.saturating_duration_since(now).min(Duration::from_millis(100));
        if !vmpls_sys::wait_readable(fd, wait) {
            continue;
        }
        let (n, from) = match vmpls_sys::ip::recv_from(fd, &mut buf) {
            Ok(x) => x,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {
                continue;
            }
            Err(e) => return Err(e).context("receiving ICMP"),
        };
        match classify(&buf[..n], dst, id) {
            Some(Incoming::Reply(s)) if !answered.contains(&s) => {
                if let Some(t) = sent_at.get(&s) {
                    answered.push(s);
                    result.received += 1;
                    result.replies.push(PingReply { seq: s, from, rtt: t.elapsed() });
                }
            }
            Some(Incoming::Reply(_)) => {}
            Some(Incoming::Error(kind)) => result.errors.push(kind.with_from(from)),
            None => {}
        }
    }
    Ok(result)
}

fn open_socket(dst: IpAddr, opts: &PingOptions) -> io::Result<OwnedFd> {
    let fd = vmpls_sys::ip::icmp_socket(dst.is_ipv6())?;
    let set = |level, name, value| vmpls_sys::sockopt::set_int(&fd, level, name, value);
    match dst {
        IpAddr::V4(_) => {
            let pmtu = if opts.dont_fragment { libc::IP_PMTUDISC_DO } else { libc::IP_PMTUDISC_DONT };
            set(libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, pmtu)?;
            if let Some(ttl) = opts.ttl {
                set(libc::IPPROTO_IP, libc::IP_TTL, i32::from(ttl))?;
            }
        }
        IpAddr::V6(_) => {
            let pmtu = if opts.dont_fragment { libc::IPV6_PMTUDISC_DO } else { libc::IPV6_PMTUDISC_DONT };
            set(libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, pmtu)?;
            set(libc::IPPROTO_IPV6, libc::IPV6_DONTFRAG, i32::from(opts.dont_fragment))?;
            if let Some(ttl) = opts.ttl {
                set(libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS, i32::from(ttl))?;
            }
        }
    }
    Ok(fd)
}

/// An echo request: ICMP header, then `size` payload bytes. The kernel computes the
/// ICMPv6 checksum itself; the ICMPv4 one is ours.
fn echo_request(dst: IpAddr, id: u16, seq: u16, size: usize) -> Vec<u8> {
    let mut p = vec![0u8; 8 + size];
    p[0] = if dst.is_ipv4() { 8 } else { 128 };
    p[4..6].copy_from_slice(&id.to_be_bytes());
    p[6..8].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in p[8..].iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    if dst.is_ipv4() {
        let c = vmpls_wire::checksum::checksum(&p);
        p[2..4].copy_from_slice(&c.to_be_bytes());
    }
    p
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ErrorKind {
    FragNeeded(u32),
    TooBig(u32),
    TimeExceeded,
    Unreachable(u8),
    Other(u8, u8),
}

impl ErrorKind {
    fn with_from(self, from: IpAddr) -> IcmpError {
        match self {
            Self::FragNeeded(mtu) => IcmpError::FragmentationNeeded { from, mtu },
            Self::TooBig(mtu) => IcmpError::PacketTooBig { from, mtu },
            Self::TimeExceeded => IcmpError::TimeExceeded { from },
            Self::Unreachable(code) => IcmpError::Unreachable { from, code },
            Self::Other(icmp_type, code) => IcmpError::Other { from, icmp_type, code },
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Incoming {
    Reply(u16),
    Error(ErrorKind),
}

/// Decides whether a received packet is a reply or an error for our requests (echo
/// id `id` to `dst`). IPv4 raw sockets deliver the IP header; IPv6 ones do not.
fn classify(packet: &[u8], dst: IpAddr, id: u16) -> Option<Incoming> {
    let icmp = if dst.is_ipv4() {
        let ihl = usize::from(packet.first()? & 0x0f) * 4;
        if packet.first()? >> 4 != 4 || ihl < 20 {
            return None;
        }
        packet.get(ihl..)?
    } else {
        packet
    };
    let (icmp_type, code) = (*icmp.first()?, *icmp.get(1)?);
    let word = |at: usize| -> Option<u16> { Some(u16::from_be_bytes([*icmp.get(at)?, *icmp.get(at + 1)?])) };
    match (dst, icmp_type) {
        (IpAddr::V4(_), 0) | (IpAddr::V6(_), 129) => {
            if word(4)? == id {
                return Some(Incoming::Reply(word(6)?));
            }
            None
        }
        (IpAddr::V4(_), 3 | 11 | 12) => {
            // The offending datagram: IPv4 header + at least 8 bytes.
            let inner = icmp.get(8..)?;
            let ihl = usize::from(inner.first()? & 0x0f) * 4;
            if inner.first()? >> 4 != 4 || ihl < 20 || *inner.get(9)? != 1 {
                return None;
            }
            let inner_dst = Ipv4Addr::new(*inner.get(16)?, *inner.get(17)?, *inner.get(18)?, *inner.get(19)?);
            let echo = inner.get(ihl..ihl + 8)?;
            if IpAddr::V4(inner_dst) != dst || echo[0] != 8 || u16::from_be_bytes([echo[4], echo[5]]) != id {
                return None;
            }
            Some(Incoming::Error(match (icmp_type, code) {
                (3, 4) => ErrorKind::FragNeeded(u32::from(word(6)?)),
                (3, c) => ErrorKind::Unreachable(c),
                (11, _) => ErrorKind::TimeExceeded,
                (t, c) => ErrorKind::Other(t, c),
            }))
        }
        (IpAddr::V6(_), 1..=4) => {
            let inner = icmp.get(8..)?;
            if inner.first()? >> 4 != 6 || *inner.get(6)? != 58 {
                return None;
            }
            let inner_dst = Ipv6Addr::from(<[u8; 16]>::try_from(inner.get(24..40)?).ok()?);
            let echo = inner.get(40..48)?;
            if IpAddr::V6(inner_dst) != dst || echo[0] != 128 || u16::from_be_bytes([echo[4], echo[5]]) != id
            {
                return None;
            }
            let mtu = u32::from_be_bytes(icmp.get(4..8)?.try_into().ok()?);
            Some(Incoming::Error(match icmp_type {
                2 => ErrorKind::TooBig(mtu),
                3 => ErrorKind::TimeExceeded,
                1 => ErrorKind::Unreachable(code),
                t => ErrorKind::Other(t, code),
            }))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4_header(src: [u8; 4], dst: [u8; 4], proto: u8, payload: usize) -> Vec<u8> {
        let mut h = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, proto, 0, 0];
        let total = (20 + payload) as u16;
        h[2..4].copy_from_slice(&total.to_be_bytes());
        h.extend_from_slice(&src);
        h.extend_from_slice(&dst);
        h
    }

    #[test]
    fn classifies_v4_reply_and_frag_needed() {
        let dst: IpAddr = "198.18.2.2".parse().unwrap();
        let mut reply = v4_header([198, 18, 2, 2], [198, 18, 1, 2], 1, 16);
        let mut icmp = echo_request(dst, 0x1234, 7, 8);
        icmp[0] = 0;
        reply.extend_from_slice(&icmp);
        assert_eq!(classify(&reply, dst, 0x1234), Some(Incoming::Reply(7)));
        assert_eq!(classify(&reply, dst, 0x1235), None);

        // Frag needed from 198.18.1.1 with MTU 1400, quoting our request.
        let request = echo_request(dst, 0x1234, 7, 1472);
        let mut quoted = v4_header([198, 18, 1, 2], [198, 18, 2, 2], 1, request.len());
        quoted.extend_from_slice(&request[..8]);
        let mut err = v4_header([198, 18, 1, 1], [198, 18, 1, 2], 1, 8 + quoted.len());
        err.extend_from_slice(&[3, 4, 0, 0, 0, 0]);
        err.extend_from_slice(&1400u16.to_be_bytes());
        err.extend_from_slice(&quoted);
        assert_eq!(classify(&err, dst, 0x1234), Some(Incoming::Error(ErrorKind::FragNeeded(1400))));
        // Not for our id.
        assert_eq!(classify(&err, dst, 0x4321), None);
        // Truncated packets are ignored, not a panic.
        for n in 0..err.len() {
            let _ = classify(&err[..n], dst, 0x1234);
        }
    }

    #[test]
    fn classifies_v6_packet_too_big() {
        let dst: IpAddr = "2001:db8:2::2".parse().unwrap();
        let request = echo_request(dst, 0x99, 1, 1400);
        let mut inner = vec![0x60, 0, 0, 0];
        inner.extend_from_slice(&(request.len() as u16).to_be_bytes());
        inner.extend_from_slice(&[58, 64]);
        inner.extend_from_slice(&"2001:db8:1::2".parse::<Ipv6Addr>().unwrap().octets());
        inner.extend_from_slice(&"2001:db8:2::2".parse::<Ipv6Addr>().unwrap().octets());
        inner.extend_from_slice(&request);
        let mut ptb = vec![2, 0, 0, 0];
        ptb.extend_from_slice(&1280u32.to_be_bytes());
        ptb.extend_from_slice(&inner);
        assert_eq!(classify(&ptb, dst, 0x99), Some(Incoming::Error(ErrorKind::TooBig(1280))));
        let mut reply = request.clone();
        reply[0] = 129;
        assert_eq!(classify(&reply, dst, 0x99), Some(Incoming::Reply(1)));
        for n in 0..ptb.len() {
            let _ = classify(&ptb[..n], dst, 0x99);
        }
    }

    #[test]
    fn v4_echo_request_checksum_verifies() {
        let p = echo_request("198.18.0.1".parse().unwrap(), 1, 2, 33);
        assert!(vmpls_wire::checksum::verify(&p));
    }
}
