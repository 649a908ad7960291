//! Waking and waiting: [`EventFd`], and `poll` over a set of descriptors ([`PollSet`],
//! [`wait_readable`]) for a forwarding loop.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

use rustix::event::{EventfdFlags, PollFd, PollFlags};

/// A non-blocking, close-on-exec eventfd: one thread (or a signal handler) signals, the
/// loop polling it wakes and drains it.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A new eventfd with its counter at zero.
    pub fn new() -> io::Result<EventFd> {
        Ok(EventFd(rustix::event::eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?))
    }

    /// Adds one to the counter: the descriptor polls readable. An error (the counter is
    /// full) means a wake-up is pending anyway, so it is ignored.
    pub fn signal(&self) {
        let _ = rustix::io::write(&self.0, &1u64.to_ne_bytes());
    }

    /// Resets the counter; returns what it was (0 if nothing was signalled).
    pub fn drain(&self) -> u64 {
        let mut v = [0u8; 8];
        match rustix::io::read(&self.0, &mut v) {
            Ok(8) => u64::from_ne_bytes(v),
            _ => 0,
        }
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl From<EventFd> for OwnedFd {
    fn from(e: EventFd) -> OwnedFd {
        e.0
    }
}

/// Adds one to the counter of the eventfd numbered `fd`, for a signal handler (which can
/// only reach it through a number kept in an atomic). `write(2)` is async-signal-safe;
/// a closed or foreign `fd` only makes the write fail or land in that descriptor, it
/// touches no memory of this process.
pub fn signal_raw(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: write(2) reads 8 bytes from `one`, live for the call; the descriptor is a
    // number the kernel checks.
    unsafe { libc::write(fd, (&raw const one).cast(), 8) };
}

/// What `poll` reported for one descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Readiness(i16);

impl Readiness {
    /// What `revents` bits say (for a caller that polls by itself, and tests).
    pub fn from_bits(revents: i16) -> Readiness {
        Readiness(revents)
    }

    /// Data to read (`POLLIN`).
    pub fn readable(self) -> bool {
        self.0 & libc::POLLIN != 0
    }

    /// An error condition: `POLLERR`, `POLLHUP` or `POLLNVAL`.
    pub fn error(self) -> bool {
        self.0 & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0
    }

    /// The raw `revents` bits.
    pub fn bits(self) -> i16 {
        self.0
    }
}

/// A set of descriptors polled for readability together, each kept at the index it was
/// added at; one can be muted (left out) and put back. The set holds descriptor numbers,
/// not borrows: the caller keeps them open while they are in the set (a closed one polls
/// as `POLLNVAL`, an error, not undefined behaviour).
#[derive(Debug, Default)]
pub struct PollSet {
    fds: Vec<libc::pollfd>,
}

impl PollSet {
    /// An empty set.
    pub fn new() -> PollSet {
        PollSet::default()
    }

    /// Adds `fd`, polled for `POLLIN`; returns its index.
    pub fn push(&mut self, fd: BorrowedFd<'_>) -> usize {
        self.fds.push(libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        self.fds.len() - 1
    }

    /// Puts `fd` at index `i` (a reopened port), unmuted.
    pub fn set(&mut self, i: usize, fd: BorrowedFd<'_>) {
        self.fds[i].fd = fd.as_raw_fd();
        self.fds[i].revents = 0;
    }

    /// Leaves index `i` out of the next polls until [`PollSet::set`] puts it back.
    pub fn mute(&mut self, i: usize) {
        self.fds[i].fd = -1;
        self.fds[i].revents = 0;
    }

    /// Whether index `i` is muted.
    pub fn is_muted(&self, i: usize) -> bool {
        self.fds[i].fd < 0
    }

    /// How many descriptors the set holds (muted ones included).
    pub fn len(&self) -> usize {
        self.fds.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.fds.is_empty()
    }

    /// Waits until one descriptor is ready or `timeout` passes; returns how many are
    /// ready. A signal ends the wait with `ErrorKind::Interrupted`.
    pub fn poll(&mut self, timeout: Duration) -> io::Result<usize> {
        let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
        // SAFETY: `fds` is a live, exclusively borrowed array of pollfd of the length
        // given; the kernel writes only their `revents`.
        let n = unsafe { libc::poll(self.fds.as_mut_ptr(), self.fds.len() as libc::nfds_t, ms) };
        if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
    }

    /// What the last poll reported for index `i`, cleared as it is taken.
    pub fn take(&mut self, i: usize) -> Readiness {
        Readiness(std::mem::take(&mut self.fds[i].revents))
    }
}

/// Waits up to `timeout` for `fd` to be readable. An interrupted wait counts as not
/// readable.
pub fn wait_readable(fd: impl AsFd, timeout: Duration) -> bool {
    let mut p = [PollFd::new(&fd, PollFlags::IN)];
    let ts =
        rustix::time::Timespec::try_from(timeout).unwrap_or(rustix::time::Timespec { tv_sec: 1, tv_nsec: 0 });
    matches!(rustix::event::poll(&mut p, Some(&ts)), Ok(n) if n > 0)
}

/// Waits up to `timeout` for any of `fds` to be readable; which are.
pub fn readable<Fd: AsFd>(fds: &[Fd], timeout: Duration) -> Vec<bool> {
    let mut p: Vec<PollFd<'_>> = fds.iter().map(|fd| PollFd::new(fd, PollFlags::IN)).collect();
    let ts =
        rustix::time::Timespec::try_from(timeout).unwrap_or(rustix::time::Timespec { tv_sec: 1, tv_nsec: 0 });
    match rustix::event::poll(&mut p, Some(&ts)) {
        Ok(n) if n > 0 => p.iter().map(|p| p.revents().contains(PollFlags::IN)).collect(),
        _ => vec![false; fds.len()],
    }
}

/// Whether the peer of the stream socket `fd` closed its end, without waiting or
/// consuming anything: a hang-up or error condition, or an end of stream waiting to be
/// read (a peek reads 0 bytes). Data waiting to be read is not a close.
pub fn peer_closed(fd: impl AsFd) -> bool {
    let mut p = [PollFd::new(&fd, PollFlags::IN)];
    let zero = rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 };
    if !matches!(rustix::event::poll(&mut p, Some(&zero)), Ok(n) if n > 0) {
        return false;
    }
    if p[0].revents().intersects(PollFlags::HUP | PollFlags::ERR) {
        return true;
    }
    let mut b = [0u8; 1];
    let flags = rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT;
    matches!(rustix::net::recv(&fd, &mut b[..], flags), Ok((0, _)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_eventfd_wakes_its_poller_until_drained() {
        let e = EventFd::new().unwrap();
        assert!(!wait_readable(&e, Duration::ZERO));
        e.signal();
        e.signal();
        assert!(wait_readable(&e, Duration::ZERO));
        assert_eq!(e.drain(), 2);
        assert!(!wait_readable(&e, Duration::ZERO));
        assert_eq!(e.drain(), 0);
        signal_raw(e.as_fd().as_raw_fd());
        assert_eq!(readable(&[&e, &e], Duration::ZERO), [true, true]);
    }

    #[test]
    fn a_poll_set_reports_by_index_and_skips_muted_entries() {
        let (a, b) = (EventFd::new().unwrap(), EventFd::new().unwrap());
        let mut set = PollSet::new();
        assert_eq!(set.push(a.as_fd()), 0);
        assert_eq!(set.push(b.as_fd()), 1);
        b.signal();
        assert_eq!(set.poll(Duration::ZERO).unwrap(), 1);
        assert!(!set.take(0).readable());
        let r = set.take(1);
        assert!(r.readable() && !r.error());
        assert!(!set.take(1).readable(), "taken once");
        set.mute(1);
        assert!(set.is_muted(1));
        assert_eq!(set.poll(Duration::ZERO).unwrap(), 0);
        set.set(1, b.as_fd());
        assert_eq!(set.poll(Duration::ZERO).unwrap(), 1);
        assert_eq!(set.len(), 2);
    }

    #[test]
    fn a_stream_peer_is_closed_when_it_hangs_up_not_when_it_writes() {
        use std::io::Write;
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(!peer_closed(&a));
        b.write_all(b"x").unwrap();
        assert!(!peer_closed(&a), "data waiting is not a close");
        drop(b);
        assert!(peer_closed(&a));
    }
}
