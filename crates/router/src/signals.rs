//! The router's signal handlers: SIGINT and SIGTERM stop the forwarding loop, SIGHUP
//! asks the control thread to reload the config.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use anyhow::Context;
use vmpls_sys::signal::set_handler;

pub(crate) static STOP: AtomicBool = AtomicBool::new(false);
/// The eventfd SIGHUP writes to (the control thread polls it); -1 before it exists.
pub(crate) static RELOAD_FD: AtomicI32 = AtomicI32::new(-1);
/// The forwarding loop's wake eventfd, which SIGINT and SIGTERM write to; -1 before it
/// exists. The loop sleeps until its next deadline (up to a second), and a signal the
/// kernel hands another thread would not interrupt its poll.
pub(crate) static STOP_WAKE_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
    let fd = STOP_WAKE_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        // Async-signal-safe; a failure (counter overflow) means the loop is woken anyway.
        vmpls_sys::event::signal_raw(fd);
    }
}

extern "C" fn on_hup(_: libc::c_int) {
    let fd = RELOAD_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        // Async-signal-safe; a failure (counter overflow) only loses a reload request
        // that is already pending.
        vmpls_sys::event::signal_raw(fd);
    }
}

pub(crate) fn install_signal_handlers() -> anyhow::Result<()> {
    // No SA_RESTART for SIGINT/SIGTERM: poll() returns EINTR so the loop sees STOP at
    // once. SIGHUP restarts interrupted calls: a reload must not disturb anything.
    set_handler(libc::SIGINT, on_signal, false).context("installing signal handlers")?;
    set_handler(libc::SIGTERM, on_signal, false).context("installing signal handlers")?;
    set_handler(libc::SIGHUP, on_hup, true).context("installing signal handlers")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsFd, AsRawFd};
    use std::time::Duration;
    use vmpls_sys::EventFd;

    #[test]
    fn sighup_wakes_the_reload_eventfd() {
        let reload = EventFd::new().unwrap();
        on_hup(libc::SIGHUP); // before the eventfd is known: nothing to wake
        RELOAD_FD.store(reload.as_fd().as_raw_fd(), Ordering::Relaxed);
        on_hup(libc::SIGHUP);
        RELOAD_FD.store(-1, Ordering::Relaxed);
        assert!(vmpls_sys::wait_readable(&reload, Duration::ZERO));
        assert_eq!(reload.drain(), 1);
    }
}
