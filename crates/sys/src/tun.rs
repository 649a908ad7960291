//! TUN/TAP devices (`/dev/net/tun`): create or attach, virtio-net header size, offloads,
//! and one frame a `readv`/`writev` as `[header][frame]`. What this kernel takes on a
//! TAP is in research/kernel-io.md (question 4).

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use rustix::fs::{Mode, OFlags};

use crate::iface::{IfName, ioctl_ifreq};

// From <linux/if_tun.h>, defined here so we do not depend on which libc exports them.
/// `TUNSETIFF`: `_IOW('T', 202, int)`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
/// `TUNSETOFFLOAD`: `_IOW('T', 208, unsigned int)`.
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
/// `TUNSETVNETHDRSZ`: `_IOW('T', 216, int)`.
const TUNSETVNETHDRSZ: libc::c_ulong = 0x4004_54d8;
/// A TAP (Ethernet) device, not TUN (IP).
pub const IFF_TAP: libc::c_short = 0x0002;
/// No packet-information prefix.
pub const IFF_NO_PI: libc::c_short = 0x1000;
/// Frames carry a virtio-net header.
pub const IFF_VNET_HDR: libc::c_short = 0x4000;
/// The reader takes partial checksums.
pub const TUN_F_CSUM: libc::c_uint = 0x01;
/// The reader takes IPv4 TCP super-frames.
pub const TUN_F_TSO4: libc::c_uint = 0x02;
/// The reader takes IPv6 TCP super-frames.
pub const TUN_F_TSO6: libc::c_uint = 0x04;

/// Opens `/dev/net/tun`, non-blocking and close-on-exec, not yet attached to a device.
pub fn open() -> io::Result<OwnedFd> {
    Ok(rustix::fs::open("/dev/net/tun", OFlags::RDWR | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty())?)
}

/// Attaches the tun descriptor to the device `name` (creating it) with `flags`
/// (`IFF_TAP | IFF_NO_PI | ...`): `TUNSETIFF`.
pub fn set_iff(fd: impl AsFd, name: &IfName, flags: libc::c_short) -> io::Result<()> {
    let mut ifr = name.ifreq_pub();
    ifr.ifr_ifru.ifru_flags = flags;
    ioctl_ifreq(fd.as_fd(), TUNSETIFF, &mut ifr)
}

/// Sets the virtio-net header size (`TUNSETVNETHDRSZ`).
pub fn set_vnet_hdr_size(fd: impl AsFd, size: libc::c_int) -> io::Result<()> {
    // SAFETY: TUNSETVNETHDRSZ reads one int through the pointer, which points at `size`,
    // live for the call.
    let r = unsafe { libc::ioctl(fd.as_fd().as_raw_fd(), TUNSETVNETHDRSZ as _, &raw const size) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Sets the offloads the reader takes (`TUNSETOFFLOAD`, `TUN_F_*`).
pub fn set_offload(fd: impl AsFd, flags: libc::c_uint) -> io::Result<()> {
    // SAFETY: TUNSETOFFLOAD takes its argument by value (an unsigned long); no memory is
    // passed.
    let r = unsafe { libc::ioctl(fd.as_fd().as_raw_fd(), TUNSETOFFLOAD as _, flags as libc::c_ulong) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Reads one frame: the virtio-net header into `hdr`, the frame into `frame`. Returns the
/// bytes read, header included.
pub fn readv(fd: impl AsFd, hdr: &mut [u8], frame: &mut [u8]) -> io::Result<usize> {
    Ok(rustix::io::readv(fd, &mut [IoSliceMut::new(hdr), IoSliceMut::new(frame)])?)
}

/// Writes one frame: `hdr` then `frame`, in one `writev`. Returns the bytes written.
pub fn writev(fd: impl AsFd, hdr: &[u8], frame: &[u8]) -> io::Result<usize> {
    Ok(rustix::io::writev(fd, &[IoSlice::new(hdr), IoSlice::new(frame)])?)
}
