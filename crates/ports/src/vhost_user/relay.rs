//! A message relay between QEMU and the `vhost-user-backend` daemon.
//!
//! QEMU 7.2's virtio-net sends `VHOST_USER_SET_VRING_ENABLE` as soon as the device is
//! set up (`peer_attach`), long before `SET_FEATURES`. The `vhost` crate (0.18) treats a
//! `SET_VRING_ENABLE` before `PROTOCOL_FEATURES` was acknowledged as a fatal protocol
//! error and drops the connection; without `PROTOCOL_FEATURES` QEMU 7.2 crashes. So the
//! port accepts QEMU's connection itself and relays every message, fds included, to the
//! daemon over a private socket, holding back `SET_VRING_ENABLE` until a `SET_FEATURES`
//! with `PROTOCOL_FEATURES` has gone through and then replaying the latest state per queue
//! (QEMU enables the rings again when it starts the device anyway). A held-back message
//! that asked for a reply gets a success reply from the relay.
//!
//! Only message boundaries are parsed (the 12-byte header's size field); the daemon
//! validates the messages. The relay never blocks the router thread: it runs on two
//! threads of its own per connection.
//!
//! File descriptors are the one thing a frontend could pile up in the router's process,
//! so the relay passes on only those a message takes ([`fds_taken`]), arriving with its
//! first bytes as the `vhost` crate reads them; every other one is closed on arrival and
//! counted. It also answers `GET_MAX_MEM_SLOTS` itself with
//! [`MAX_MEM_REGIONS`](super::MAX_MEM_REGIONS), the most memory regions (each one a
//! descriptor the daemon keeps) the port lets a guest have.

use std::io::{self, Write};
use std::net::Shutdown;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use vmm_sys_util::sock_ctrl_msg::ScmSocket;

/// Bytes of a vhost-user message header: request, flags, size (u32 each).
const HDR_LEN: usize = 12;
/// Largest message body accepted (the `vhost` crate's `MAX_MSG_SIZE`).
const MAX_BODY: usize = 0x1000;
/// Most fds one read takes (the `vhost` crate's `MAX_ATTACHED_FD_ENTRIES`): with more the
/// kernel truncates, `recv_with_fds` closes them all and the connection ends.
const MAX_FDS: usize = 32;
/// Most regions one `SET_MEM_TABLE` carries: QEMU's `VHOST_MEMORY_BASELINE_NREGIONS`, also
/// DPDK's limit (larger layouts go through `ADD_MEM_REG`).
const MAX_MEM_TABLE_FDS: usize = 8;
const REQ_SET_FEATURES: u32 = 2;
const REQ_SET_MEM_TABLE: u32 = 5;
const REQ_SET_LOG_BASE: u32 = 6;
const REQ_SET_LOG_FD: u32 = 7;
const REQ_SET_VRING_KICK: u32 = 12;
const REQ_SET_VRING_CALL: u32 = 13;
const REQ_SET_VRING_ERR: u32 = 14;
const REQ_SET_VRING_ENABLE: u32 = 18;
const REQ_SET_BACKEND_REQ_FD: u32 = 21;
const REQ_SET_INFLIGHT_FD: u32 = 32;
const REQ_GPU_SET_SOCKET: u32 = 33;
const REQ_GET_MAX_MEM_SLOTS: u32 = 36;
const REQ_ADD_MEM_REG: u32 = 37;
const REQ_REM_MEM_REG: u32 = 38;
const REQ_SET_DEVICE_STATE_FD: u32 = 42;
const FLAG_VERSION_1: u32 = 0x1;
const FLAG_REPLY: u32 = 0x4;
const FLAG_NEED_REPLY: u32 = 0x8;
const PROTOCOL_FEATURES: u64 = 1 << 30;
/// Queues whose enable state is remembered.
const MAX_QUEUES: usize = 64;

/// Receives into `buf` with any fds sent alongside.
fn recv_fds(sock: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut raw: [RawFd; MAX_FDS] = [-1; MAX_FDS];
    let mut iov = [libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() }];
    // SAFETY: the only iovec points at `buf`, which is exclusively borrowed for the call
    // and valid for `buf.len()` bytes of arbitrary data.
    let (n, nfds) = unsafe { sock.recv_with_fds(&mut iov, &mut raw) }
        .map_err(|e| io::Error::from_raw_os_error(e.errno()))?;
    let fds = raw[..nfds.min(MAX_FDS)]
        .iter()
        // SAFETY: recvmsg just installed these descriptors in this process; nothing else
        // owns them, and each is wrapped exactly once.
        .map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) })
        .collect();
    Ok((n, fds))
}

/// Sends all of `data`, the fds with the first byte.
fn send_all(sock: &UnixStream, data: &[u8], fds: &[OwnedFd]) -> io::Result<()> {
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let mut sent = sock.send_with_fds(&[data], &raw).map_err(|e| io::Error::from_raw_os_error(e.errno()))?;
    while sent < data.len() {
        let n = (&*sock).write(&data[sent..])?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        sent += n;
    }
    Ok(())
}

/// How many fds a frontend request carries at most: a region's for each entry of a memory
/// table, one for the requests that pass one (the `vhost` crate's `check_attached_files`
/// list; `REM_MEM_REG` may carry one by the spec, to be closed), none for the rest.
fn fds_taken(request: u32) -> usize {
    match request {
        REQ_SET_MEM_TABLE => MAX_MEM_TABLE_FDS,
        REQ_SET_LOG_BASE
        | REQ_SET_LOG_FD
        | REQ_SET_VRING_KICK
        | REQ_SET_VRING_CALL
        | REQ_SET_VRING_ERR
        | REQ_SET_BACKEND_REQ_FD
        | REQ_SET_INFLIGHT_FD
        | REQ_GPU_SET_SOCKET
        | REQ_ADD_MEM_REG
        | REQ_REM_MEM_REG
        | REQ_SET_DEVICE_STATE_FD => 1,
        _ => 0,
    }
}

/// Closes fds a message may not carry, counting them.
fn close_surplus(fds: impl IntoIterator<Item = OwnedFd>, closed: &AtomicU64) {
    let n = fds.into_iter().count();
    closed.fetch_add(n as u64, Ordering::Relaxed);
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` on a clean end of stream before the first
/// byte. With `keep`, fds that come with the first read are appended to it; all others
/// are closed at once and counted in `closed`, so however a frontend spreads a message
/// over its sends, the relay holds at most one read's worth of fds.
fn recv_exact(
    sock: &UnixStream,
    buf: &mut [u8],
    mut keep: Option<&mut Vec<OwnedFd>>,
    closed: &AtomicU64,
) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        let (n, more) = recv_fds(sock, &mut buf[got..])?;
        match keep.take() {
            Some(fds) if got == 0 => fds.extend(more),
            _ => close_surplus(more, closed),
        }
        if n == 0 {
            if got == 0 {
                return Ok(false);
            }
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        got += n;
    }
    Ok(true)
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// What the frontend-to-backend direction remembers.
struct Gate {
    /// A `SET_FEATURES` with `PROTOCOL_FEATURES` went through.
    open: bool,
    /// Held-back `SET_VRING_ENABLE` states by queue index.
    held: [Option<u32>; MAX_QUEUES],
}

impl Gate {
    fn new() -> Gate {
        Gate { open: false, held: [None; MAX_QUEUES] }
    }
}

fn message(request: u32, flags: u32, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(HDR_LEN + body.len());
    m.extend_from_slice(&request.to_le_bytes());
    m.extend_from_slice(&flags.to_le_bytes());
    m.extend_from_slice(&(body.len() as u32).to_le_bytes());
    m.extend_from_slice(body);
    m
}

/// Relays frontend messages to the backend until either side closes. Fds a message may
/// not carry are closed and counted in `closed`.
fn frontend_to_backend(
    front: &UnixStream,
    front_writer: &Mutex<UnixStream>,
    back: &UnixStream,
    closed: &AtomicU64,
) -> io::Result<()> {
    let mut gate = Gate::new();
    let mut hdr = [0u8; HDR_LEN];
    let mut body = vec![0u8; MAX_BODY];
    let reply = |request: u32, body: &[u8]| {
        let m = message(request, FLAG_VERSION_1 | FLAG_REPLY, body);
        let w = front_writer.lock().unwrap_or_else(|e| e.into_inner());
        send_all(&w, &m, &[])
    };
    loop {
        let mut fds = Vec::new();
        if !recv_exact(front, &mut hdr, Some(&mut fds), closed)? {
            return Ok(());
        }
        let request = u32_at(&hdr, 0);
        let flags = u32_at(&hdr, 4);
        let size = u32_at(&hdr, 8) as usize;
        if size > MAX_BODY {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "vhost-user message too large"));
        }
        if fds.len() > fds_taken(request) {
            tracing::debug!(
                request,
                fds = fds.len(),
                "vhost-user frontend sent more fds than the message takes"
            );
            close_surplus(fds.drain(fds_taken(request)..), closed);
        }
        let body = &mut body[..size];
        if size > 0 && !recv_exact(front, body, None, closed)? {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        if request == REQ_GET_MAX_MEM_SLOTS {
            reply(request, &(super::MAX_MEM_REGIONS as u64).to_le_bytes())?;
            continue;
        }
        if request == REQ_SET_VRING_ENABLE && !gate.open && size >= 8 {
            let index = u32_at(body, 0) as usize;
            if let Some(slot) = gate.held.get_mut(index) {
                *slot = Some(u32_at(body, 4));
            }
            if flags & FLAG_NEED_REPLY != 0 {
                reply(request, &0u64.to_le_bytes())?;
            }
            continue;
        }
        let mut whole = Vec::with_capacity(HDR_LEN + size);
        whole.extend_from_slice(&hdr);
        whole.extend_from_slice(body);
        send_all(back, &whole, &fds)?;
        if request == REQ_SET_FEATURES && size >= 8 {
            let features = u64::from(u32_at(body, 0)) | (u64::from(u32_at(body, 4)) << 32);
            gate.open = features & PROTOCOL_FEATURES != 0;
            if gate.open {
                for (index, state) in gate.held.iter_mut().enumerate() {
                    if let Some(num) = state.take() {
                        let mut b = [0u8; 8];
                        b[..4].copy_from_slice(&(index as u32).to_le_bytes());
                        b[4..].copy_from_slice(&num.to_le_bytes());
                        send_all(back, &message(REQ_SET_VRING_ENABLE, FLAG_VERSION_1, &b), &[])?;
                    }
                }
            }
        }
    }
}

/// Relays backend replies (and any fds) to the frontend until either side closes.
fn backend_to_frontend(back: &UnixStream, front_writer: &Mutex<UnixStream>) -> io::Result<()> {
    let mut buf = vec![0u8; MAX_BODY + HDR_LEN];
    loop {
        let (n, fds) = recv_fds(back, &mut buf)?;
        if n == 0 {
            return Ok(());
        }
        let w = front_writer.lock().unwrap_or_else(|e| e.into_inner());
        send_all(&w, &buf[..n], &fds)?;
    }
}

/// The two relay threads of one connection.
pub(super) struct Relay {
    front: UnixStream,
    back: UnixStream,
    threads: Vec<JoinHandle<()>>,
}

impl Relay {
    /// Starts relaying between `front` (QEMU) and `back` (the daemon's connection),
    /// counting in `fds_closed` the fds the frontend sent that its messages do not take.
    pub(super) fn start(
        front: UnixStream,
        back: UnixStream,
        name: &str,
        fds_closed: Arc<AtomicU64>,
    ) -> io::Result<Relay> {
        let writer = Arc::new(Mutex::new(front.try_clone()?));
        let (f1, b1) = (front.try_clone()?, back.try_clone()?);
        let (b2, w1, w2) = (back.try_clone()?, writer.clone(), writer);
        let port = name.to_owned();
        let t1 = std::thread::Builder::new().name(format!("vhost-relay-{name}")).spawn(move || {
            if let Err(e) = frontend_to_backend(&f1, &w1, &b1, &fds_closed) {
                tracing::debug!(port, error = %e, "vhost-user relay (frontend) ended");
            }
            let _ = f1.shutdown(Shutdown::Both);
            let _ = b1.shutdown(Shutdown::Both);
        })?;
        let port = name.to_owned();
        let t2 = std::thread::Builder::new().name(format!("vhost-reply-{name}")).spawn(move || {
            if let Err(e) = backend_to_frontend(&b2, &w2) {
                tracing::debug!(port, error = %e, "vhost-user relay (backend) ended");
            }
            let _ = b2.shutdown(Shutdown::Both);
            let w = w2.lock().unwrap_or_else(|e| e.into_inner());
            let _ = w.shutdown(Shutdown::Both);
        })?;
        Ok(Relay { front, back, threads: vec![t1, t2] })
    }

    /// Closes both connections and waits for the threads.
    pub(super) fn stop(mut self) {
        let _ = self.front.shutdown(Shutdown::Both);
        let _ = self.back.shutdown(Shutdown::Both);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::time::Duration;

    /// Reads one whole message from `sock` (test helper and sanity check of the framing).
    fn read_message(sock: &mut UnixStream) -> io::Result<(u32, u32, Vec<u8>)> {
        let mut hdr = [0u8; HDR_LEN];
        sock.read_exact(&mut hdr)?;
        let mut body = vec![0u8; u32_at(&hdr, 8) as usize];
        sock.read_exact(&mut body)?;
        Ok((u32_at(&hdr, 0), u32_at(&hdr, 4), body))
    }

    fn enable(index: u32, num: u32, flags: u32) -> Vec<u8> {
        let mut b = index.to_le_bytes().to_vec();
        b.extend_from_slice(&num.to_le_bytes());
        message(REQ_SET_VRING_ENABLE, flags, &b)
    }

    #[test]
    fn early_vring_enable_is_held_until_protocol_features_are_acked() {
        let (mut qemu, front) = UnixStream::pair().unwrap();
        let (back, mut daemon) = UnixStream::pair().unwrap();
        qemu.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        daemon.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let relay = Relay::start(front, back, "t", Arc::default()).unwrap();

        // GET_FEATURES (1) passes through; the reply comes back.
        qemu.write_all(&message(1, FLAG_VERSION_1, &[])).unwrap();
        assert_eq!(read_message(&mut daemon).unwrap(), (1, FLAG_VERSION_1, vec![]));
        daemon.write_all(&message(1, FLAG_VERSION_1 | FLAG_REPLY, &[7; 8])).unwrap();
        assert_eq!(read_message(&mut qemu).unwrap().2, vec![7; 8]);

        // Early enables: held; the one asking for a reply is acked by the relay.
        qemu.write_all(&enable(0, 1, FLAG_VERSION_1)).unwrap();
        qemu.write_all(&enable(1, 1, FLAG_VERSION_1 | FLAG_NEED_REPLY)).unwrap();
        let (req, flags, body) = read_message(&mut qemu).unwrap();
        assert_eq!((req, flags & FLAG_REPLY, body), (REQ_SET_VRING_ENABLE, FLAG_REPLY, vec![0; 8]));

        // SET_FEATURES with PROTOCOL_FEATURES goes through, then the held states.
        let features = PROTOCOL_FEATURES | 1;
        qemu.write_all(&message(REQ_SET_FEATURES, FLAG_VERSION_1, &features.to_le_bytes())).unwrap();
        assert_eq!(read_message(&mut daemon).unwrap().0, REQ_SET_FEATURES);
        assert_eq!(read_message(&mut daemon).unwrap().2, [0, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(read_message(&mut daemon).unwrap().2, [1, 0, 0, 0, 1, 0, 0, 0]);

        // Later enables pass straight through.
        qemu.write_all(&enable(0, 0, FLAG_VERSION_1)).unwrap();
        assert_eq!(read_message(&mut daemon).unwrap().2, [0, 0, 0, 0, 0, 0, 0, 0]);

        // fds travel with their message.
        let (r, _w) = UnixStream::pair().unwrap();
        let m = message(REQ_SET_VRING_CALL, FLAG_VERSION_1, &0u64.to_le_bytes());
        qemu.send_with_fds(&[&m[..]], &[r.as_raw_fd()]).unwrap();
        let mut buf = [0u8; HDR_LEN + 8];
        let (n, fds) = recv_fds(&daemon, &mut buf).unwrap();
        assert_eq!((n, fds.len()), (HDR_LEN + 8, 1));

        // The frontend going away ends the relay.
        drop(qemu);
        let mut rest = Vec::new();
        assert_eq!(daemon.read_to_end(&mut rest).unwrap(), 0);
        relay.stop();
    }

    /// Descriptors open in this process.
    fn open_fds() -> usize {
        std::fs::read_dir("/proc/self/fd").unwrap().count()
    }

    #[test]
    fn fds_a_message_does_not_take_are_closed_on_arrival() {
        let (mut qemu, front) = UnixStream::pair().unwrap();
        let (back, daemon) = UnixStream::pair().unwrap();
        daemon.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        qemu.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let closed = Arc::new(AtomicU64::new(0));
        let relay = Relay::start(front, back, "t", closed.clone()).unwrap();
        let (r, _w) = UnixStream::pair().unwrap();
        let many = [r.as_raw_fd(); MAX_FDS];

        // GET_FEATURES takes none: passed on without them.
        qemu.send_with_fds(&[&message(1, FLAG_VERSION_1, &[])[..]], &many).unwrap();
        let mut buf = [0u8; HDR_LEN];
        let (n, fds) = recv_fds(&daemon, &mut buf).unwrap();
        assert_eq!((n, fds.len(), closed.load(Ordering::Relaxed)), (HDR_LEN, 0, MAX_FDS as u64));

        // SET_VRING_KICK takes one: the first goes on, the rest are closed.
        let kick = message(REQ_SET_VRING_KICK, FLAG_VERSION_1, &1u64.to_le_bytes());
        qemu.send_with_fds(&[&kick[..]], &many).unwrap();
        let mut buf = [0u8; HDR_LEN + 8];
        let (n, fds) = recv_fds(&daemon, &mut buf).unwrap();
        assert_eq!((n, fds.len()), (HDR_LEN + 8, 1));
        assert_eq!(closed.load(Ordering::Relaxed), 2 * MAX_FDS as u64 - 1);

        // A message spread over many sends, each with fds, holds none of the later ones:
        // before this, all of them piled up in the process until the message was whole.
        let base = open_fds();
        let mut table = message(REQ_SET_MEM_TABLE, FLAG_VERSION_1, &[0u8; 200]);
        let last = table.split_off(HDR_LEN + 199);
        qemu.send_with_fds(&[&table[..HDR_LEN]], &[]).unwrap();
        for b in &table[HDR_LEN..] {
            qemu.send_with_fds(&[std::slice::from_ref(b)], &many).unwrap();
        }
        // Wait until the relay has read all but the last byte.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while closed.load(Ordering::Relaxed) < 2 * MAX_FDS as u64 - 1 + 199 * MAX_FDS as u64 {
            assert!(std::time::Instant::now() < deadline, "relay did not read the pieces");
            std::thread::sleep(Duration::from_millis(5));
        }
        // (Some slack for descriptors other tests in this process open meanwhile.)
        assert!(open_fds() <= base + MAX_FDS + 64, "{} fds open, {base} before", open_fds());
        qemu.write_all(&last).unwrap();
        let mut buf = vec![0u8; HDR_LEN + 200];
        let (n, fds) = recv_fds(&daemon, &mut buf).unwrap();
        assert_eq!((n, fds.len()), (HDR_LEN + 200, 0));

        // GET_MAX_MEM_SLOTS is answered by the relay: the port's own limit.
        qemu.write_all(&message(REQ_GET_MAX_MEM_SLOTS, FLAG_VERSION_1, &[])).unwrap();
        let (req, flags, body) = read_message(&mut qemu).unwrap();
        assert_eq!((req, flags & FLAG_REPLY), (REQ_GET_MAX_MEM_SLOTS, FLAG_REPLY));
        assert_eq!(body, (super::super::MAX_MEM_REGIONS as u64).to_le_bytes());
        drop(qemu);
        relay.stop();
    }

    #[test]
    fn an_oversized_message_closes_the_connection() {
        let (mut qemu, front) = UnixStream::pair().unwrap();
        let (back, mut daemon) = UnixStream::pair().unwrap();
        daemon.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let relay = Relay::start(front, back, "t", Arc::default()).unwrap();
        let mut hdr = message(REQ_SET_FEATURES, FLAG_VERSION_1, &[]);
        hdr[8..12].copy_from_slice(&(MAX_BODY as u32 + 1).to_le_bytes());
        qemu.write_all(&hdr).unwrap();
        let mut rest = Vec::new();
        assert_eq!(daemon.read_to_end(&mut rest).unwrap(), 0);
        relay.stop();
    }
}
