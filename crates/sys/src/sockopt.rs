//! `setsockopt`/`getsockopt` for the options rustix has no typed wrapper for
//! (`SOL_PACKET`, `UDP_SEGMENT`, `SO_*BUFFORCE`, ...).

use std::io;
use std::mem;
use std::os::fd::{AsFd, AsRawFd};

/// A value a socket option may hold: plain C data of a fixed size, any bit pattern of
/// which is valid (integers, `#[repr(C)]` structs of integers).
///
/// # Safety
/// Implementers must be plain data without padding the kernel could leave unwritten,
/// valid for every bit pattern.
pub unsafe trait OptVal: Copy {}

// SAFETY: integers are plain data, valid for every bit pattern.
unsafe impl OptVal for libc::c_int {}
// SAFETY: as above.
unsafe impl OptVal for [u32; 2] {}
// SAFETY: tpacket_req is four unsigned ints.
unsafe impl OptVal for libc::tpacket_req {}
// SAFETY: tpacket_req3 is seven unsigned ints.
unsafe impl OptVal for libc::tpacket_req3 {}
// SAFETY: timeval is two longs.
unsafe impl OptVal for libc::timeval {}
// SAFETY: tcp_info is integers only; the kernel writes what it knows, zeroes stay.
unsafe impl OptVal for libc::tcp_info {}
// SAFETY: ucred is three 32-bit integers (pid, uid, gid), no padding.
unsafe impl OptVal for libc::ucred {}

/// Sets option `opt` at `level` to `val`.
pub fn set<T: OptVal>(fd: impl AsFd, level: libc::c_int, opt: libc::c_int, val: &T) -> io::Result<()> {
    // SAFETY: `val` points to a live `T` of `size_of::<T>()` bytes for the duration of the
    // call; the kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            fd.as_fd().as_raw_fd(),
            level,
            opt,
            (val as *const T).cast(),
            mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Sets an integer option.
pub fn set_int(fd: impl AsFd, level: libc::c_int, opt: libc::c_int, val: libc::c_int) -> io::Result<()> {
    set(fd, level, opt, &val)
}

/// Reads option `opt` at `level` into a `T` (zeroes where the kernel writes less).
pub fn get<T: OptVal>(fd: impl AsFd, level: libc::c_int, opt: libc::c_int) -> io::Result<T> {
    // SAFETY: any bit pattern, so all zeroes, is a valid `T` (`OptVal`).
    let mut v: T = unsafe { mem::zeroed() };
    let mut len = mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` and `len` are live for the call and `len` is the size of `v`; the
    // kernel writes at most `len` bytes, and any bit pattern is a valid `T` (`OptVal`).
    let r = unsafe { libc::getsockopt(fd.as_fd().as_raw_fd(), level, opt, (&raw mut v).cast(), &mut len) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(v) }
}

/// Reads an integer option.
pub fn get_int(fd: impl AsFd, level: libc::c_int, opt: libc::c_int) -> io::Result<libc::c_int> {
    get(fd, level, opt)
}

/// Sets `SO_RCVBUFFORCE` to `bytes`, or `SO_RCVBUF` where forcing is not allowed (no
/// `CAP_NET_ADMIN`); the plain option's failure is ignored, as the kernel caps it.
pub fn force_recv_buffer(fd: impl AsFd, bytes: libc::c_int) {
    let fd = fd.as_fd();
    if set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, bytes).is_err() {
        let _ = set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, bytes);
    }
}

/// Sets `SO_SNDBUFFORCE` to `bytes`, or `SO_SNDBUF` where forcing is not allowed.
pub fn force_send_buffer(fd: impl AsFd, bytes: libc::c_int) {
    let fd = fd.as_fd();
    if set_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, bytes).is_err() {
        let _ = set_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_integer_option_reads_back() {
        let s = crate::control_socket().unwrap();
        set_int(&s, libc::SOL_SOCKET, libc::SO_RCVBUF, 1 << 16).unwrap();
        // The kernel doubles it for its bookkeeping.
        assert_eq!(get_int(&s, libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap(), 2 << 16);
        assert!(set_int(&s, libc::SOL_SOCKET, 9999, 1).is_err());
    }
}
