//! An MPLS-in-UDP tunnel port (RFC 7510): labelled packets to and from one remote router
//! as UDP datagrams over an IP underlay the kernel routes.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     Source Port = Entropy     |       Dest Port = 6635        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |           UDP Length          |        UDP Checksum           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                                                               |
//! ~                       MPLS Label Stack                        ~
//! |                                                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                                                               |
//! ~                        Message Body                           ~
//! |                                                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! To the pipeline the tunnel is a point-to-point Ethernet port: a received datagram
//! becomes a frame with a made-up Ethernet header (to the port's MAC, ethertype MPLS), and
//! the Ethernet header of a frame sent is dropped; there is no neighbour to resolve
//! ([`Port::point_to_point`]). A plain IP packet routed into the tunnel (a PHP pop, an IP
//! route, an ICMP error the router built) goes under an explicit-null label (0 for IPv4,
//! 2 for IPv6), since the tunnel carries MPLS only; anything else is counted
//! (`tx_not_mpls`) and dropped.
//!
//! - **Send**: a labelled TCP super-frame reaches the port whole (the port says it takes
//!   labelled GSO); the port writes each segment's headers (label stack, IP, TCP, with
//!   lengths, sequence number, flags and checksum as [`gso::segment`] makes them) into a
//!   scratch buffer, and sends them with the segments' payloads straight from the
//!   super-frame, two iovecs a datagram, in one `sendmsg` with `UDP_SEGMENT` (the
//!   kernel's UDP GSO cuts the datagrams, or the NIC does): a 64 KiB super-frame costs
//!   two system calls (a send carries at most 64 KiB of UDP payload) and one copy, the
//!   kernel's. Consecutive frames of one flow that are not super-frames (segments the
//!   pipeline cut, a router's own frames) are grouped the same way. Where the kernel
//!   refuses UDP GSO (`EIO`: no checksum offload on the route's device) the port falls
//!   back to one `sendmsg` a datagram, once and for good.
//! - **Source port** (RFC 7510 section 3): the flow's entropy. One connected socket per
//!   source port, [`SOURCE_PORTS`] of them bound in the dynamic range 49152-65535; the
//!   flow hash of the label stack and the IP packet under it picks one, so one flow keeps
//!   one source port and different flows spread over the underlay's ECMP.
//! - **Receive**: one socket bound to `local:6635` (or the configured port) with
//!   `UDP_GRO`: the kernel hands consecutive datagrams of one sender as one buffer with
//!   their size, and the port cuts it into frames; the pipeline's MPLS GRO coalesces them
//!   again where the LSP ends. One system call per super-frame each way.
//! - **Checksums** (RFC 7510 section 3 and 5): the UDP checksum is always computed (by
//!   the kernel or the device), over IPv4 and IPv6; received datagrams are checked by the
//!   kernel, which accepts a zero checksum over IPv4 (allowed by the RFC) and refuses it
//!   over IPv6 (the default of RFC 6936 for a tunnel that did not agree otherwise).
//! - **MTU**: the underlay's path MTU toward the remote (`IP_MTU`) minus the IP and UDP
//!   headers; datagrams never fragment (`IP_PMTUDISC_DO`), and the pipeline sends "frag
//!   needed" / "packet too big" toward the customer for a packet whose segments would not
//!   fit. The router reads it again every second ([`Port::medium_mtu`]), so the tunnel
//!   follows the underlay's links and the path MTU the kernel learns.
//! - **Bad input** is counted and dropped: datagrams from any address but the remote
//!   (`rx_wrong_source`), shorter than a label stack entry or whose stack runs off the end
//!   (`rx_truncated`), with no bottom of stack within [`MAX_LABELS`]
//!   entries (`rx_not_mpls`). A remote that is down costs nothing: sends never block, and
//!   the kernel's "port unreachable" reported on a send is counted (`tx_unreachable`).

use std::io::{self, IoSlice};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};

use vmpls_dataplane::gso;
use vmpls_dataplane::hash::mpls_flow_hash;
use vmpls_dataplane::{Packet, PacketPool, PortCaps, PortId, PortInfo};
use vmpls_wire::ethernet;

use vmpls_sys::sockopt;
use vmpls_sys::udp::{self, UDP_GRO, UDP_SEGMENT};

use crate::{Port, PortError, PortStats};

const ETH: usize = ethernet::HEADER_LEN;
const MPLS_ETHERTYPE: [u8; 2] = [0x88, 0x47];
/// Most segments one `UDP_SEGMENT` send may carry (`UDP_MAX_SEGMENTS`), and most
/// datagrams the kernel coalesces into one `UDP_GRO` buffer.
const MAX_SEGMENTS: usize = 64;
/// Most bytes of UDP payload one send may carry: a 65,535-byte IPv4 packet less the IPv4
/// and UDP headers (IPv6 could carry 20 more).
const MAX_UDP_PAYLOAD: usize = 65_507;
/// How many sockets (source ports) a tunnel sends from: the entropy of RFC 7510
/// section 3, spread over the dynamic port range.
pub const SOURCE_PORTS: usize = 16;
/// The first source port tried (RFC 7510: the dynamic range, 49152-65535).
const SOURCE_PORT_BASE: u16 = 49152;
/// Most label stack entries a datagram may start with (`vmpls_fib::MAX_STACK_DEPTH`, as
/// the pipeline takes them).
const MAX_LABELS: usize = 32;
/// Socket buffer asked for in each direction.
const SOCKET_BUFFER: libc::c_int = 32 << 20;

/// What a tunnel port accepts at output: labelled TCP super-frames whole (the port cuts
/// them: each segment's headers built apart, its payload sent from the super-frame, all
/// in one `UDP_SEGMENT` call), frames with complete checksums otherwise (the pipeline
/// completes partial checksums of frames that are not super-frames).
pub fn mpls_udp_caps() -> PortCaps {
    PortCaps { tso4: false, tso6: false, uso: false, csum: false, mpls_gso: true }
}

/// Where a tunnel runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MplsUdpOptions {
    /// The underlay address the sockets bind to.
    pub local: IpAddr,
    /// The remote router's underlay address.
    pub remote: IpAddr,
    /// The destination port of every datagram and the port received on (6635).
    pub udp_port: u16,
    /// The network namespace (a name under `/run/netns`) whose stack carries the
    /// underlay; `None`: the caller's.
    pub netns: Option<String>,
    /// An MTU below the underlay's (the label stack and IP packet a datagram carries).
    pub mtu: Option<u32>,
}

/// What the receive side made of one datagram's frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Mpls,
    Truncated,
    NotMpls,
}

/// Checks that `payload` is a label stack followed by something: a bottom-of-stack entry
/// within [`MAX_LABELS`] entries and bytes after it.
fn classify(payload: &[u8]) -> Verdict {
    for (i, e) in payload.chunks(4).enumerate() {
        if i >= MAX_LABELS {
            return Verdict::NotMpls;
        }
        if e.len() < 4 {
            return Verdict::Truncated;
        }
        if e[2] & 1 != 0 {
            return if payload.len() > 4 * (i + 1) { Verdict::Mpls } else { Verdict::Truncated };
        }
    }
    Verdict::Truncated
}

/// A MAC for the port, derived from the tunnel's ends (locally administered, unicast).
fn derive_mac(opts: &MplsUdpOptions, salt: u8) -> [u8; 6] {
    let mut h = vmpls_dataplane::hash::FlowHasher::default();
    for a in [opts.local, opts.remote] {
        match a {
            IpAddr::V4(a) => h.write_bytes(&a.octets()),
            IpAddr::V6(a) => h.write_bytes(&a.octets()),
        }
    }
    h.write(u32::from(opts.udp_port));
    let v = h.finish().to_be_bytes();
    [0x02, 0x75, v[0], v[1], v[2], v[3] ^ salt]
}

/// An MPLS-in-UDP tunnel port. See the module documentation.
pub struct MplsUdpPort {
    info: PortInfo,
    opts: MplsUdpOptions,
    /// Bound to `local:udp_port`, `UDP_GRO` on: everything the remote sends arrives here.
    rx: UdpSocket,
    /// Bound to `local:SOURCE`, connected to `remote:udp_port`, one a source port.
    tx: Vec<UdpSocket>,
    source_ports: Vec<u16>,
    /// `UDP_SEGMENT` works on this route (off for good after an `EIO`).
    gso: bool,
    /// The made-up source MAC of received frames.
    peer_mac: [u8; 6],
    stats: PortStats,
    /// Per frame being sent: where its datagram starts and which socket sends it.
    plan: Vec<Planned>,
    /// The headers of the segments of the super-frame being sent, one after the other.
    headers: Vec<u8>,
}

/// How one frame of a batch is sent.
#[derive(Debug, Clone, Copy)]
struct Planned {
    /// Offset of the datagram (the label stack) in the frame.
    start: usize,
    /// Its length (for a super-frame: the whole frame's from `start`).
    len: usize,
    /// The socket (source port) that sends it; `None`: not sent (`tx_not_mpls`).
    sock: Option<usize>,
    /// A super-frame the port cuts ([`MplsUdpPort::send_super`]).
    whole: bool,
}

impl std::fmt::Debug for MplsUdpPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MplsUdpPort")
            .field("info", &self.info)
            .field("opts", &self.opts)
            .field("source_ports", &self.source_ports)
            .field("gso", &self.gso)
            .finish()
    }
}

/// Runs `f` in network namespace `netns` (a name under `/run/netns`), on a thread of its
/// own so the caller's namespace does not change; sockets created there stay in it.
fn in_netns<T: Send>(netns: &str, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    let path = format!("/run/netns/{netns}");
    let file = std::fs::File::open(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("network namespace {path}: {e}")))?;
    vmpls_sys::netns::run_in(&file, f)?
}

/// A non-blocking UDP socket of `local`'s family bound to `local:port`.
fn bound(local: IpAddr, port: u16) -> io::Result<UdpSocket> {
    let s = UdpSocket::bind(SocketAddr::new(local, port))?;
    s.set_nonblocking(true)?;
    let (level, opt, val) = match local {
        IpAddr::V4(_) => (libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO),
        IpAddr::V6(_) => (libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER, libc::IPV6_PMTUDISC_DO),
    };
    // Never fragment in the underlay: a datagram too big is refused (EMSGSIZE), and the
    // port's MTU makes the pipeline send "too big" to the customer first.
    sockopt::set_int(s.as_fd(), level, opt, val)?;
    for (force, plain) in [(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF), (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)] {
        if sockopt::set_int(s.as_fd(), libc::SOL_SOCKET, force, SOCKET_BUFFER).is_err() {
            let _ = sockopt::set_int(s.as_fd(), libc::SOL_SOCKET, plain, SOCKET_BUFFER);
        }
    }
    Ok(s)
}

/// The sockets of a tunnel: the receiving one, the sending ones with their source ports,
/// the underlay's path MTU toward the remote, whether `UDP_GRO` and `UDP_SEGMENT` work.
struct Sockets {
    rx: UdpSocket,
    tx: Vec<UdpSocket>,
    source_ports: Vec<u16>,
    path_mtu: u32,
    gro: bool,
    gso: bool,
}

/// What a datagram to `remote` may carry now: the path MTU the kernel knows for the
/// connected socket `sock` (its route's, or less after "packet too big"), less the IP and
/// UDP headers.
fn tunnel_mtu(sock: BorrowedFd<'_>, remote: IpAddr) -> io::Result<u32> {
    let (level, opt, overhead) = match remote {
        IpAddr::V4(_) => (libc::IPPROTO_IP, libc::IP_MTU, 20 + 8),
        IpAddr::V6(_) => (libc::IPPROTO_IPV6, libc::IPV6_MTU, 40 + 8),
    };
    let path_mtu = sockopt::get_int(sock, level, opt)?;
    Ok(u32::try_from(path_mtu).unwrap_or(0).saturating_sub(overhead))
}

fn open_sockets(opts: &MplsUdpOptions) -> io::Result<Sockets> {
    let rx = bound(opts.local, opts.udp_port)?;
    let gro = sockopt::set_int(rx.as_fd(), libc::SOL_UDP, UDP_GRO, 1).is_ok();
    let remote = SocketAddr::new(opts.remote, opts.udp_port);
    let mut tx = Vec::with_capacity(SOURCE_PORTS);
    let mut source_ports = Vec::with_capacity(SOURCE_PORTS);
    // Start somewhere that depends on the tunnel, so tunnels on one address do not all
    // contend for the same ports.
    let span = u32::from(u16::MAX - SOURCE_PORT_BASE) + 1;
    let start = derive_mac(opts, 0);
    let mut next = u32::from_be_bytes([start[2], start[3], start[4], start[5]]) % span;
    let mut tries = 0u32;
    while tx.len() < SOURCE_PORTS {
        if tries >= span {
            return Err(io::Error::new(io::ErrorKind::AddrInUse, "no free source port in 49152-65535"));
        }
        tries += 1;
        let port = SOURCE_PORT_BASE + (next % span) as u16;
        next += 1;
        let s = match bound(opts.local, port) {
            Ok(s) => s,
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(e),
        };
        s.connect(remote)?;
        tx.push(s);
        source_ports.push(port);
    }
    let path_mtu = tunnel_mtu(tx[0].as_fd(), opts.remote)?;
    let gso = sockopt::set_int(tx[0].as_fd(), libc::SOL_UDP, UDP_SEGMENT, 0).is_ok();
    Ok(Sockets { rx, tx, source_ports, path_mtu, gro, gso })
}

impl MplsUdpPort {
    /// Opens a tunnel port with index `id` and configured `name`: binds the receiving
    /// socket to `local:udp_port` and [`SOURCE_PORTS`] sending sockets connected to
    /// `remote:udp_port`, in `opts.netns` if given.
    pub fn open(id: PortId, name: &str, opts: &MplsUdpOptions) -> Result<MplsUdpPort, PortError> {
        let ifname = match opts.remote {
            IpAddr::V6(r) => format!("udp:[{}]->[{r}]:{}", opts.local, opts.udp_port),
            IpAddr::V4(r) => format!("udp:{}->{r}:{}", opts.local, opts.udp_port),
        };
        let io_err = |op: &'static str| {
            let ifname = ifname.clone();
            move |source: io::Error| PortError::Io { ifname, op, source }
        };
        if opts.local.is_ipv4() != opts.remote.is_ipv4() {
            return Err(io_err("check the tunnel's addresses")(io::Error::new(
                io::ErrorKind::InvalidInput,
                "local and remote are of different families",
            )));
        }
        let s = match &opts.netns {
            Some(ns) => in_netns(ns, || open_sockets(opts)),
            None => open_sockets(opts),
        }
        .map_err(io_err("open the tunnel's UDP sockets (is local an address of this host?)"))?;
        if s.path_mtu < crate::MIN_MTU {
            return Err(PortError::MtuTooSmall { ifname, requested: s.path_mtu });
        }
        let mtu = match opts.mtu {
            Some(m) if m > s.path_mtu => {
                return Err(PortError::MtuTooLarge { ifname, requested: m, interface_mtu: s.path_mtu });
            }
            Some(m) if m < crate::MIN_MTU => return Err(PortError::MtuTooSmall { ifname, requested: m }),
            Some(m) => m,
            None => s.path_mtu,
        };
        if !s.gro {
            tracing::warn!(%ifname, "UDP_GRO unavailable: one receive a datagram");
        }
        if !s.gso {
            tracing::warn!(%ifname, "UDP_SEGMENT unavailable: one send a datagram");
        }
        tracing::debug!(%ifname, mtu, source_ports = ?s.source_ports, "MPLS-in-UDP port open");
        Ok(MplsUdpPort {
            info: PortInfo {
                id,
                name: name.to_owned(),
                mac: derive_mac(opts, 0),
                mtu,
                caps: mpls_udp_caps(),
            },
            opts: opts.clone(),
            rx: s.rx,
            tx: s.tx,
            source_ports: s.source_ports,
            gso: s.gso,
            peer_mac: derive_mac(opts, 1),
            stats: PortStats::default(),
            plan: Vec::with_capacity(crate::BATCH),
            headers: Vec::new(),
        })
    }

    /// The UDP source ports the tunnel sends from (one per flow-hash bucket).
    pub fn source_ports(&self) -> &[u16] {
        &self.source_ports
    }

    /// Whether sends use `UDP_SEGMENT` (one system call for a super-frame's segments).
    pub fn uses_gso(&self) -> bool {
        self.gso
    }

    /// Where the datagram of frame `p` starts and which socket sends it, after putting an
    /// explicit-null label on a plain IP packet (in the Ethernet header's place). `None`
    /// for a frame the tunnel cannot carry.
    fn prepare(p: &mut Packet, sockets: usize) -> Option<(usize, usize)> {
        let f = p.frame_mut();
        if f.len() <= ETH {
            return None;
        }
        let start = match [f[12], f[13]] {
            MPLS_ETHERTYPE => ETH,
            [0x08, 0x00] | [0x86, 0xdd] => {
                let v6 = f[13] == 0xdd;
                let ttl = *f.get(ETH + if v6 { 7 } else { 8 })?;
                let label = if v6 { 2 } else { 0 };
                let e = vmpls_wire::mpls::Repr { label, tc: 0, bottom: true, ttl };
                f[ETH - 4..ETH].copy_from_slice(&e.to_u32().to_be_bytes());
                ETH - 4
            }
            _ => return None,
        };
        let hash = mpls_flow_hash(&f[start..]) as usize;
        Some((start, hash % sockets))
    }

    /// Sends the frames of `self.plan[from..to]` (one socket, equal sizes but the last)
    /// in one `sendmsg`, with `UDP_SEGMENT` when more than one.
    fn send_group(&mut self, pkts: &[Packet], from: usize, to: usize) -> io::Result<()> {
        let mut iov = [IoSlice::new(&[]); MAX_SEGMENTS];
        for ((slot, p), d) in iov.iter_mut().zip(&pkts[from..to]).zip(&self.plan[from..to]) {
            *slot = IoSlice::new(&p.frame()[d.start..d.start + d.len]);
        }
        let Planned { len: seg, sock, .. } = self.plan[from];
        let seg = if to - from > 1 { Some(seg) } else { None };
        udp::send_segments(&self.tx[sock.unwrap_or(0)], &iov[..to - from], seg).map(|_| ())
    }

    /// Sends super-frame `p` (its datagrams from `start`) as its segments: their headers
    /// made by [`gso::segment_headers`], their payloads sent from `p`, as many to a
    /// `sendmsg` as `UDP_SEGMENT` takes. Returns the datagrams and bytes (as the segments'
    /// frames would count them) sent; failures are counted here.
    fn send_super(&mut self, p: &Packet, start: usize, sock: usize) -> (usize, u64) {
        let frame = p.frame();
        let l3 = start + 4 * vmpls_wire::mpls::stack_depth(&frame[start..]).unwrap_or(0);
        let h = match gso::segment_headers(p, l3, start, gso::SegmentChecksum::Full, &mut self.headers) {
            Ok(h) => h,
            Err(_) => {
                // A super-frame the pipeline passed is well formed; one that is not is
                // not sent.
                self.stats.tx_errors.record(libc::EINVAL);
                return (0, 0);
            }
        };
        self.stats.tx_segmented += 1;
        self.stats.tx_segments += h.segments as u64;
        let seg = h.header_len + h.gso_size;
        let (mut sent, mut bytes) = (0, 0u64);
        let mut i = 0;
        while i < h.segments {
            let per_send = if self.gso { (MAX_UDP_PAYLOAD / seg).clamp(1, MAX_SEGMENTS) } else { 1 };
            let to = (i + per_send).min(h.segments);
            let mut iov = [IoSlice::new(&[]); 2 * MAX_SEGMENTS];
            let mut group_bytes = 0u64;
            for (k, pair) in (i..to).zip(iov.chunks_exact_mut(2)) {
                let hdr = &self.headers[k * h.header_len..(k + 1) * h.header_len];
                let pay_start = h.payload_offset + k * h.gso_size;
                let pay = &frame[pay_start..(pay_start + h.gso_size).min(frame.len())];
                pair[0] = IoSlice::new(hdr);
                pair[1] = IoSlice::new(pay);
                group_bytes += (h.payload_offset + pay.len()) as u64;
            }
            let n = to - i;
            match udp::send_segments(&self.tx[sock], &iov[..2 * n], (n > 1).then_some(seg)) {
                Ok(_) => {
                    sent += n;
                    bytes += group_bytes;
                }
                Err(e) => match e.raw_os_error().unwrap_or(0) {
                    libc::EINTR => continue,
                    libc::EIO if n > 1 => {
                        tracing::warn!(port = %self.info.name, "UDP_SEGMENT refused (EIO): one send a datagram");
                        self.gso = false;
                        continue;
                    }
                    errno => self.count_failed(errno, n),
                },
            }
            i = to;
        }
        (sent, bytes)
    }

    /// Counts `n` datagrams the kernel refused with `errno`.
    fn count_failed(&mut self, errno: i32, n: usize) {
        match errno {
            libc::EAGAIN => self.stats.tx_dropped += n as u64,
            errno if is_unreachable(errno) => self.stats.tx_unreachable += n as u64,
            errno => {
                for _ in 0..n {
                    self.stats.tx_errors.record(errno);
                }
            }
        }
    }

    /// Receives one datagram (or `UDP_GRO` train) into `p` after room for an Ethernet
    /// header. Returns its length, the segment size (the length when not coalesced), and
    /// the sender's address.
    fn recv_one(&self, p: &mut Packet) -> io::Result<(usize, usize, Option<IpAddr>, bool)> {
        let area = &mut p.receive_area()[ETH..];
        let want = area.len().min(usize::from(u16::MAX));
        let r = udp::recv_gro(&self.rx, &mut area[..want])?;
        Ok((r.len, r.segment, r.from, r.truncated))
    }

    /// Turns `p`, holding a received datagram after [`ETH`] bytes, into a frame; `false`
    /// (counted) when the datagram is not a label stack with a payload.
    fn frame_up(&mut self, p: &mut Packet, len: usize) -> bool {
        p.set_received(ETH + len);
        match classify(&p.frame()[ETH..]) {
            Verdict::Mpls => {}
            Verdict::Truncated => {
                self.stats.rx_truncated += 1;
                return false;
            }
            Verdict::NotMpls => {
                self.stats.rx_not_mpls += 1;
                return false;
            }
        }
        let f = p.frame_mut();
        f[0..6].copy_from_slice(&self.info.mac);
        f[6..12].copy_from_slice(&self.peer_mac);
        f[12..14].copy_from_slice(&MPLS_ETHERTYPE);
        p.port = self.info.id;
        self.stats.rx_packets += 1;
        self.stats.rx_bytes += (ETH + len) as u64;
        true
    }
}

/// True for a send error that says the remote (or the way to it) is not there now.
fn is_unreachable(errno: i32) -> bool {
    matches!(
        errno,
        libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EHOSTDOWN | libc::ENETDOWN
    )
}

impl AsFd for MplsUdpPort {
    /// The descriptor to poll for readability.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.rx.as_fd()
    }
}

impl Port for MplsUdpPort {
    fn info(&self) -> &PortInfo {
        &self.info
    }

    fn point_to_point(&self) -> bool {
        true
    }

    /// The underlay's path MTU now (less IP and UDP), or the configured `mtu` while the
    /// path carries it. `None` while the kernel has no route to the remote.
    fn medium_mtu(&self) -> Option<u32> {
        let path = tunnel_mtu(self.tx.first()?.as_fd(), self.opts.remote).ok()?;
        Some(self.opts.mtu.map_or(path, |m| m.min(path)))
    }

    /// Receives datagrams while `max` leaves room for a whole `UDP_GRO` train
    /// (`MAX_SEGMENTS` frames), at least one: a train is delivered whole, one frame a
    /// datagram.
    fn recv_batch(&mut self, pool: &mut PacketPool, out: &mut Vec<Packet>, max: usize) -> io::Result<usize> {
        let mut delivered = 0;
        while max > 0 && (delivered == 0 || max - delivered.min(max) >= MAX_SEGMENTS) {
            let Some(mut p) = pool.get() else {
                // No buffer: read and drop one, so a level-triggered poll does not spin.
                let mut scratch = Packet::new();
                return match self.recv_one(&mut scratch) {
                    Ok(_) => {
                        self.stats.rx_no_buffer += 1;
                        Ok(delivered)
                    }
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {
                        Ok(delivered)
                    }
                    Err(e) => Err(e),
                };
            };
            let (len, seg, src, truncated) = match self.recv_one(&mut p) {
                Ok(r) => r,
                Err(e) => {
                    pool.put(p);
                    return match e.kind() {
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(delivered),
                        // A port unreachable about an earlier datagram is reported on
                        // the next receive of an unconnected socket only with
                        // IP_RECVERR; be safe.
                        _ if e.raw_os_error().is_some_and(is_unreachable) => Ok(delivered),
                        _ => Err(e),
                    };
                }
            };
            if src != Some(self.opts.remote) {
                self.stats.rx_wrong_source += 1;
                pool.put(p);
                continue;
            }
            if truncated {
                self.stats.rx_truncated += 1;
                pool.put(p);
                continue;
            }
            let seg = seg.clamp(1, len.max(1));
            // The segments after the first go to buffers of their own.
            let first = out.len();
            let mut off = seg;
            p.set_received(ETH + len);
            while off < len {
                let n = seg.min(len - off);
                let Some(mut q) = pool.get() else {
                    self.stats.rx_no_buffer += 1;
                    off += n;
                    continue;
                };
                q.receive_area()[ETH..ETH + n].copy_from_slice(&p.frame()[ETH + off..ETH + off + n]);
                if self.frame_up(&mut q, n) {
                    out.push(q);
                    delivered += 1;
                } else {
                    pool.put(q);
                }
                off += n;
            }
            if self.frame_up(&mut p, seg.min(len)) {
                // Ahead of the rest of its train.
                out.insert(first, p);
                delivered += 1;
            } else {
                pool.put(p);
            }
        }
        Ok(delivered)
    }

    fn send_batch(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) -> io::Result<usize> {
        let sockets = self.tx.len();
        self.plan.clear();
        for p in pkts.iter_mut() {
            let whole = p.offload.is_gso();
            match Self::prepare(p, sockets) {
                Some((start, sock)) => {
                    self.plan.push(Planned { start, len: p.len() - start, sock: Some(sock), whole })
                }
                None => {
                    self.stats.tx_not_mpls += 1;
                    self.plan.push(Planned { start: 0, len: 0, sock: None, whole: false });
                }
            }
        }
        let mut sent = 0;
        let mut i = 0;
        while i < pkts.len() {
            let Planned { start, len: seg, sock, whole } = self.plan[i];
            let Some(sock) = sock else {
                i += 1;
                continue;
            };
            if whole {
                let (n, bytes) = self.send_super(&pkts[i], start, sock);
                sent += n;
                self.stats.tx_packets += n as u64;
                self.stats.tx_bytes += bytes;
                i += 1;
                continue;
            }
            // The group: same socket, all of `seg` bytes but possibly the last, shorter.
            let mut j = i + 1;
            let mut total = seg;
            while self.gso && j < pkts.len() && j - i < MAX_SEGMENTS {
                let d = self.plan[j];
                if d.sock != Some(sock)
                    || d.whole
                    || d.len > seg
                    || d.len == 0
                    || self.plan[j - 1].len != seg
                    || total + d.len > MAX_UDP_PAYLOAD
                {
                    break;
                }
                total += d.len;
                j += 1;
            }
            match self.send_group(pkts, i, j) {
                Ok(()) => {
                    sent += j - i;
                    self.stats.tx_packets += (j - i) as u64;
                    self.stats.tx_bytes += pkts[i..j].iter().map(|p| p.len() as u64).sum::<u64>();
                }
                Err(e) => match e.raw_os_error().unwrap_or(0) {
                    libc::EINTR => continue,
                    libc::EIO if j - i > 1 => {
                        // No UDP GSO on this route: one datagram a send from now on.
                        tracing::warn!(port = %self.info.name, "UDP_SEGMENT refused (EIO): one send a datagram");
                        self.gso = false;
                        continue;
                    }
                    errno => self.count_failed(errno, j - i),
                },
            }
            i = j;
        }
        pkts.drain(..).for_each(|p| pool.put(p));
        Ok(sent)
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(label: u32, bottom: bool) -> [u8; 4] {
        vmpls_wire::mpls::Repr { label, tc: 0, bottom, ttl: 64 }.to_u32().to_be_bytes()
    }

    #[test]
    fn classify_takes_label_stacks_and_names_the_rest() {
        let mut ok = entry(100, false).to_vec();
        ok.extend_from_slice(&entry(200, true));
        ok.extend_from_slice(&[0x45, 0, 0, 20]);
        assert_eq!(classify(&ok), Verdict::Mpls);
        assert_eq!(classify(&ok[..8]), Verdict::Truncated, "nothing after the stack");
        assert_eq!(classify(&ok[..6]), Verdict::Truncated, "the stack runs off the end");
        assert_eq!(classify(&[]), Verdict::Truncated);
        assert_eq!(classify(&[0x00, 0x06]), Verdict::Truncated);
        assert_eq!(classify(&[0u8; 200]), Verdict::NotMpls, "no bottom of stack");
    }

    #[test]
    fn an_ip_packet_goes_under_explicit_null_and_arp_does_not_go() {
        let mut f = vec![0u8; 14 + 20];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[14 + 8] = 61;
        let mut p = Packet::from_frame(0, &f);
        let (start, sock) = MplsUdpPort::prepare(&mut p, 16).expect("IPv4 goes");
        assert_eq!(start, 10);
        assert!(sock < 16);
        assert_eq!(
            &p.frame()[10..14],
            &entry(0, true)[..3].iter().copied().chain([61]).collect::<Vec<_>>()[..]
        );
        f[12..14].copy_from_slice(&[0x08, 0x06]);
        assert!(MplsUdpPort::prepare(&mut Packet::from_frame(0, &f), 16).is_none());
    }

    /// A labelled TCP super-frame (one label, IPv4 or IPv6 inside) of `payload` bytes in
    /// segments of `mss`, partial checksum, as the pipeline hands a port that takes it.
    fn labelled_super_frame(v6: bool, payload: usize, mss: u16) -> Packet {
        use vmpls_wire::{ipv4, ipv6, tcp, virtio_net};
        let data: Vec<u8> = (0..payload).map(|i| (i * 7 + i / 251) as u8).collect();
        let t = tcp::Repr {
            src_port: 40000,
            dst_port: 5201,
            seq_number: 0xfffff000,
            ack_number: 1,
            flags: tcp::flags::ACK | tcp::flags::PSH,
            window_len: 512,
            urgent_at: 0,
            options: &[],
        };
        let mut l4 = vec![0u8; tcp::HEADER_LEN + data.len()];
        t.emit(&mut tcp::Packet::new_unchecked(&mut l4[..])).unwrap();
        l4[tcp::HEADER_LEN..].copy_from_slice(&data);
        let (src4, dst4) = ([198, 18, 1, 2].into(), [198, 18, 2, 2].into());
        let (src6, dst6) = ("2001:db8:1::2".parse().unwrap(), "2001:db8:2::2".parse().unwrap());
        let mut ip = if v6 {
            tcp::Packet::new_unchecked(&mut l4[..]).fill_partial_checksum_v6(src6, dst6);
            let r = ipv6::Repr {
                src_addr: src6,
                dst_addr: dst6,
                next_header: 6,
                payload_len: l4.len(),
                hop_limit: 63,
                traffic_class: 0,
                flow_label: 0,
            };
            let mut h = vec![0u8; ipv6::HEADER_LEN];
            r.emit(&mut ipv6::Packet::new_unchecked(&mut h[..]));
            h
        } else {
            tcp::Packet::new_unchecked(&mut l4[..]).fill_partial_checksum_v4(src4, dst4);
            let r = ipv4::Repr {
                src_addr: src4,
                dst_addr: dst4,
                protocol: 6,
                payload_len: l4.len(),
                ttl: 63,
                dscp_ecn: 0,
                ident: 0x1234,
                dont_frag: true,
            };
            let mut h = vec![0u8; ipv4::HEADER_LEN];
            r.emit(&mut ipv4::Packet::new_unchecked(&mut h[..]));
            h
        };
        let l4_offset = ETH + 4 + ip.len();
        ip.extend_from_slice(&l4);
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&MPLS_ETHERTYPE);
        f.extend_from_slice(&entry(1002, true));
        f.extend_from_slice(&ip);
        let mut p = Packet::from_frame(0, &f);
        p.offload = virtio_net::Repr {
            needs_csum: true,
            csum_start: l4_offset as u16,
            csum_offset: 16,
            gso_type: if v6 { virtio_net::GsoType::TcpV6 } else { virtio_net::GsoType::TcpV4 },
            gso_size: mss,
            hdr_len: (l4_offset + tcp::HEADER_LEN) as u16,
            ..Default::default()
        };
        p
    }

    #[test]
    fn a_super_frame_leaves_as_exactly_the_segments_the_pipeline_would_cut() {
        // Over loopback in a namespace of its own: the tunnel sends to itself. What its
        // receive side reads back, datagram by datagram, must be the label stack and
        // bytes of the frames gso::segment makes: lengths, sequence numbers, flags,
        // IP identification and checksums included.
        let ns = vmpls_testkit::Netns::without_ipv6("udpsuper");
        ns.ip(&["link", "set", "lo", "up"]);
        let lo: IpAddr = [127, 0, 0, 1].into();
        let opts = MplsUdpOptions {
            local: lo,
            remote: lo,
            udp_port: 6635,
            netns: Some(ns.name().to_owned()),
            mtu: None,
        };
        let mut port = MplsUdpPort::open(0, "core", &opts).expect("open the tunnel");
        assert!(port.info().caps.mpls_gso, "the port takes labelled super-frames");
        let mut pool = PacketPool::new(512);
        // 60,000 bytes in 1,400-byte segments: 43 datagrams (one send); 64,000 bytes in
        // 1,000: 64 (two sends).
        for (v6, payload, mss) in [(false, 60_000, 1400), (true, 64_000, 1000), (false, 900, 1400)] {
            let sup = labelled_super_frame(v6, payload, mss);
            let mut want = Vec::new();
            vmpls_dataplane::gso::segment(&sup, ETH + 4, &mut pool, &mut want).unwrap();
            let before = port.stats();
            let mut batch = vec![sup];
            assert_eq!(port.send_batch(&mut batch, &mut pool).unwrap(), want.len());
            let after = port.stats();
            assert_eq!(after.tx_packets - before.tx_packets, want.len() as u64);
            assert_eq!(after.tx_bytes - before.tx_bytes, want.iter().map(|p| p.len() as u64).sum::<u64>());
            let mut got = Vec::new();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
            while got.len() < want.len() && std::time::Instant::now() < deadline {
                vmpls_sys::wait_readable(&port, std::time::Duration::from_millis(100));
                port.recv_batch(&mut pool, &mut got, MAX_SEGMENTS).unwrap();
            }
            assert_eq!(got.len(), want.len(), "v6 {v6}, {payload} bytes");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(&g.frame()[ETH..], &w.frame()[ETH..], "datagram {i}, v6 {v6}");
            }
            got.into_iter().chain(want).for_each(|p| pool.put(p));
        }
        assert!(port.uses_gso(), "loopback takes UDP_SEGMENT: the test covered it");
    }

    #[test]
    fn one_flow_hashes_to_one_socket() {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&MPLS_ETHERTYPE);
        f.extend_from_slice(&entry(100, true));
        let mut ip = vec![0u8; 40];
        ip[0] = 0x45;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&[198, 18, 1, 2]);
        ip[16..20].copy_from_slice(&[198, 18, 2, 2]);
        let mut socks = std::collections::BTreeSet::new();
        for sport in 40000u16..40032 {
            ip[20..22].copy_from_slice(&sport.to_be_bytes());
            let mut frame = f.clone();
            frame.extend_from_slice(&ip);
            let a = MplsUdpPort::prepare(&mut Packet::from_frame(0, &frame), SOURCE_PORTS).unwrap().1;
            let b = MplsUdpPort::prepare(&mut Packet::from_frame(0, &frame), SOURCE_PORTS).unwrap().1;
            assert_eq!(a, b);
            socks.insert(a);
        }
        assert!(socks.len() > SOURCE_PORTS / 2, "32 flows over {} sockets: {socks:?}", socks.len());
    }
}
