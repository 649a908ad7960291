//! A port on a Linux Ethernet interface (veth, NIC) through an `AF_PACKET` socket with
//! `PACKET_VNET_HDR`, so TSO super-frames come in and go out whole with their offload
//! metadata. Frames move in batches of up to [`BATCH`] with `recvmmsg`/`sendmmsg`, into
//! and out of [`Packet`] buffers, with no allocation per packet.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use vmpls_dataplane::{Packet, PacketPool, PortCaps, PortId, PortInfo};
use vmpls_wire::virtio_net;

use crate::sys::{self, BATCH, MmsgBatch};
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
    if pkttype == sys::PACKET_OUTGOING {
        return RxVerdict::Outgoing;
    }
    if msg_flags & libc::MSG_TRUNC != 0 || msg_len < virtio_net::HEADER_LEN {
        return RxVerdict::Truncated;
    }
    let len = msg_len - virtio_net::HEADER_LEN;
    let Ok(offload) = virtio_net::Repr::parse(&virtio_net::Header::new_unchecked(&hdr[..])) else {
        return RxVerdict::BadHeader;
    };
    let csum_end = offload.csum_start as usize + offload.csum_offset as usize + 2;
    if (offload.needs_csum && csum_end > len) || offload.hdr_len as usize > len {
        return RxVerdict::BadHeader;
    }
    RxVerdict::Frame { len, offload }
}

/// A port on a Linux Ethernet interface through `AF_PACKET`.
pub struct AfPacketPort {
    info: PortInfo,
    ifname: String,
    ifindex: u32,
    fd: OwnedFd,
    batch: MmsgBatch,
    /// Buffers lent to the kernel during one `recvmmsg`; empty between calls.
    staging: Vec<Packet>,
    stats: PortStats,
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
        sys::set_int(sock, libc::SOL_PACKET, sys::PACKET_VNET_HDR, 1)
            .map_err(io_err("enable PACKET_VNET_HDR"))?;
        if let Err(e) = sys::set_int(sock, libc::SOL_PACKET, sys::PACKET_IGNORE_OUTGOING, 1) {
            // Kernels before 4.20: our own frames come back; recv_batch drops them by
            // sll_pkttype instead.
            tracing::warn!(ifname, error = %e, "PACKET_IGNORE_OUTGOING unavailable");
        }
        // The socket was created with protocol 0, so it queued nothing so far; binding
        // with ETH_P_ALL to one ifindex starts reception from this interface only.
        sys::bind_to_ifindex(sock, ifindex).map_err(|source| {
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
            if sys::set_int(sock, libc::SOL_SOCKET, force, SOCKET_BUFFER).is_err() {
                // Without CAP_NET_ADMIN: as much as net.core.[rw]mem_max allows.
                if let Err(e) = sys::set_int(sock, libc::SOL_SOCKET, plain, SOCKET_BUFFER) {
                    tracing::warn!(ifname, error = %e, "cannot enlarge the {what} buffer");
                }
            }
        }
        // All multicast, so IPv6 neighbour discovery reaches us on NICs that filter.
        sys::add_membership(sock, ifindex, sys::PACKET_MR_ALLMULTI)
            .map_err(io_err("join all-multicast (PACKET_MR_ALLMULTI)"))?;

        tracing::debug!(ifname, ifindex, mtu, "AF_PACKET port open");
        Ok(AfPacketPort {
            info: PortInfo { id, name: name.to_owned(), mac: details.mac, mtu, caps: af_packet_caps() },
            ifname: ifname.to_owned(),
            ifindex,
            fd,
            batch: MmsgBatch::new(),
            staging: Vec::with_capacity(BATCH),
            stats: PortStats::default(),
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
}

/// The smallest MTU a port may be configured with (the IPv4 minimum, RFC 791).
pub const MIN_MTU: u32 = 68;

/// True for errors that say "nothing now", not "something is wrong".
fn is_transient(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted)
}

/// Errors that concern the device, not the frame: every later frame would fail the same.
/// A packet socket for `ifname`, not yet configured or bound: the checks both AF_PACKET
/// ports make before they set their options. Returns the socket, the interface index,
/// its details (MAC among them) and the MTU to use (`mtu_override` checked against the
/// interface's).
pub(crate) fn open_checked(
    ifname: &str,
    mtu_override: Option<u32>,
) -> Result<(OwnedFd, u32, sys::IfDetails, u32), PortError> {
    let cname =
        sys::ifname_cstring(ifname).ok_or_else(|| PortError::InvalidName { ifname: ifname.to_owned() })?;
    let no_such = || PortError::NoSuchInterface { ifname: ifname.to_owned() };
    let io_err =
        |op: &'static str| move |source: io::Error| PortError::Io { ifname: ifname.to_owned(), op, source };
    let ifindex = sys::if_nametoindex(ifname).ok_or_else(no_such)?;

    let fd = sys::packet_socket().map_err(|source| {
        if source.kind() == io::ErrorKind::PermissionDenied {
            PortError::PermissionDenied { ifname: ifname.to_owned(), source }
        } else {
            io_err("open a packet socket")(source)
        }
    })?;

    let details = sys::if_details(fd.as_fd(), &cname).map_err(|source| {
        if source.raw_os_error() == Some(libc::ENODEV) {
            no_such()
        } else {
            io_err("read the interface's flags, address and MTU")(source)
        }
    })?;
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
    Ok((fd, ifindex, details, mtu))
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

fn is_device_error(errno: i32) -> bool {
    matches!(errno, libc::ENETDOWN | libc::ENXIO | libc::ENODEV | libc::EBADF | libc::ENOTSOCK)
}

impl Port for AfPacketPort {
    fn info(&self) -> &PortInfo {
        &self.info
    }

    fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
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
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(classify(10 + 100, 0, sys::PACKET_OUTGOING, &TSO_HDR), RxVerdict::Outgoing);
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
    fn caps_refuse_mpls_gso_and_take_ip_tso() {
        let c = af_packet_caps();
        assert!(c.tso4 && c.tso6 && c.csum);
        assert!(!c.mpls_gso && !c.uso);
    }
}
