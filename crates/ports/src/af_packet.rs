//! A port on a Linux Ethernet interface (veth, NIC) through an `AF_PACKET` socket with
//! `PACKET_VNET_HDR`, so TSO super-frames come in and go out whole with their offload
//! metadata. Frames move in batches of up to [`BATCH`] with `recvmmsg`/`sendmmsg`, into
//! and out of [`Packet`] buffers, with no allocation per packet.

use std::cell::Cell;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use vmpls_dataplane::gso::{self, OffloadRefused};
use vmpls_dataplane::{Packet, PacketPool, PortCaps, PortId, PortInfo};
use vmpls_wire::virtio_net;

use vmpls_sys::iface::{self, IfName};
use vmpls_sys::{packet, sockopt};

use crate::mmsg::{self, BATCH, MmsgBatch};
use crate::{Port, PortError, PortStats};

/// Socket buffer size asked for in each direction: room for a few hundred 64 KiB
/// super-frames (research/kernel-io.md used 32 MB).
const SOCKET_BUFFER: libc::c_int = 32 << 20;

/// What an `AF_PACKET` port on a veth or NIC accepts at output. Measured on this kernel
/// (research/kernel-io.md, question 3):
/// - `tso4`: an IPv4 TCP super-frame written with a virtio-net header (`GSO_TCPV4`,
///   `NEEDS_CSUM`) is accepted; a veth hands it to its peer whole, a NIC or the kernel's
///   GSO segments it. `tso6` is the same path with `GSO_TCPV6` (our tests write one).
/// - `csum`: a partial checksum (`NEEDS_CSUM`) is completed by the device or, where the
///   device cannot, by the kernel in software (checked with `tx off` on the egress veth).
/// - `uso`: `GSO_UDP_L4` written through `AF_PACKET` was not verified here, so UDP
///   super-frames are segmented by vmpls instead.
/// - `mpls_gso`: refused. A labelled super-frame marked GSO fails with `ENOMEM`
///   (`ENOBUFS` with `PACKET_QDISC_BYPASS`, `EINVAL` without `NEEDS_CSUM`): the kernel has
///   no MPLS GSO and veth is not `GSO_ROBUST`, so validating the frame fails. Labelled
///   frames must leave as single frames (`gso_type` none), which fit only a link with a
///   large MTU, or be segmented by vmpls.
pub fn af_packet_caps() -> PortCaps {
    PortCaps { tso4: true, tso6: true, uso: false, csum: true, mpls_gso: false }
}

/// What one received message turned out to be.
#[derive(Debug, PartialEq, Eq)]
enum RxVerdict {
    /// A frame of `len` bytes with its offload metadata.
    Frame { len: usize, offload: virtio_net::Repr },
    /// Larger than the buffer (`MSG_TRUNC`), or shorter than the virtio-net header.
    Truncated,
    /// A virtio-net header we cannot decode, or offsets outside the frame.
    BadHeader,
    /// A super-frame asking for segments smaller than [`gso::MIN_GSO_SIZE`].
    GsoSizeTooSmall,
    /// A frame this host sent (`PACKET_OUTGOING`).
    Outgoing,
}

/// Classifies message bytes `msg_len` (virtio-net header included), `msg_flags`,
/// `sll_pkttype` and the header as received.
fn classify(
    msg_len: usize,
    msg_flags: libc::c_int,
    pkttype: u8,
    hdr: &[u8; virtio_net::HEADER_LEN],
) -> RxVerdict {
    if pkttype == packet::PACKET_OUTGOING {
        return RxVerdict::Outgoing;
    }
    if msg_flags & libc::MSG_TRUNC != 0 || msg_len < virtio_net::HEADER_LEN {
        return RxVerdict::Truncated;
    }
    let len = msg_len - virtio_net::HEADER_LEN;
    match gso::received_offload(hdr, len) {
        Ok(offload) => RxVerdict::Frame { len, offload },
        Err(OffloadRefused::BadHeader) => RxVerdict::BadHeader,
        Err(OffloadRefused::GsoSizeTooSmall) => RxVerdict::GsoSizeTooSmall,
    }
}

/// Puts an 802.1Q tag the kernel took out back behind the MAC addresses (into the
/// packet's headroom), moving the offload offsets with the frame.
fn restore_vlan_tag(p: &mut Packet, (tpid, tci): mmsg::VlanTag) {
    const MACS: usize = 12;
    if p.len() < MACS || p.shift_head(MACS, 4).is_none() {
        return;
    }
    let f = p.frame_mut();
    f[MACS..MACS + 2].copy_from_slice(&tpid.to_be_bytes());
    f[MACS + 2..MACS + 4].copy_from_slice(&tci.to_be_bytes());
    p.offload.shift(4);
}

/// A port on a Linux Ethernet interface through `AF_PACKET`.
pub struct AfPacketPort {
    info: PortInfo,
    ifname: String,
    ifindex: u32,
    /// The interface's own MTU when the port was opened (`info.mtu` may be lower).
    interface_mtu: u32,
    fd: OwnedFd,
    batch: MmsgBatch,
    /// Buffers lent to the kernel during one `recvmmsg`; empty between calls.
    staging: Vec<Packet>,
    stats: PortStats,
    /// Frames the kernel dropped, summed over `PACKET_STATISTICS` reads (each read resets
    /// the kernel's count; `stats` reads through `&self`).
    kernel_dropped: Cell<u64>,
}

impl std::fmt::Debug for AfPacketPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfPacketPort")
            .field("info", &self.info)
            .field("ifname", &self.ifname)
            .field("ifindex", &self.ifindex)
            .field("fd", &self.fd.as_raw_fd())
            .finish()
    }
}

impl AfPacketPort {
    /// Opens a port with index `id` and configured `name` on interface `ifname` of the
    /// calling thread's network namespace (the socket stays in that namespace). The
    /// interface must exist, be up and carry Ethernet; `mtu_override`, if given, must not
    /// exceed the interface MTU.
    pub fn open(
        id: PortId,
        name: &str,
        ifname: &str,
        mtu_override: Option<u32>,
    ) -> Result<AfPacketPort, PortError> {
        let (fd, ifindex, details, mtu) = open_checked(ifname, mtu_override)?;
        let no_such = || PortError::NoSuchInterface { ifname: ifname.to_owned() };
        let io_err = |op: &'static str| {
            move |source: io::Error| PortError::Io { ifname: ifname.to_owned(), op, source }
        };

        let sock = fd.as_fd();
        // Must be set before the socket is bound (and before any ring).
        sockopt::set_int(sock, libc::SOL_PACKET, packet::PACKET_VNET_HDR, 1)
            .map_err(io_err("enable PACKET_VNET_HDR"))?;
        if let Err(e) = sockopt::set_int(sock, libc::SOL_PACKET, packet::PACKET_IGNORE_OUTGOING, 1) {
            // Kernels before 4.20: our own frames come back; recv_batch drops them by
            // sll_pkttype instead.
            tracing::warn!(ifname, error = %e, "PACKET_IGNORE_OUTGOING unavailable");
        }
        // The kernel takes the 802.1Q tag out of a received frame before packet sockets
        // see it; without the auxiliary data a frame of VLAN 100 would look untagged.
        sockopt::set_int(sock, libc::SOL_PACKET, packet::PACKET_AUXDATA, 1)
            .map_err(io_err("enable PACKET_AUXDATA"))?;
        // The socket was created with protocol 0, so it queued nothing so far; binding
        // with ETH_P_ALL to one ifindex starts reception from this interface only.
        packet::bind(sock, ifindex, packet::ETH_P_ALL).map_err(|source| {
            if source.raw_os_error() == Some(libc::ENODEV) {
                no_such()
            } else {
                io_err("bind the packet socket to the interface")(source)
            }
        })?;
        for (force, plain, what) in [
            (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, "receive"),
            (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, "send"),
        ] {
            if sockopt::set_int(sock, libc::SOL_SOCKET, force, SOCKET_BUFFER).is_err() {
                // Without CAP_NET_ADMIN: as much as net.core.[rw]mem_max allows.
                if let Err(e) = sockopt::set_int(sock, libc::SOL_SOCKET, plain, SOCKET_BUFFER) {
                    tracing::warn!(ifname, error = %e, "cannot enlarge the {what} buffer");
                }
            }
        }
        // All multicast, so IPv6 neighbour discovery reaches us on NICs that filter.
        packet::add_membership(sock, ifindex, packet::PACKET_MR_ALLMULTI)
            .map_err(io_err("join all-multicast (PACKET_MR_ALLMULTI)"))?;

        tracing::debug!(ifname, ifindex, mtu, "AF_PACKET port open");
        Ok(AfPacketPort {
            info: PortInfo { id, name: name.to_owned(), mac: details.mac, mtu, caps: af_packet_caps() },
            ifname: ifname.to_owned(),
            ifindex,
            interface_mtu: details.mtu,
            fd,
            batch: MmsgBatch::new(),
            staging: Vec::with_capacity(BATCH),
            stats: PortStats::default(),
            kernel_dropped: Cell::new(0),
        })
    }

    /// The Linux interface name.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// The Linux interface index (in the namespace the port was opened in).
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The index of the interface named `ifname` in the calling thread's network
    /// namespace now, `None` if there is none. A port whose interface was deleted keeps a
    /// socket the kernel has unbound (measured on 6.18: one `ENETDOWN` on receive, then
    /// `ENXIO` on every send, and nothing received ever again, even when an interface of
    /// the same name comes back); an index other than [`AfPacketPort::ifindex`] says the
    /// interface was deleted and created again, and the port must be opened anew.
    pub fn interface_index(ifname: &str) -> Option<u32> {
        vmpls_sys::if_nametoindex(ifname)
    }

    /// Whether the interface named `ifname` (in the calling thread's network namespace)
    /// is up with its carrier on (`IFF_UP` and `IFF_RUNNING`): frames sent to it now can
    /// leave. False also when there is no such interface or it cannot be asked.
    pub fn interface_running(ifname: &str) -> bool {
        let Some(name) = IfName::new(ifname) else { return false };
        // An unbound packet socket receives nothing; it is only asked about the interface.
        let Ok(fd) = packet::socket(true) else { return false };
        iface::details(fd.as_fd(), &name)
            .is_ok_and(|d| d.flags & libc::IFF_UP != 0 && d.flags & libc::IFF_RUNNING != 0)
    }

    /// The MTU of the interface named `ifname` (in the calling thread's network
    /// namespace) now; `None` when there is no such interface or it cannot be asked. The
    /// router follows it while it runs (an operator may lower or raise it).
    pub fn interface_mtu(ifname: &str) -> Option<u32> {
        let name = IfName::new(ifname)?;
        // An unbound packet socket receives nothing; it is only asked about the interface.
        let fd = packet::socket(true).ok()?;
        iface::details(fd.as_fd(), &name).ok().map(|d| d.mtu)
    }

    /// Puts the interface in promiscuous mode for as long as this socket is open (a
    /// `PACKET_MR_PROMISC` membership: the kernel counts it, and drops it with the
    /// socket, so nothing is left behind if the router dies). A pseudowire's attachment
    /// circuit needs it: it carries every frame the customer sends, whatever the
    /// destination MAC, and a NIC filters unicast for other addresses before any socket
    /// sees them.
    ///
    /// # Errors
    /// The kernel refused the membership.
    pub fn receive_every_frame(&mut self) -> Result<(), PortError> {
        packet::add_membership(self.fd.as_fd(), self.ifindex, packet::PACKET_MR_PROMISC).map_err(|source| {
            PortError::Io {
                ifname: self.ifname.clone(),
                op: "receive every frame for the attachment circuit (PACKET_MR_PROMISC)",
                source,
            }
        })
    }

    /// Makes this port, just opened on a re-created interface (with `previous.mtu` as
    /// the MTU, or none), stand in for `previous`: the port the router had on the interface's earlier
    /// incarnation. It takes `previous`'s id, name, MAC and MTU, so neither the pipeline
    /// nor the neighbours on the link have anything to learn again:
    /// - MTU: the interface must carry `previous.mtu` (else [`PortError::MtuTooLarge`],
    ///   the port is refused); a larger interface MTU is not adopted.
    /// - MAC: a re-created veth gets a new random address. The port keeps answering to
    ///   `previous.mac` (the neighbours learned it): the socket joins
    ///   `PACKET_MR_PROMISC`, so a NIC that filters unicast by address still passes the
    ///   frames (a veth passes them anyway), and the pipeline goes on filtering by
    ///   `previous.mac`.
    ///
    /// Returns the interface's own MAC and MTU, for the caller to report what it did not
    /// adopt.
    pub fn stand_in_for(&mut self, previous: &PortInfo) -> Result<([u8; 6], u32), PortError> {
        let own = (self.info.mac, self.interface_mtu);
        if previous.mtu > self.interface_mtu {
            return Err(PortError::MtuTooLarge {
                ifname: self.ifname.clone(),
                requested: previous.mtu,
                interface_mtu: self.interface_mtu,
            });
        }
        if previous.mac != self.info.mac {
            packet::add_membership(self.fd.as_fd(), self.ifindex, packet::PACKET_MR_PROMISC).map_err(
                |source| PortError::Io {
                    ifname: self.ifname.clone(),
                    op: "receive the frames for the port's earlier MAC (PACKET_MR_PROMISC)",
                    source,
                },
            )?;
        }
        self.info.id = previous.id;
        self.info.name.clone_from(&previous.name);
        self.info.mac = previous.mac;
        self.info.mtu = previous.mtu;
        Ok(own)
    }
}

/// The smallest MTU a port may be configured with (the IPv4 minimum, RFC 791).
pub const MIN_MTU: u32 = 68;

/// True for errors that say "nothing now", not "something is wrong".
fn is_transient(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted)
}

/// A packet socket for `ifname`, not yet configured or bound: the checks both AF_PACKET
/// ports make before they set their options. Returns the socket, the interface index,
/// its details (MAC among them) and the MTU to use (`mtu_override` checked against the
/// interface's).
pub(crate) fn open_checked(
    ifname: &str,
    mtu_override: Option<u32>,
) -> Result<(OwnedFd, u32, iface::IfDetails, u32), PortError> {
    let cname = IfName::new(ifname).ok_or_else(|| PortError::InvalidName { ifname: ifname.to_owned() })?;
    let no_such = || PortError::NoSuchInterface { ifname: ifname.to_owned() };
    let io_err =
        |op: &'static str| move |source: io::Error| PortError::Io { ifname: ifname.to_owned(), op, source };
    let ifindex = vmpls_sys::if_nametoindex(ifname).ok_or_else(no_such)?;

    let fd = packet::socket(true).map_err(|source| {
        if source.kind() == io::ErrorKind::PermissionDenied {
            PortError::PermissionDenied { ifname: ifname.to_owned(), source }
        } else {
            io_err("open a packet socket")(source)
        }
    })?;

    let details = iface::details(fd.as_fd(), &cname).map_err(|source| {
        if source.raw_os_error() == Some(libc::ENODEV) {
            no_such()
        } else {
            io_err("read the interface's flags, address and MTU")(source)
        }
    })?;
    let mtu = usable(ifname, &details, mtu_override)?;
    Ok((fd, ifindex, details, mtu))
}

/// Whether an interface with `details` can carry a port with `mtu_override`: up,
/// Ethernet, a configured MTU within its own. Returns the port's MTU.
pub(crate) fn usable(
    ifname: &str,
    details: &iface::IfDetails,
    mtu_override: Option<u32>,
) -> Result<u32, PortError> {
    if details.flags & libc::IFF_UP == 0 {
        return Err(PortError::InterfaceDown { ifname: ifname.to_owned() });
    }
    if details.hw_type != libc::ARPHRD_ETHER {
        return Err(PortError::NotEthernet { ifname: ifname.to_owned(), hw_type: details.hw_type });
    }
    let mtu = match mtu_override {
        Some(requested) if requested > details.mtu => {
            return Err(PortError::MtuTooLarge {
                ifname: ifname.to_owned(),
                requested,
                interface_mtu: details.mtu,
            });
        }
        Some(requested) if requested < MIN_MTU => {
            return Err(PortError::MtuTooSmall { ifname: ifname.to_owned(), requested });
        }
        Some(requested) => requested,
        None => details.mtu,
    };
    Ok(mtu)
}

/// Sends `pkts` on a packet socket with `sendmmsg`, batch after batch, counting into
/// `stats`; drains `pkts` into `pool` and returns how many the kernel took. A refused frame
/// is counted by errno and skipped, a full socket buffer drops the rest (the forwarding
/// thread never blocks), a device-wide error ends the batch. Shared by the AF_PACKET ports.
pub(crate) fn send_all(
    batch: &mut MmsgBatch,
    fd: std::os::fd::BorrowedFd<'_>,
    pkts: &mut Vec<Packet>,
    pool: &mut PacketPool,
    stats: &mut PortStats,
) -> usize {
    let total = pkts.len();
    let mut start = 0;
    let mut sent = 0;
    while start < total {
        let end = (start + BATCH).min(total);
        match batch.send(fd, &pkts[start..end]) {
            Ok(0) => {
                // sendmmsg reports an error rather than 0 for a non-empty batch; be safe
                // against looping forever all the same.
                stats.tx_dropped += (total - start) as u64;
                break;
            }
            Ok(k) => {
                for p in &pkts[start..start + k] {
                    stats.tx_bytes += p.len() as u64;
                }
                stats.tx_packets += k as u64;
                sent += k;
                start += k;
            }
            Err(e) => match e.raw_os_error() {
                Some(libc::EINTR) => {}
                Some(libc::EAGAIN) => {
                    stats.tx_dropped += (total - start) as u64;
                    break;
                }
                Some(errno) if is_device_error(errno) => {
                    for _ in start..total {
                        stats.tx_errors.record(errno);
                    }
                    break;
                }
                errno => {
                    // This frame was refused; the next ones may still go.
                    stats.tx_errors.record(errno.unwrap_or(0));
                    start += 1;
                }
            },
        }
    }
    pkts.drain(..).for_each(|p| pool.put(p));
    sent
}

/// Errors that concern the device, not the frame: every later frame would fail the same.
fn is_device_error(errno: i32) -> bool {
    matches!(errno, libc::ENETDOWN | libc::ENXIO | libc::ENODEV | libc::EBADF | libc::ENOTSOCK)
}

impl AsFd for AfPacketPort {
    /// The descriptor to poll for readability.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Port for AfPacketPort {
    fn info(&self) -> &PortInfo {
        &self.info
    }

    fn recv_batch(&mut self, pool: &mut PacketPool, out: &mut Vec<Packet>, max: usize) -> io::Result<usize> {
        let want = max.min(BATCH);
        if want == 0 {
            return Ok(0);
        }
        let n = want.min(pool.available());
        if n == 0 {
            // No buffer: read and drop what waits, so a level-triggered poll does not spin.
            return match self.batch.discard(self.fd.as_fd(), want) {
                Ok(k) => {
                    self.stats.rx_no_buffer += k as u64;
                    Ok(0)
                }
                Err(e) if is_transient(&e) => Ok(0),
                Err(e) => Err(e),
            };
        }
        self.staging.extend(std::iter::from_fn(|| pool.get()).take(n));
        let got = match self.batch.recv(self.fd.as_fd(), &mut self.staging) {
            Ok(k) => k,
            Err(e) => {
                self.staging.drain(..).for_each(|p| pool.put(p));
                return if is_transient(&e) { Ok(0) } else { Err(e) };
            }
        };
        let mut delivered = 0;
        for (i, mut p) in self.staging.drain(..).enumerate() {
            if i >= got {
                pool.put(p);
                continue;
            }
            let (msg_len, flags, pkttype, hdr) = self.batch.received(i);
            match classify(msg_len, flags, pkttype, hdr) {
                RxVerdict::Frame { len, offload } => {
                    p.set_received(len);
                    p.offload = offload;
                    if let Some(tag) = self.batch.received_vlan(i) {
                        // Back where it was on the wire: the pipeline decides what a tagged
                        // frame means (today: counted as `vlan_tagged`).
                        restore_vlan_tag(&mut p, tag);
                    }
                    p.port = self.info.id;
                    self.stats.rx_packets += 1;
                    self.stats.rx_bytes += len as u64;
                    out.push(p);
                    delivered += 1;
                }
                verdict => {
                    match verdict {
                        RxVerdict::Truncated => self.stats.rx_truncated += 1,
                        RxVerdict::BadHeader => self.stats.rx_bad_vnet_hdr += 1,
                        RxVerdict::GsoSizeTooSmall => self.stats.rx_gso_size_too_small += 1,
                        _ => self.stats.rx_outgoing += 1,
                    }
                    pool.put(p);
                }
            }
        }
        Ok(delivered)
    }

    fn send_batch(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) -> io::Result<usize> {
        Ok(send_all(&mut self.batch, self.fd.as_fd(), pkts, pool, &mut self.stats))
    }

    fn stats(&self) -> PortStats {
        if let Ok(n) = packet::drops(self.fd.as_fd()) {
            self.kernel_dropped.set(self.kernel_dropped.get() + n);
        }
        PortStats { rx_kernel_dropped: self.kernel_dropped.get(), ..self.stats }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmpls_testkit::Netns;

    // NEEDS_CSUM, TCPV4, hdr_len 66, gso_size 1448, csum_start 34, csum_offset 16: what a
    // veth delivers from a kernel TCP sender with TSO on (research/kernel-io.md).
    const TSO_HDR: [u8; 10] = [0x01, 0x01, 0x42, 0x00, 0xa8, 0x05, 0x22, 0x00, 0x10, 0x00];

    #[test]
    fn classify_accepts_a_kernel_tso_frame() {
        let v = classify(10 + 65226, 0, 0, &TSO_HDR);
        let RxVerdict::Frame { len, offload } = v else {
            panic!("{v:?}");
        };
        assert_eq!(len, 65226);
        assert_eq!(offload.gso_type, virtio_net::GsoType::TcpV4);
        assert!(offload.needs_csum);
        assert_eq!(offload.gso_size, 1448);
    }

    #[test]
    fn classify_drops_truncated_outgoing_and_bad_headers() {
        assert_eq!(classify(10 + 100, libc::MSG_TRUNC, 0, &TSO_HDR), RxVerdict::Truncated);
        assert_eq!(classify(4, 0, 0, &TSO_HDR), RxVerdict::Truncated);
        assert_eq!(classify(10 + 100, 0, packet::PACKET_OUTGOING, &TSO_HDR), RxVerdict::Outgoing);
        let mut unknown_gso = TSO_HDR;
        unknown_gso[1] = 2;
        assert_eq!(classify(10 + 100, 0, 0, &unknown_gso), RxVerdict::BadHeader);
        // The checksum field (34 + 16 .. +2) lies beyond a 40-byte frame.
        let mut hdr = [0u8; 10];
        hdr[0] = virtio_net::FLAG_NEEDS_CSUM;
        hdr[6] = 34;
        hdr[8] = 16;
        assert_eq!(classify(10 + 40, 0, 0, &hdr), RxVerdict::BadHeader);
        assert!(matches!(classify(10 + 52, 0, 0, &hdr), RxVerdict::Frame { len: 52, .. }));
    }

    #[test]
    fn classify_drops_a_super_frame_with_a_tiny_gso_size() {
        // A host behind a veth can write any header with PACKET_VNET_HDR; the kernel
        // passes gso_size 1 on.
        let mut tiny = TSO_HDR;
        tiny[4..6].copy_from_slice(&1u16.to_le_bytes());
        assert_eq!(classify(10 + 65226, 0, 0, &tiny), RxVerdict::GsoSizeTooSmall);
    }

    /// Receives on `port` until a frame of `ethertype` arrives or 2 s pass.
    fn receive(port: &mut AfPacketPort, pool: &mut PacketPool, ethertype: [u8; 2]) -> Option<Vec<u8>> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut got = Vec::new();
        while std::time::Instant::now() < deadline {
            vmpls_sys::wait_readable(&*port, std::time::Duration::from_millis(100));
            let _ = port.recv_batch(pool, &mut got, BATCH);
            let hit = got.iter().position(|p| p.frame().get(12..14) == Some(&ethertype[..]));
            let frame = hit.map(|i| got[i].frame().to_vec());
            got.drain(..).for_each(|p| pool.put(p));
            if frame.is_some() {
                return frame;
            }
        }
        None
    }

    #[test]
    fn a_port_reopened_on_a_recreated_interface_keeps_its_mac_and_mtu() {
        const OLD_MAC: [u8; 6] = [2, 0, 0, 0xaf, 0, 1];
        let ns = Netns::without_ipv6("reopen");
        ns.veth(("fa", "02:00:00:af:00:01"), ("fb", "02:00:00:af:00:02"), 1500);
        let mut pool = PacketPool::new(4 * BATCH);
        let ethertype = [0x88, 0xb5];
        let mut frame = vec![0u8; 60];
        frame[..6].copy_from_slice(&OLD_MAC);
        frame[6..12].copy_from_slice(&[2, 0, 0, 0xaf, 0, 0x12]);
        frame[12..14].copy_from_slice(&ethertype);

        let old = ns.run(|| AfPacketPort::open(3, "core", "fa", None).expect("open fa"));
        assert_eq!((old.info().mac, old.info().mtu), (OLD_MAC, 1500));
        let (old_index, old_info) = (old.ifindex(), old.info().clone());
        ns.run(|| assert_eq!(AfPacketPort::interface_index("fa"), Some(old_index)));

        // Deleted: the socket reports ENETDOWN once, then the name is gone.
        ns.ip(&["link", "del", "fa"]);
        let mut old = old;
        let mut out = Vec::new();
        let e = old.recv_batch(&mut pool, &mut out, BATCH).expect_err("an error on the unbound socket");
        assert_eq!(e.raw_os_error(), Some(libc::ENETDOWN), "{e}");
        // Frames queued before the deletion (the kernel's own IPv6 chatter when the link
        // came up) may still be read; the error does not come again.
        for _ in 0..8 {
            match old.recv_batch(&mut pool, &mut out, BATCH) {
                Ok(0) => break,
                Ok(_) => out.drain(..).for_each(|p| pool.put(p)),
                Err(e) => panic!("the error is reported once, then: {e}"),
            }
        }
        assert!(
            matches!(old.recv_batch(&mut pool, &mut out, BATCH), Ok(0)),
            "nothing more on the unbound socket"
        );
        ns.run(|| assert_eq!(AfPacketPort::interface_index("fa"), None));

        // Back with new MACs and a smaller MTU: refused.
        ns.veth(("fa", "02:00:00:af:00:11"), ("fb", "02:00:00:af:00:12"), 1400);
        let (mut new, refused) = ns.run(|| {
            let mut p = AfPacketPort::open(9, "x", "fa", None).expect("open the new fa");
            let r = p.stand_in_for(&old_info);
            (p, r)
        });
        assert!(
            matches!(refused, Err(PortError::MtuTooLarge { requested: 1500, interface_mtu: 1400, .. })),
            "{refused:?}"
        );
        // With room for the old MTU: taken, under the old identity.
        ns.ip(&["link", "set", "fa", "mtu", "9000"]);
        ns.ip(&["link", "set", "fb", "mtu", "9000"]);
        let (mut peer, own) = ns.run(|| {
            new = AfPacketPort::open(9, "x", "fa", None).expect("open the new fa");
            assert_ne!(AfPacketPort::interface_index("fa"), Some(old_index), "a new index");
            let own = new.stand_in_for(&old_info).expect("stand in");
            (AfPacketPort::open(0, "peer", "fb", None).expect("open fb"), own)
        });
        assert_eq!(own, ([2, 0, 0, 0xaf, 0, 0x11], 9000));
        assert_eq!((new.info().id, new.info().name.as_str()), (3, "core"));
        assert_eq!((new.info().mac, new.info().mtu), (OLD_MAC, 1500));
        // The interface passes frames for the old MAC (a NIC would filter them otherwise).
        let link = std::process::Command::new("ip")
            .args(["-n", ns.name(), "-d", "-o", "link", "show", "fa"])
            .output();
        let link = String::from_utf8_lossy(&link.expect("ip link show").stdout).into_owned();
        assert!(link.contains("promiscuity 1 "), "{link}");
        // A frame to the old MAC reaches the new socket.
        let mut tx = vec![Packet::from_frame(0, &frame)];
        assert_eq!(peer.send_batch(&mut tx, &mut pool).unwrap(), 1);
        let got = receive(&mut new, &mut pool, ethertype).expect("the frame to the old MAC arrives");
        assert_eq!(got, frame);
    }

    #[test]
    fn frames_the_kernel_drops_for_a_full_receive_queue_are_counted() {
        let ns = Netns::without_ipv6("kdrop");
        ns.veth(("fa", "02:00:00:af:01:01"), ("fb", "02:00:00:af:01:02"), 65535);
        let (mut sender, receiver) = ns.run(|| {
            let r = AfPacketPort::open(1, "slow", "fb", None).expect("open fb");
            (AfPacketPort::open(0, "fast", "fa", None).expect("open fa"), r)
        });
        let mut pool = PacketPool::new(4 * BATCH);
        let mut frame = vec![0u8; 60_000];
        frame[..6].copy_from_slice(&[2, 0, 0, 0xaf, 1, 2]);
        frame[6..12].copy_from_slice(&[2, 0, 0, 0xaf, 1, 1]);
        frame[12..14].copy_from_slice(&[0x88, 0xb5]);
        // Far more than the receiver's socket buffer holds, and it never reads.
        let mut sent = 0;
        for _ in 0..40 {
            let mut batch: Vec<Packet> = (0..BATCH).map(|_| Packet::from_frame(0, &frame)).collect();
            sent += sender.send_batch(&mut batch, &mut pool).unwrap();
        }
        assert!(sent > 2000, "only {sent} frames sent");
        let s = receiver.stats();
        assert!(s.rx_kernel_dropped > 0, "{s:?}");
        assert!(s.rx_kernel_dropped < sent as u64 && s.rx_dropped() >= s.rx_kernel_dropped, "{s:?}");
        // The kernel's count is reset on read; ours accumulates.
        assert_eq!(receiver.stats().rx_kernel_dropped, s.rx_kernel_dropped);
    }

    #[test]
    fn a_vlan_tag_goes_back_behind_the_macs() {
        let mut frame = vec![0u8; 60];
        frame[..12].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        frame[12..14].copy_from_slice(&[0x08, 0x00]);
        let mut p = Packet::from_frame(0, &frame);
        p.offload.needs_csum = true;
        p.offload.csum_start = 34;
        restore_vlan_tag(&mut p, (0x8100, 0x2064));
        assert_eq!(p.len(), 64);
        assert_eq!(
            &p.frame()[..18],
            &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x81, 0x00, 0x20, 0x64, 0x08, 0x00]
        );
        assert_eq!(p.offload.csum_start, 38);
    }

    #[test]
    fn tagged_frames_keep_their_tag_through_the_port() {
        let ns = Netns::without_ipv6("vlan");
        ns.veth(("fa", "02:00:00:af:02:01"), ("fb", "02:00:00:af:02:02"), 1500);
        let (mut sender, mut receiver) = ns.run(|| {
            let r = AfPacketPort::open(1, "rx", "fb", None).expect("open fb");
            (AfPacketPort::open(0, "tx", "fa", None).expect("open fa"), r)
        });
        let mut pool = PacketPool::new(4 * BATCH);
        let mut frame = vec![0u8; 64];
        frame[..6].copy_from_slice(&[2, 0, 0, 0xaf, 2, 2]);
        frame[6..12].copy_from_slice(&[2, 0, 0, 0xaf, 2, 1]);
        frame[12..16].copy_from_slice(&[0x81, 0x00, 0x00, 100]);
        frame[16..18].copy_from_slice(&[0x88, 0xb5]);
        // A veth just created may still drop a frame while its carrier comes up (seen
        // under load): send again until one arrives, a bounded number of times.
        let got = (0..5)
            .find_map(|_| {
                let mut tx = vec![Packet::from_frame(0, &frame)];
                assert_eq!(sender.send_batch(&mut tx, &mut pool).unwrap(), 1);
                receive(&mut receiver, &mut pool, [0x81, 0x00])
            })
            .expect("the tagged frame, tag and all");
        assert_eq!(got, frame);
    }

    #[test]
    fn caps_refuse_mpls_gso_and_take_ip_tso() {
        let c = af_packet_caps();
        assert!(c.tso4 && c.tso6 && c.csum);
        assert!(!c.mpls_gso && !c.uso);
    }
}
