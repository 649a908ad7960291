//! A UDP flow at a fixed rate between two namespaces, with sequence numbers: what was
//! sent, received, lost, reordered, duplicated or corrupted.
//!
//! Every datagram carries a small header and a payload derived from it, so the
//! receiver checks each one on its own:
//!
//! ```text
//!  0               4               8                              16
//! +---------------+---------------+-------------------------------+-------------
//! | magic "vmpU"  | flow id (BE)  | sequence number (BE, from 0)  | payload ...
//! +---------------+---------------+-------------------------------+-------------
//! ```
//!
//! The payload is a pseudo-random stream seeded by the flow id and the sequence
//! number. [`encode`], [`check`] and [`SeqTracker`] are sans-I/O; [`run_udp_flow`] runs
//! a sender and a receiver on threads inside the namespaces. Both sides are bounded:
//! the sender stops after the duration, the receiver a drain time after the sender (or
//! at the overall deadline), and both check the interrupt flag, so a flow always ends
//! by itself.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};

use crate::traffic::Pacer;
use crate::{check_interrupt, netns};

/// The first four bytes of every datagram.
pub const MAGIC: [u8; 4] = *b"vmpU";

/// Length of the header (magic, flow id, sequence number).
pub const HEADER_LEN: usize = 16;

/// The largest UDP payload over IPv4.
pub const MAX_DATAGRAM: usize = 65_507;

/// Sequence numbers at or above this are not believed (they would make the tracker's
/// bitmap huge): 2^32 datagrams are far more than any flow sends.
pub const MAX_SEQ: u64 = 1 << 32;

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Fills `payload` with the stream of (`flow`, `seq`).
fn fill_payload(flow: u32, seq: u64, payload: &mut [u8]) {
    let mut state = (u64::from(flow) << 40) ^ seq;
    for chunk in payload.chunks_mut(8) {
        state = splitmix64(state);
        let bytes = state.to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
}

/// Writes datagram `seq` of `flow` into `buf` (its whole length: header and payload).
///
/// # Errors
/// `buf` is shorter than [`HEADER_LEN`].
pub fn encode(flow: u32, seq: u64, buf: &mut [u8]) -> Result<(), DatagramTooShort> {
    if buf.len() < HEADER_LEN {
        return Err(DatagramTooShort(buf.len()));
    }
    buf[0..4].copy_from_slice(&MAGIC);
    buf[4..8].copy_from_slice(&flow.to_be_bytes());
    buf[8..16].copy_from_slice(&seq.to_be_bytes());
    fill_payload(flow, seq, &mut buf[HEADER_LEN..]);
    Ok(())
}

/// A datagram buffer too short for the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatagramTooShort(pub usize);

impl std::fmt::Display for DatagramTooShort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a datagram of {} bytes has no room for the {HEADER_LEN}-byte header", self.0)
    }
}

impl std::error::Error for DatagramTooShort {}

/// What [`check`] found in a received datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    /// Datagram `seq` of the flow, intact.
    Intact(u64),
    /// The header names the flow, but the length or the payload is wrong (or the
    /// sequence number is out of range).
    Corrupt,
    /// Not a datagram of this flow (another magic or flow id, or too short).
    Foreign,
}

/// Checks a received datagram against flow `flow`, whose datagrams are `len` bytes.
pub fn check(flow: u32, len: usize, data: &[u8]) -> Checked {
    if data.len() < HEADER_LEN || data[0..4] != MAGIC || data[4..8] != flow.to_be_bytes() {
        return Checked::Foreign;
    }
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&data[8..16]);
    let seq = u64::from_be_bytes(seq);
    if data.len() != len || seq >= MAX_SEQ {
        return Checked::Corrupt;
    }
    let mut state = (u64::from(flow) << 40) ^ seq;
    for chunk in data[HEADER_LEN..].chunks(8) {
        state = splitmix64(state);
        if chunk != &state.to_le_bytes()[..chunk.len()] {
            return Checked::Corrupt;
        }
    }
    Checked::Intact(seq)
}

/// How a datagram arrived, relative to the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// A sequence number not seen before, above every one seen.
    InOrder,
    /// A sequence number not seen before, below one seen already.
    Reordered,
    /// A sequence number seen before.
    Duplicate,
}

/// Counts sequence numbers as they arrive: distinct ones, reordered, duplicated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeqTracker {
    /// One bit a sequence number, grown as needed.
    seen: Vec<u64>,
    highest: Option<u64>,
    received: u64,
    reordered: u64,
    duplicated: u64,
}

impl SeqTracker {
    /// An empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records an arrival of `seq` (below [`MAX_SEQ`]; [`check`] ensures that).
    pub fn record(&mut self, seq: u64) -> Arrival {
        let (word, bit) = ((seq / 64) as usize, seq % 64);
        if word >= self.seen.len() {
            self.seen.resize(word + 1, 0);
        }
        if self.seen[word] & (1 << bit) != 0 {
            self.duplicated += 1;
            return Arrival::Duplicate;
        }
        self.seen[word] |= 1 << bit;
        self.received += 1;
        match self.highest {
            Some(h) if seq < h => {
                self.reordered += 1;
                Arrival::Reordered
            }
            _ => {
                self.highest = Some(seq);
                Arrival::InOrder
            }
        }
    }

    /// Distinct sequence numbers received.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Datagrams that arrived after one with a higher sequence number.
    pub fn reordered(&self) -> u64 {
        self.reordered
    }

    /// Datagrams whose sequence number had arrived before.
    pub fn duplicated(&self) -> u64 {
        self.duplicated
    }

    /// The highest sequence number received.
    pub fn highest(&self) -> Option<u64> {
        self.highest
    }
}

/// The parameters of a UDP flow.
#[derive(Debug, Clone)]
pub struct UdpOptions {
    /// How long the sender sends.
    pub duration: Duration,
    /// The sending rate in bits a second of UDP payload.
    pub rate: u64,
    /// Bytes of UDP payload in each datagram, header included ([`HEADER_LEN`] to
    /// [`MAX_DATAGRAM`]).
    pub datagram_len: usize,
    /// The flow id in every datagram; the receiver counts others as foreign.
    pub flow: u32,
    /// UDP port of the receiver; 0 picks a free one.
    pub port: u16,
    /// How long the receiver waits for stragglers after the sender's last datagram.
    pub drain: Duration,
    /// How long one send may block before the flow counts as stalled.
    pub io_timeout: Duration,
    /// An upper bound on the whole flow; `None`: the duration plus 30 s.
    pub deadline: Option<Duration>,
    /// How often the progress callback is called.
    pub progress_interval: Duration,
}

impl Default for UdpOptions {
    fn default() -> Self {
        Self {
            duration: Duration::from_secs(10),
            rate: 10_000_000,
            datagram_len: 1200,
            flow: 1,
            port: 0,
            drain: Duration::from_secs(1),
            io_timeout: Duration::from_secs(5),
            deadline: None,
            progress_interval: Duration::from_secs(1),
        }
    }
}

impl UdpOptions {
    fn overall_deadline(&self) -> Duration {
        self.deadline.unwrap_or(self.duration + Duration::from_secs(30))
    }
}

/// What a finished UDP flow counted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UdpResult {
    /// Datagrams the sender sent.
    pub sent: u64,
    /// Sends that failed (`ENOBUFS`, unreachable, ...): datagrams that never left.
    pub send_errors: u64,
    /// Distinct datagrams of the flow received intact.
    pub received: u64,
    /// Datagrams sent but never received: `sent - received`.
    pub lost: u64,
    /// Datagrams that arrived after one with a higher sequence number.
    pub reordered: u64,
    /// Datagrams received more than once (the extra copies).
    pub duplicated: u64,
    /// Datagrams of the flow with a wrong length or payload.
    pub corrupted: u64,
    /// Datagrams that were not of the flow.
    pub foreign: u64,
    /// UDP payload bytes sent.
    pub bytes_sent: u64,
    /// UDP payload bytes received intact (distinct datagrams).
    pub bytes_received: u64,
    /// Seconds the sender sent for.
    pub seconds: f64,
}

impl UdpResult {
    /// The share of datagrams the sender tried to send that did not arrive intact
    /// (lost, corrupted, or failed to send), from 0 to 1.
    pub fn loss_ratio(&self) -> f64 {
        let tried = self.sent + self.send_errors;
        if tried == 0 {
            return 0.0;
        }
        (self.lost + self.send_errors) as f64 / tried as f64
    }
}

/// Progress of a running UDP flow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UdpProgress {
    /// Datagrams sent so far.
    pub sent: u64,
    /// Distinct datagrams received so far.
    pub received: u64,
    /// Time since the flow started.
    pub elapsed: Duration,
}

/// Counters the threads share for progress reports.
#[derive(Debug, Default)]
struct Shared {
    sent: AtomicU64,
    received: AtomicU64,
    /// The sender has sent its last datagram.
    sender_done: AtomicBool,
    /// One side failed: the other stops.
    stop: AtomicBool,
}

#[derive(Debug)]
struct SendOutcome {
    sent: u64,
    send_errors: u64,
    seconds: f64,
}

#[derive(Debug)]
struct ReceiveOutcome {
    tracker: SeqTracker,
    corrupted: u64,
    foreign: u64,
}

fn set_int(socket: &UdpSocket, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    vmpls_sys::sockopt::set_int(socket, level, name, value)
}

/// A large receive buffer, so the receiver thread missing a few milliseconds of CPU
/// does not lose datagrams (the FORCE variant passes `rmem_max` as root).
fn grow_receive_buffer(socket: &UdpSocket) {
    const SIZE: libc::c_int = 8 << 20;
    if set_int(socket, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, SIZE).is_err() {
        let _ = set_int(socket, libc::SOL_SOCKET, libc::SO_RCVBUF, SIZE);
    }
}

fn receive(
    socket: UdpSocket,
    opts: &UdpOptions,
    started: Instant,
    shared: &Shared,
) -> anyhow::Result<ReceiveOutcome> {
    let deadline = opts.overall_deadline();
    socket.set_read_timeout(Some(Duration::from_millis(50)))?;
    let mut out = ReceiveOutcome { tracker: SeqTracker::new(), corrupted: 0, foreign: 0 };
    let mut buf = vec![0u8; MAX_DATAGRAM + 1];
    let mut done_at: Option<Instant> = None;
    loop {
        check_interrupt()?;
        if shared.stop.load(Ordering::Relaxed) {
            bail!("stopped because the sender failed, after {} datagrams", out.tracker.received());
        }
        if started.elapsed() > deadline {
            bail!("the flow passed its deadline of {deadline:?} after {} datagrams", out.tracker.received());
        }
        if shared.sender_done.load(Ordering::Acquire) {
            let at = *done_at.get_or_insert_with(Instant::now);
            if at.elapsed() >= opts.drain {
                return Ok(out);
            }
        }
        // Up to 256 datagrams waiting are read before the flags are checked again.
        for _ in 0..256 {
            let n = match socket.recv(&mut buf) {
                Ok(n) => n,
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => break,
                Err(e) => return Err(e).context("receiving"),
            };
            match check(opts.flow, opts.datagram_len, &buf[..n]) {
                Checked::Intact(seq) => {
                    out.tracker.record(seq);
                }
                Checked::Corrupt => out.corrupted += 1,
                Checked::Foreign => out.foreign += 1,
            }
            shared.received.store(out.tracker.received(), Ordering::Relaxed);
        }
    }
}

fn send(
    socket: UdpSocket,
    dst: SocketAddr,
    opts: &UdpOptions,
    shared: &Shared,
) -> anyhow::Result<SendOutcome> {
    socket.set_write_timeout(Some(opts.io_timeout))?;
    let len = opts.datagram_len as u64;
    let mut buf = vec![0u8; opts.datagram_len];
    let begin = Instant::now();
    // Bursts of at most 16 datagrams; what a stall delays catches up in such bursts.
    let pacer = Pacer::new(opts.rate, 16 * len, begin);
    let (mut seq, mut errors) = (0u64, 0u64);
    let mut last_error: Option<io::Error> = None;
    while begin.elapsed() < opts.duration {
        check_interrupt()?;
        if shared.stop.load(Ordering::Relaxed) {
            bail!("stopped because the receiver failed, after {seq} datagrams");
        }
        let now = Instant::now();
        let due = pacer.allowance((seq + errors) * len, now) / len;
        if due == 0 {
            let wait = pacer.wait((seq + errors) * len, len, now);
            std::thread::sleep(wait.clamp(Duration::from_micros(50), Duration::from_millis(10)));
            continue;
        }
        for _ in 0..due.min(16) {
            encode(opts.flow, seq, &mut buf)?;
            match socket.send_to(&buf, dst) {
                Ok(n) if n == buf.len() => seq += 1,
                Ok(n) => bail!("sent {n} of {} bytes of datagram {seq}", buf.len()),
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    bail!("could not send for {:?}: the flow stalled after {seq} datagrams", opts.io_timeout)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // The datagram never left: counted, and the next one gets a new
                    // number only once one is sent (the receiver sees no gap).
                    errors += 1;
                    last_error = Some(e);
                }
            }
        }
        shared.sent.store(seq, Ordering::Relaxed);
        if seq == 0 && errors > 1000 {
            let e = last_error.take().map_or_else(|| "?".to_string(), |e| e.to_string());
            bail!("no datagram could be sent to {dst}: {errors} sends failed, the last with: {e}");
        }
    }
    Ok(SendOutcome { sent: seq, send_errors: errors, seconds: begin.elapsed().as_secs_f64() })
}

fn join<T>(handle: JoinHandle<anyhow::Result<T>>, side: &str) -> anyhow::Result<T> {
    match handle.join() {
        Ok(r) => r.with_context(|| format!("the UDP {side}")),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Runs one UDP flow from a host in namespace `sender_ns` to `dst` (an address of a
/// host in namespace `receiver_ns`) at `opts.rate`, for `opts.duration`, and counts
/// what arrived. `progress` is called every `opts.progress_interval` on the calling
/// thread.
///
/// # Errors
/// Options out of range, a socket that cannot be opened, a send that blocks past
/// `opts.io_timeout`, the overall deadline, or an interrupt.
pub fn run_udp_flow(
    sender_ns: &str,
    receiver_ns: &str,
    dst: IpAddr,
    opts: &UdpOptions,
    progress: &mut dyn FnMut(UdpProgress),
) -> anyhow::Result<UdpResult> {
    if !(HEADER_LEN..=MAX_DATAGRAM).contains(&opts.datagram_len) {
        bail!("a datagram must have {HEADER_LEN} to {MAX_DATAGRAM} bytes, not {}", opts.datagram_len);
    }
    if opts.rate == 0 {
        bail!("the UDP rate must be more than 0 bit/s");
    }
    let started = Instant::now();
    let shared = Arc::new(Shared::default());
    let (port_tx, port_rx) = mpsc::channel();
    let receiver = {
        let (opts, shared) = (opts.clone(), shared.clone());
        netns::spawn_in_netns(receiver_ns, move || {
            let socket = UdpSocket::bind(SocketAddr::new(dst, opts.port))
                .with_context(|| format!("binding UDP {dst} port {}", opts.port));
            let socket = match socket {
                Ok(s) => s,
                Err(e) => {
                    let _ = port_tx.send(None);
                    return Err(e);
                }
            };
            grow_receive_buffer(&socket);
            let _ = port_tx.send(Some(socket.local_addr()?.port()));
            let r = receive(socket, &opts, started, &shared);
            if r.is_err() {
                shared.stop.store(true, Ordering::Relaxed);
            }
            r
        })?
    };
    let port = match port_rx.recv_timeout(Duration::from_secs(10)) {
        Ok(Some(port)) => port,
        _ => {
            shared.stop.store(true, Ordering::Relaxed);
            return Err(join(receiver, "receiver")
                .err()
                .unwrap_or_else(|| anyhow!("the receiver did not start")));
        }
    };
    let sender = {
        let (opts, shared2) = (opts.clone(), shared.clone());
        let spawned = netns::spawn_in_netns(sender_ns, move || {
            let dst = SocketAddr::new(dst, port);
            let unspecified: IpAddr = if dst.is_ipv4() {
                std::net::Ipv4Addr::UNSPECIFIED.into()
            } else {
                std::net::Ipv6Addr::UNSPECIFIED.into()
            };
            let r = UdpSocket::bind(SocketAddr::new(unspecified, 0))
                .context("opening the UDP sender's socket")
                .and_then(|socket| send(socket, dst, &opts, &shared2));
            match &r {
                Ok(_) => shared2.sender_done.store(true, Ordering::Release),
                Err(_) => shared2.stop.store(true, Ordering::Relaxed),
            }
            r
        });
        match spawned {
            Ok(s) => s,
            Err(e) => {
                shared.stop.store(true, Ordering::Relaxed);
                let _ = join(receiver, "receiver");
                return Err(e);
            }
        }
    };
    let mut last_progress = Instant::now();
    while !(receiver.is_finished() && sender.is_finished()) {
        std::thread::sleep(Duration::from_millis(20));
        if last_progress.elapsed() >= opts.progress_interval {
            last_progress = Instant::now();
            progress(UdpProgress {
                sent: shared.sent.load(Ordering::Relaxed),
                received: shared.received.load(Ordering::Relaxed),
                elapsed: started.elapsed(),
            });
        }
    }
    let received = join(receiver, "receiver");
    let sent = join(sender, "sender");
    let (received, sent) = match (received, sent) {
        (Ok(r), Ok(s)) => (r, s),
        // The sender's error explains the receiver's "stopped", and the other way round.
        (Err(_), Err(s)) if !format!("{s:#}").contains("stopped because") => return Err(s),
        (Err(e), _) | (Ok(_), Err(e)) => return Err(e),
    };
    let len = opts.datagram_len as u64;
    let got = received.tracker.received();
    Ok(UdpResult {
        sent: sent.sent,
        send_errors: sent.send_errors,
        received: got,
        lost: sent.sent.saturating_sub(got),
        reordered: received.tracker.reordered(),
        duplicated: received.tracker.duplicated(),
        corrupted: received.corrupted,
        foreign: received.foreign,
        bytes_sent: sent.sent * len,
        bytes_received: got * len,
        seconds: sent.seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datagram(flow: u32, seq: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0; len];
        encode(flow, seq, &mut buf).unwrap();
        buf
    }

    #[test]
    fn encoded_datagrams_check_intact_with_their_header() {
        let d = datagram(7, 0x0102_0304, 1200);
        assert_eq!(&d[..16], b"vmpU\0\0\0\x07\0\0\0\0\x01\x02\x03\x04");
        assert_eq!(check(7, 1200, &d), Checked::Intact(0x0102_0304));
        // Odd lengths, down to the bare header.
        for len in [16, 17, 23, 24, 1201] {
            assert_eq!(check(7, len, &datagram(7, 5, len)), Checked::Intact(5), "{len}");
        }
        // Payloads differ between sequence numbers and flows.
        assert_ne!(datagram(7, 1, 64)[16..], datagram(7, 2, 64)[16..]);
        assert_ne!(datagram(7, 1, 64)[16..], datagram(8, 1, 64)[16..]);
        assert_eq!(encode(1, 1, &mut [0; 15]), Err(DatagramTooShort(15)));
    }

    #[test]
    fn damaged_and_foreign_datagrams_are_told_apart() {
        let d = datagram(3, 9, 300);
        let mut flipped = d.clone();
        flipped[299] ^= 0x80;
        assert_eq!(check(3, 300, &flipped), Checked::Corrupt);
        // Truncated: the right header, the wrong length.
        assert_eq!(check(3, 300, &d[..200]), Checked::Corrupt);
        // A changed sequence number no longer matches the payload.
        let mut renumbered = d.clone();
        renumbered[15] ^= 1;
        assert_eq!(check(3, 300, &renumbered), Checked::Corrupt);
        let mut huge = d.clone();
        huge[8] = 0xff;
        assert_eq!(check(3, 300, &huge), Checked::Corrupt);
        assert_eq!(check(4, 300, &d), Checked::Foreign);
        assert_eq!(check(3, 300, &d[..10]), Checked::Foreign);
        let mut magic = d;
        magic[0] = b'x';
        assert_eq!(check(3, 300, &magic), Checked::Foreign);
        assert_eq!(check(3, 300, &[]), Checked::Foreign);
    }

    #[test]
    fn tracker_counts_reordered_and_duplicated_arrivals() {
        let mut t = SeqTracker::new();
        let arrivals: Vec<_> = [0, 1, 3, 2, 3, 200, 4, 0].iter().map(|&s| t.record(s)).collect();
        use Arrival::*;
        assert_eq!(
            arrivals,
            [InOrder, InOrder, InOrder, Reordered, Duplicate, InOrder, Reordered, Duplicate]
        );
        assert_eq!((t.received(), t.reordered(), t.duplicated()), (6, 2, 2));
        assert_eq!(t.highest(), Some(200));
        assert_eq!(SeqTracker::new().highest(), None);
    }

    #[test]
    fn loss_counts_failed_sends_as_lost() {
        let r = UdpResult { sent: 990, send_errors: 10, received: 980, lost: 10, ..UdpResult::default() };
        assert!((r.loss_ratio() - 0.02).abs() < 1e-12);
        assert_eq!(UdpResult::default().loss_ratio(), 0.0);
    }
}
