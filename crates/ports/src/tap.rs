//! A port on a TAP device that vmpls creates (`/dev/net/tun` with
//! `IFF_TAP | IFF_NO_PI | IFF_VNET_HDR`): the Linux stack of the router's network namespace
//! (or a container, or anything else attached to the TAP) is the other end.
//!
//! Every frame is read and written as `[virtio-net header][Ethernet frame]`, one `readv` or
//! `writev` per frame. With `TUNSETOFFLOAD(TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6)` the
//! kernel hands us its TSO super-frames whole with partial checksums, and takes ours the
//! same way (research/kernel-io.md, question 4).
//!
//! The TAP's own MAC address belongs to the kernel side; the port uses a different one
//! (the TAP's with the lowest bit of the last byte flipped, unless configured), the way
//! QEMU gives its guest a MAC of its own on a TAP.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use vmpls_dataplane::gso::{self, OffloadRefused};
use vmpls_dataplane::{Packet, PacketPool, PortCaps, PortId, PortInfo};
use vmpls_sys::iface::{self, IfName};
use vmpls_sys::tun;
use vmpls_wire::virtio_net;

use crate::{MIN_MTU, Port, PortError, PortStats};

/// What a TAP port accepts at output:
/// - `tso4`, `tso6`, `csum`: the kernel takes IPv4/IPv6 TCP super-frames with a partial
///   checksum written into the TAP (it segments them where it has to, e.g. when it
///   forwards them out of a NIC); measured in research/kernel-io.md, question 4.
/// - `uso`: UDP GSO writes were not verified, so UDP super-frames are segmented by vmpls.
/// - `mpls_gso`: false unless the caller knows the TAP's reader takes labelled
///   super-frames. A packet socket reading the TAP does (the "tap pipe" between two
///   routers, kernel-io.md question 3B); the kernel's own stack has no MPLS GSO to take
///   them with. See [`TapOptions::mpls_gso`].
pub fn tap_caps(mpls_gso: bool) -> PortCaps {
    PortCaps { tso4: true, tso6: true, uso: false, csum: true, mpls_gso }
}

/// How to open a TAP port.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TapOptions {
    /// The MTU to give the TAP interface (and the port). `None`: keep the interface's
    /// (1500 for a new TAP).
    pub mtu: Option<u32>,
    /// The port's own MAC address (source of the frames it writes). `None`: the TAP's MAC
    /// with the lowest bit of the last byte flipped.
    pub mac: Option<[u8; 6]>,
    /// Declare that labelled super-frames may be written whole (see [`tap_caps`]). Only
    /// true where the TAP's reader is known to take them, e.g. another router's packet
    /// socket on this TAP.
    pub mpls_gso: bool,
}

/// The largest MTU the kernel lets a TAP have (`65535` minus the Ethernet header).
pub const TAP_MAX_MTU: u32 = 65535 - 14;

/// Offload flags for `TUNSETOFFLOAD`: checksum, TSO over IPv4 and IPv6.
const OFFLOADS: libc::c_uint = tun::TUN_F_CSUM | tun::TUN_F_TSO4 | tun::TUN_F_TSO6;

/// A port on a TAP device.
pub struct TapPort {
    info: PortInfo,
    ifname: String,
    fd: OwnedFd,
    hdr: [u8; virtio_net::HEADER_LEN],
    stats: PortStats,
}

impl std::fmt::Debug for TapPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TapPort")
            .field("info", &self.info)
            .field("ifname", &self.ifname)
            .field("fd", &self.fd.as_raw_fd())
            .finish()
    }
}

/// What one `readv` turned out to be.
#[derive(Debug, PartialEq, Eq)]
enum RxVerdict {
    /// A frame of `len` bytes with its offload metadata.
    Frame { len: usize, offload: virtio_net::Repr },
    /// Shorter than the virtio-net header plus an Ethernet header, or filling the whole
    /// buffer (a larger frame would have been cut).
    Truncated,
    /// A virtio-net header we cannot decode, or offsets outside the frame.
    BadHeader,
    /// A super-frame asking for segments smaller than [`gso::MIN_GSO_SIZE`].
    GsoSizeTooSmall,
}

/// Classifies a read of `n` bytes (header included) into a frame area of `area` bytes.
fn classify(n: usize, area: usize, hdr: &[u8; virtio_net::HEADER_LEN]) -> RxVerdict {
    if n < virtio_net::HEADER_LEN + 14 || n - virtio_net::HEADER_LEN > area {
        return RxVerdict::Truncated;
    }
    let len = n - virtio_net::HEADER_LEN;
    match gso::received_offload(hdr, len) {
        Ok(offload) => RxVerdict::Frame { len, offload },
        Err(OffloadRefused::BadHeader) => RxVerdict::BadHeader,
        Err(OffloadRefused::GsoSizeTooSmall) => RxVerdict::GsoSizeTooSmall,
    }
}

/// The port's MAC when none is configured: the TAP's, with the lowest bit of the last byte
/// flipped, kept unicast.
fn derived_mac(tap_mac: [u8; 6]) -> [u8; 6] {
    let mut mac = tap_mac;
    mac[0] &= !0x01;
    mac[5] ^= 0x01;
    mac
}

impl TapPort {
    /// Creates (or attaches to an existing persistent) TAP device `ifname` in the calling
    /// thread's network namespace, with virtio-net headers and checksum/TSO offloads, sets
    /// its MTU if `opts.mtu` says so and brings it up. The device lives as long as the
    /// port unless it was made persistent (`ip tuntap add`) beforehand.
    pub fn create(id: PortId, name: &str, ifname: &str, opts: &TapOptions) -> Result<TapPort, PortError> {
        let cname =
            IfName::new(ifname).ok_or_else(|| PortError::InvalidName { ifname: ifname.to_owned() })?;
        let io_err = |op: &'static str| {
            move |source: io::Error| PortError::Io { ifname: ifname.to_owned(), op, source }
        };
        if let Some(requested) = opts.mtu
            && requested < MIN_MTU
        {
            return Err(PortError::MtuTooSmall { ifname: ifname.to_owned(), requested });
        }
        let fd = tun::open().map_err(|source| match source.kind() {
            io::ErrorKind::PermissionDenied => {
                PortError::PermissionDenied { ifname: ifname.to_owned(), source }
            }
            _ => io_err("open /dev/net/tun (is the tun module loaded?)")(source),
        })?;
        let flags = tun::IFF_TAP | tun::IFF_NO_PI | tun::IFF_VNET_HDR;
        tun::set_iff(fd.as_fd(), &cname, flags).map_err(|source| match source.raw_os_error() {
            Some(libc::EPERM) => PortError::PermissionDenied { ifname: ifname.to_owned(), source },
            _ => io_err("create the TAP device (TUNSETIFF; is a non-TAP device of that name in the way?)")(
                source,
            ),
        })?;
        tun::set_vnet_hdr_size(fd.as_fd(), virtio_net::HEADER_LEN as libc::c_int)
            .map_err(io_err("set the virtio-net header size (TUNSETVNETHDRSZ)"))?;
        tun::set_offload(fd.as_fd(), OFFLOADS)
            .map_err(io_err("enable checksum and TSO offloads (TUNSETOFFLOAD)"))?;

        let ctl = vmpls_sys::control_socket().map_err(io_err("open a control socket"))?;
        if let Some(mtu) = opts.mtu {
            iface::set_mtu(&ctl, &cname, mtu).map_err(|source| {
                if source.raw_os_error() == Some(libc::EINVAL) {
                    PortError::MtuTooLarge {
                        ifname: ifname.to_owned(),
                        requested: mtu,
                        interface_mtu: TAP_MAX_MTU,
                    }
                } else {
                    io_err("set the TAP's MTU")(source)
                }
            })?;
        }
        iface::set_up(&ctl, &cname).map_err(io_err("bring the TAP up"))?;
        let details = iface::details(&ctl, &cname).map_err(io_err("read the TAP's address and MTU"))?;

        tracing::debug!(ifname, mtu = details.mtu, "TAP port open");
        Ok(TapPort {
            info: PortInfo {
                id,
                name: name.to_owned(),
                mac: opts.mac.unwrap_or_else(|| derived_mac(details.mac)),
                mtu: details.mtu,
                caps: tap_caps(opts.mpls_gso),
            },
            ifname: ifname.to_owned(),
            fd,
            hdr: [0; virtio_net::HEADER_LEN],
            stats: PortStats::default(),
        })
    }

    /// The TAP interface's name.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }
}

/// True for errors that say "nothing now", not "something is wrong".
fn is_transient(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted)
}

impl AsFd for TapPort {
    /// The descriptor to poll for readability.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Port for TapPort {
    fn info(&self) -> &PortInfo {
        &self.info
    }

    fn recv_batch(&mut self, pool: &mut PacketPool, out: &mut Vec<Packet>, max: usize) -> io::Result<usize> {
        let mut delivered = 0;
        for _ in 0..max.min(crate::BATCH) {
            let Some(mut p) = pool.get() else {
                // No buffer: read and drop one frame, so a level-triggered poll does not
                // spin.
                match tun::readv(self.fd.as_fd(), &mut self.hdr, &mut []) {
                    Ok(_) => self.stats.rx_no_buffer += 1,
                    Err(e) if is_transient(&e) => break,
                    Err(e) => return Err(e),
                }
                continue;
            };
            let area = p.receive_area();
            let area_len = area.len();
            let n = match tun::readv(self.fd.as_fd(), &mut self.hdr, area) {
                Ok(n) => n,
                Err(e) => {
                    pool.put(p);
                    if is_transient(&e) {
                        break;
                    }
                    return Err(e);
                }
            };
            match classify(n, area_len, &self.hdr) {
                RxVerdict::Frame { len, offload } => {
                    p.set_received(len);
                    p.offload = offload;
                    p.port = self.info.id;
                    self.stats.rx_packets += 1;
                    self.stats.rx_bytes += len as u64;
                    out.push(p);
                    delivered += 1;
                }
                RxVerdict::Truncated => {
                    self.stats.rx_truncated += 1;
                    pool.put(p);
                }
                RxVerdict::BadHeader => {
                    self.stats.rx_bad_vnet_hdr += 1;
                    pool.put(p);
                }
                RxVerdict::GsoSizeTooSmall => {
                    self.stats.rx_gso_size_too_small += 1;
                    pool.put(p);
                }
            }
        }
        Ok(delivered)
    }

    fn send_batch(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) -> io::Result<usize> {
        let mut sent = 0;
        let mut pending = pkts.drain(..);
        for p in pending.by_ref() {
            p.offload.emit(&mut virtio_net::Header::new_unchecked(&mut self.hdr[..]));
            let result = loop {
                match tun::writev(self.fd.as_fd(), &self.hdr, p.frame()) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    r => break r,
                }
            };
            match result {
                Ok(_) => {
                    self.stats.tx_packets += 1;
                    self.stats.tx_bytes += p.len() as u64;
                    sent += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.stats.tx_dropped += 1,
                // EIO: the TAP is down; EINVAL: a header the kernel refuses. Counted; the
                // next frame may still go.
                Err(e) => self.stats.tx_errors.record(e.raw_os_error().unwrap_or(0)),
            }
            pool.put(p);
        }
        drop(pending);
        Ok(sent)
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // NEEDS_CSUM, TCPV4, hdr_len 66, gso_size 1448, csum_start 34, csum_offset 16.
    const TSO_HDR: [u8; 10] = [0x01, 0x01, 0x42, 0x00, 0xa8, 0x05, 0x22, 0x00, 0x10, 0x00];

    #[test]
    fn classify_accepts_a_tso_frame_and_rejects_short_cut_or_bad_ones() {
        let v = classify(10 + 65226, 66048, &TSO_HDR);
        assert!(matches!(v, RxVerdict::Frame { len: 65226, offload } if offload.gso_size == 1448), "{v:?}");
        assert_eq!(classify(10 + 13, 66048, &TSO_HDR), RxVerdict::Truncated);
        assert_eq!(classify(10 + 2000, 1500, &TSO_HDR), RxVerdict::Truncated);
        let mut bad = TSO_HDR;
        bad[1] = 2; // no such GSO type
        assert_eq!(classify(10 + 100, 66048, &bad), RxVerdict::BadHeader);
        // hdr_len 66 beyond a 60-byte frame.
        assert_eq!(classify(10 + 60, 66048, &TSO_HDR), RxVerdict::BadHeader);
        let mut tiny = TSO_HDR;
        tiny[4..6].copy_from_slice(&1u16.to_le_bytes());
        assert_eq!(classify(10 + 65226, 66048, &tiny), RxVerdict::GsoSizeTooSmall);
    }

    #[test]
    fn derived_mac_differs_from_the_tap_and_stays_unicast() {
        let tap = [0x03, 0x11, 0x22, 0x33, 0x44, 0x55];
        let mac = derived_mac(tap);
        assert_ne!(mac[5], tap[5]);
        assert_eq!(mac[0] & 1, 0);
        assert_eq!(mac[1..5], tap[1..5]);
    }

    #[test]
    fn caps_take_ip_tso_and_mpls_gso_only_when_asked() {
        assert!(!tap_caps(false).mpls_gso);
        assert!(tap_caps(true).mpls_gso);
        let c = tap_caps(false);
        assert!(c.tso4 && c.tso6 && c.csum && !c.uso);
    }
}
