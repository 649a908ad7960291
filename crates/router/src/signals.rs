use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use anyhow::Context;

pub(crate) static STOP: AtomicBool = AtomicBool::new(false);
/// The eventfd SIGHUP writes to (the control thread polls it); -1 before it exists.
pub(crate) static RELOAD_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

extern "C" fn on_hup(_: libc::c_int) {
    let fd = RELOAD_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        let one: u64 = 1;
        // SAFETY: write(2) is async-signal-safe; `one` is a live 8-byte value. A failure
        // (counter overflow) only loses a reload request that is already pending.
        unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    }
}

fn install(sig: libc::c_int, handler: extern "C" fn(libc::c_int), flags: libc::c_int) -> anyhow::Result<()> {
    // SAFETY: the handlers only store to an atomic or write(2) to an eventfd, both
    // async-signal-safe; the sigaction struct is zero-initialised and fully set before
    // the call.
    let rc = unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as *const () as usize;
        sa.sa_flags = flags;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("installing signal handlers");
    }
    Ok(())
}

pub(crate) fn install_signal_handlers() -> anyhow::Result<()> {
    // No SA_RESTART for SIGINT/SIGTERM: poll() returns EINTR so the loop sees STOP at
    // once. SIGHUP restarts interrupted calls: a reload must not disturb anything.
    install(libc::SIGINT, on_signal, 0)?;
    install(libc::SIGTERM, on_signal, 0)?;
    install(libc::SIGHUP, on_hup, libc::SA_RESTART)
}

/// A non-blocking, close-on-exec eventfd.
pub fn eventfd() -> std::io::Result<OwnedFd> {
    // SAFETY: eventfd(2) takes no pointers; a non-negative result is a new descriptor
    // that we own.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds one to an eventfd's counter (wakes its poller).
pub fn eventfd_signal(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64 to a descriptor the caller keeps open; an
    // error (counter full) means a wake-up is pending anyway.
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// Resets an eventfd's counter.
pub fn eventfd_drain(fd: RawFd) {
    let mut v: u64 = 0;
    // SAFETY: reads at most 8 bytes into a live u64; the fd is non-blocking.
    unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn eventfd_wakes_and_drains() {
        let fd = eventfd().unwrap();
        let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        assert_eq!(unsafe { libc::poll(&mut p, 1, 0) }, 0);
        eventfd_signal(fd.as_raw_fd());
        eventfd_signal(fd.as_raw_fd());
        // SAFETY: one valid pollfd.
        assert_eq!(unsafe { libc::poll(&mut p, 1, 0) }, 1);
        eventfd_drain(fd.as_raw_fd());
        // SAFETY: one valid pollfd.
        assert_eq!(unsafe { libc::poll(&mut p, 1, 0) }, 0);
    }
}
