//! Signal handlers.

use std::io;

/// Installs `handler` for `signal`. `restart`: calls the signal interrupts are restarted
/// (`SA_RESTART`); without it a blocking `poll` returns `EINTR`, so a loop sees a flag the
/// handler set at once.
///
/// The handler runs in signal context: it may only do async-signal-safe things (store
/// to an atomic, [`crate::event::signal_raw`]).
pub fn set_handler(
    signal: libc::c_int,
    handler: extern "C" fn(libc::c_int),
    restart: bool,
) -> io::Result<()> {
    // SAFETY: the sigaction struct is zero-initialised (a valid value: empty mask, no
    // flags) and fully set before the call; `handler` is an `extern "C" fn(c_int)`, the
    // type the kernel calls without SA_SIGINFO, and the caller's contract is that it is
    // async-signal-safe.
    let rc = unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as *const () as usize;
        sa.sa_flags = if restart { libc::SA_RESTART } else { 0 };
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(signal, &sa, std::ptr::null_mut())
    };
    if rc != 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}
