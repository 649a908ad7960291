//! Network interfaces: names, indexes, and what the `SIOC*IF*` and `SIOCETHTOOL` ioctls
//! read and set. Every call acts in the calling thread's network namespace (or, for the
//! functions that take a socket, in the namespace that socket was opened in).

use std::ffi::CString;
use std::io;
use std::mem;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use rustix::net::{AddressFamily, SocketFlags, SocketType};

/// A valid Linux interface name: 1 to 15 bytes, no NUL, no `/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IfName(CString);

impl IfName {
    /// `name` if the kernel could take it as an interface name.
    pub fn new(name: &str) -> Option<IfName> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('/') {
            return None;
        }
        CString::new(name).ok().map(IfName)
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        // Built from a `&str` in `new`.
        self.0.to_str().unwrap_or_default()
    }

    /// An `ifreq` with this name and a zeroed union.
    pub(crate) fn ifreq_pub(&self) -> libc::ifreq {
        self.ifreq()
    }

    fn ifreq(&self) -> libc::ifreq {
        // SAFETY: ifreq is plain data (a name and a union of plain data); zeroes are valid.
        let mut ifr: libc::ifreq = unsafe { mem::zeroed() };
        // The name is shorter than IFNAMSIZ, so the last byte stays NUL.
        for (dst, src) in ifr.ifr_name.iter_mut().zip(self.0.as_bytes()) {
            *dst = *src as libc::c_char;
        }
        ifr
    }
}

impl std::fmt::Display for IfName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A datagram socket for the interface ioctls: any socket answers them, and this one
/// needs no privilege. Close-on-exec.
pub fn control_socket() -> io::Result<OwnedFd> {
    Ok(rustix::net::socket_with(AddressFamily::INET, SocketType::DGRAM, SocketFlags::CLOEXEC, None)?)
}

/// The index of interface `name` in the calling thread's network namespace; `None` if
/// the name is invalid or no such interface exists.
pub fn if_nametoindex(name: &str) -> Option<u32> {
    IfName::new(name)?;
    let ctl = control_socket().ok()?;
    rustix::net::netdevice::name_to_index(&ctl, name).ok().filter(|&i| i != 0)
}

/// The name of the interface with index `index` in the calling thread's network
/// namespace; `None` if there is none.
pub fn if_indextoname(index: u32) -> Option<String> {
    let ctl = control_socket().ok()?;
    rustix::net::netdevice::index_to_name(&ctl, index).ok()
}

/// `ioctl(fd, req, &mut ifr)` for requests that read and write only inside `ifr`.
pub(crate) fn ioctl_ifreq(fd: BorrowedFd<'_>, req: libc::c_ulong, ifr: &mut libc::ifreq) -> io::Result<()> {
    // SAFETY: `ifr` is a live, NUL-terminated ifreq; every request passed here by this
    // crate (TUNSETIFF, SIOC[GS]IFFLAGS, SIOCGIFHWADDR, SIOC[GS]IFMTU) reads and writes
    // only inside it.
    if unsafe { libc::ioctl(fd.as_raw_fd(), req as _, ifr as *mut libc::ifreq) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What the interface ioctls tell about an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IfDetails {
    /// `IFF_*` flags.
    pub flags: libc::c_int,
    /// `ARPHRD_*` hardware type.
    pub hw_type: u16,
    /// Hardware address (the first 6 bytes).
    pub mac: [u8; 6],
    /// MTU.
    pub mtu: u32,
}

impl IfDetails {
    /// Whether the interface is administratively up (`IFF_UP`).
    pub fn is_up(&self) -> bool {
        self.flags & libc::IFF_UP != 0
    }
}

/// `IFF_*` flags of `name`, through `ctl` (any socket).
pub fn flags(ctl: impl AsFd, name: &IfName) -> io::Result<libc::c_short> {
    let mut ifr = name.ifreq();
    ioctl_ifreq(ctl.as_fd(), libc::SIOCGIFFLAGS, &mut ifr)?;
    // SAFETY: SIOCGIFFLAGS filled the `ifru_flags` member of the union.
    Ok(unsafe { ifr.ifr_ifru.ifru_flags })
}

/// Hardware type (`ARPHRD_*`) and address of `name`, through `ctl` (any socket).
pub fn hw_addr(ctl: impl AsFd, name: &IfName) -> io::Result<(u16, [u8; 6])> {
    let mut ifr = name.ifreq();
    ioctl_ifreq(ctl.as_fd(), libc::SIOCGIFHWADDR, &mut ifr)?;
    // SAFETY: SIOCGIFHWADDR filled the `ifru_hwaddr` member of the union.
    let hw = unsafe { ifr.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (dst, src) in mac.iter_mut().zip(hw.sa_data.iter()) {
        *dst = *src as u8;
    }
    Ok((hw.sa_family, mac))
}

/// The MAC address of `name` in the calling thread's network namespace.
pub fn mac(name: &IfName) -> io::Result<[u8; 6]> {
    Ok(hw_addr(control_socket()?, name)?.1)
}

/// MTU of `name`, through `ctl` (any socket).
pub fn mtu(ctl: impl AsFd, name: &IfName) -> io::Result<u32> {
    let mut ifr = name.ifreq();
    ioctl_ifreq(ctl.as_fd(), libc::SIOCGIFMTU, &mut ifr)?;
    // SAFETY: SIOCGIFMTU filled the `ifru_mtu` member of the union.
    let mtu = unsafe { ifr.ifr_ifru.ifru_mtu };
    Ok(mtu.max(0) as u32)
}

/// Flags, hardware address and MTU of `name`, through `ctl` (any socket).
pub fn details(ctl: impl AsFd, name: &IfName) -> io::Result<IfDetails> {
    let ctl = ctl.as_fd();
    let flags = flags(ctl, name)? as u16 as libc::c_int;
    let (hw_type, mac) = hw_addr(ctl, name)?;
    Ok(IfDetails { flags, hw_type, mac, mtu: mtu(ctl, name)? })
}

/// Sets the MTU of `name` (`SIOCSIFMTU`); `EINVAL` if the kernel refuses it.
pub fn set_mtu(ctl: impl AsFd, name: &IfName, mtu: u32) -> io::Result<()> {
    let mut ifr = name.ifreq();
    ifr.ifr_ifru.ifru_mtu =
        libc::c_int::try_from(mtu).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    ioctl_ifreq(ctl.as_fd(), libc::SIOCSIFMTU, &mut ifr)
}

/// Brings `name` up (sets `IFF_UP`, keeping the other flags).
pub fn set_up(ctl: impl AsFd, name: &IfName) -> io::Result<()> {
    let ctl = ctl.as_fd();
    let mut ifr = name.ifreq();
    ifr.ifr_ifru.ifru_flags = flags(ctl, name)? | libc::IFF_UP as libc::c_short;
    ioctl_ifreq(ctl, libc::SIOCSIFFLAGS, &mut ifr)
}

/// `struct ethtool_drvinfo` (linux/ethtool.h).
#[repr(C)]
struct EthtoolDrvinfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    n_priv_flags: u32,
    n_stats: u32,
    testinfo_len: u32,
    eedump_len: u32,
    regdump_len: u32,
}

/// `ETHTOOL_GDRVINFO` command.
const ETHTOOL_GDRVINFO: u32 = 0x3;

/// The driver name of `name` (`"veth"`, `"tun"`, ...), from `ETHTOOL_GDRVINFO`. Asks
/// the driver, so it sees the calling thread's namespace, unlike `/sys/class/net`.
pub fn driver(name: &IfName) -> io::Result<String> {
    let ctl = control_socket()?;
    let mut info = EthtoolDrvinfo {
        cmd: ETHTOOL_GDRVINFO,
        driver: [0; 32],
        version: [0; 32],
        fw_version: [0; 32],
        bus_info: [0; 32],
        erom_version: [0; 32],
        reserved2: [0; 12],
        n_priv_flags: 0,
        n_stats: 0,
        testinfo_len: 0,
        eedump_len: 0,
        regdump_len: 0,
    };
    let mut ifr = name.ifreq();
    ifr.ifr_ifru.ifru_data = (&raw mut info).cast();
    // SAFETY: SIOCETHTOOL with ETHTOOL_GDRVINFO writes at most one ethtool_drvinfo to
    // `ifru_data`, which points at `info`, alive and exclusively borrowed for the call.
    if unsafe { libc::ioctl(ctl.as_raw_fd(), libc::SIOCETHTOOL, &mut ifr) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let len = info.driver.iter().position(|b| *b == 0).unwrap_or(info.driver.len());
    Ok(String::from_utf8_lossy(&info.driver[..len]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_names_are_checked_before_the_kernel_sees_them() {
        assert!(IfName::new("").is_none());
        assert!(IfName::new("a/b").is_none());
        assert!(IfName::new("a\0b").is_none());
        assert!(IfName::new("0123456789abcdef").is_none());
        assert_eq!(IfName::new("0123456789abcde").map(|n| n.to_string()).as_deref(), Some("0123456789abcde"));
    }

    #[test]
    fn loopback_has_an_index_an_mtu_and_no_mac() {
        assert!(if_nametoindex("lo").is_some());
        assert!(if_nametoindex("vmpls-none0").is_none());
        assert!(if_nametoindex("bad/name").is_none());
        let lo = IfName::new("lo").unwrap();
        let d = details(control_socket().unwrap(), &lo).unwrap();
        assert!(d.mtu >= 1500);
        assert_eq!(d.mac, [0; 6]);
        assert_eq!(d.hw_type, libc::ARPHRD_LOOPBACK);
        let e = details(control_socket().unwrap(), &IfName::new("vmpls-none0").unwrap()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV));
    }
}
