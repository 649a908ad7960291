//! A content-checked TCP flow between two namespaces.
//!
//! The sender writes a deterministic pseudo-random byte stream ([`Pattern`]); the
//! receiver regenerates it from the same seed and compares every byte ([`Verifier`]),
//! so a router that corrupts, drops, duplicates or reorders data (or gets a checksum
//! wrong in a way TCP does not catch) is found, with the offset of the first bad
//! byte. Both sides have timeouts (connect, every read and write, and an overall
//! deadline) and check the interrupt flag, so a flow through a broken router ends
//! with an error instead of hanging.
//!
//! The stream is made of 64 KiB blocks, each a window of a seeded random table at an
//! offset derived from the seed and the block number: data moved to the wrong place
//! is detected, and producing the stream costs nothing, so the sender and receiver
//! stay cheap next to the kernel's work.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};

use crate::{check_interrupt, netns};

/// Size of one block of the pattern, in bytes.
pub const BLOCK: usize = 64 * 1024;

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Size of the random table the blocks are cut from, in bytes.
const TABLE: usize = 1 << 20;

/// The deterministic pseudo-random byte stream of a seed.
///
/// Block `b` (of [`BLOCK`] bytes) is the window of a seeded random table of 1 MiB
/// that starts at an offset derived from the seed and `b`. Producing a block costs
/// nothing (it is a slice of the table), which keeps the sender and the receiver fast
/// even in debug builds; every byte still depends on its position in the stream.
#[derive(Clone)]
pub struct Pattern {
    seed: u64,
    /// `TABLE + BLOCK` bytes: a window may start anywhere in the first `TABLE`.
    table: Vec<u8>,
    block_start: usize,
    block_index: u64,
    pos: u64,
}

impl std::fmt::Debug for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pattern").field("seed", &self.seed).field("pos", &self.pos).finish()
    }
}

impl Pattern {
    /// The stream of `seed`, positioned at offset 0.
    pub fn new(seed: u64) -> Self {
        // xorshift64* over a non-zero state derived from the seed.
        let mut state = splitmix64(seed) | 1;
        let mut table = Vec::with_capacity(TABLE + BLOCK);
        while table.len() < TABLE + BLOCK {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            table.extend_from_slice(&state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
        }
        let mut p = Self { seed, table, block_start: 0, block_index: 0, pos: 0 };
        p.block_start = p.window(0);
        p
    }

    /// Where block `index` starts in the table.
    fn window(&self, index: u64) -> usize {
        (splitmix64(self.seed ^ splitmix64(index.wrapping_add(1))) % TABLE as u64) as usize
    }

    /// The offset of the next byte.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The next bytes of the stream, up to the end of the current block (never empty).
    /// Does not advance; see [`Pattern::advance`].
    pub fn peek(&mut self) -> &[u8] {
        let index = self.pos / BLOCK as u64;
        if index != self.block_index {
            self.block_start = self.window(index);
            self.block_index = index;
        }
        let offset = (self.pos % BLOCK as u64) as usize;
        &self.table[self.block_start + offset..self.block_start + BLOCK]
    }

    /// Moves `n` bytes forward.
    pub fn advance(&mut self, n: usize) {
        self.pos += n as u64;
    }

    /// Fills `out` with the next bytes of the stream and advances past them.
    pub fn fill(&mut self, out: &mut [u8]) {
        let mut done = 0;
        while done < out.len() {
            let chunk = self.peek();
            let n = chunk.len().min(out.len() - done);
            out[done..done + n].copy_from_slice(&chunk[..n]);
            self.advance(n);
            done += n;
        }
    }
}

/// Checks received bytes against the stream of a seed.
#[derive(Debug, Clone)]
pub struct Verifier {
    pattern: Pattern,
    first_mismatch: Option<u64>,
}

impl Verifier {
    /// A verifier for the stream of `seed`, expecting offset 0 next.
    pub fn new(seed: u64) -> Self {
        Self { pattern: Pattern::new(seed), first_mismatch: None }
    }

    /// Checks the next `data.len()` bytes of the stream. Once a mismatch is found the
    /// rest is only counted.
    pub fn check(&mut self, mut data: &[u8]) {
        if self.first_mismatch.is_some() {
            self.pattern.advance(data.len());
            return;
        }
        while !data.is_empty() {
            let start = self.pattern.position();
            let expected = self.pattern.peek();
            let n = expected.len().min(data.len());
            if expected[..n] != data[..n] {
                let i = expected[..n].iter().zip(&data[..n]).position(|(a, b)| a != b).unwrap_or(0);
                self.first_mismatch = Some(start + i as u64);
                self.pattern.advance(data.len());
                return;
            }
            self.pattern.advance(n);
            data = &data[n..];
        }
    }

    /// How many bytes were checked (or counted).
    pub fn bytes(&self) -> u64 {
        self.pattern.position()
    }

    /// The offset of the first byte that differed from the stream, if any.
    pub fn first_mismatch(&self) -> Option<u64> {
        self.first_mismatch
    }

    /// Reads `reader` to its end and checks everything it yields.
    pub fn check_reader(&mut self, mut reader: impl Read) -> io::Result<()> {
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.check(&buf[..n]);
        }
    }
}

/// When a flow stops sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Send for this long.
    Duration(Duration),
    /// Send this many bytes.
    Bytes(u64),
}

/// The parameters of a flow.
#[derive(Debug, Clone)]
pub struct FlowOptions {
    /// When the sender stops.
    pub limit: Limit,
    /// The pattern's seed.
    pub seed: u64,
    /// TCP port of the receiver; 0 picks a free one.
    pub port: u16,
    /// How long the sender tries to connect.
    pub connect_timeout: Duration,
    /// How long any single read or write may block before the flow counts as stalled.
    pub io_timeout: Duration,
    /// An upper bound on the whole flow; `None`: the duration limit plus 30 s, or 120 s
    /// for a byte limit.
    pub deadline: Option<Duration>,
    /// How often the progress callback is called.
    pub progress_interval: Duration,
    /// Pace the sender to this many bits a second on average (bursts of at most one
    /// [`BLOCK`]); `None`: as fast as TCP goes.
    pub max_rate: Option<u64>,
}

impl Default for FlowOptions {
    fn default() -> Self {
        Self {
            limit: Limit::Duration(Duration::from_secs(10)),
            seed: 0x0076_6d70_6c73,
            port: 0,
            connect_timeout: Duration::from_secs(5),
            io_timeout: Duration::from_secs(5),
            deadline: None,
            progress_interval: Duration::from_secs(1),
            max_rate: None,
        }
    }
}

impl FlowOptions {
    fn overall_deadline(&self) -> Duration {
        self.deadline.unwrap_or(match self.limit {
            Limit::Duration(d) => d + Duration::from_secs(30),
            Limit::Bytes(_) => Duration::from_secs(120),
        })
    }
}

/// A token bucket that spreads sending over time at a fixed average rate.
///
/// Sans-I/O: the caller passes the time and the bytes it has sent so far, and asks how
/// many more may go now or how long to wait. Sending that fell behind (the sender was
/// blocked) catches up, so the average over the whole flow stays at the rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacer {
    bits_per_second: u64,
    burst: u64,
    start: Instant,
}

impl Pacer {
    /// A pacer for `bits_per_second` (at least 1), starting at `start`, that lets
    /// `burst` bytes go at once.
    pub fn new(bits_per_second: u64, burst: u64, start: Instant) -> Self {
        Self { bits_per_second: bits_per_second.max(1), burst, start }
    }

    /// Bytes due by `now`: the rate times the time since the start, plus the burst.
    fn due(&self, now: Instant) -> u64 {
        let nanos = now.saturating_duration_since(self.start).as_nanos();
        let bytes = nanos * u128::from(self.bits_per_second) / 8_000_000_000;
        u64::try_from(bytes).unwrap_or(u64::MAX).saturating_add(self.burst)
    }

    /// How many bytes may be sent at `now` when `sent` have been sent since the start.
    pub fn allowance(&self, sent: u64, now: Instant) -> u64 {
        self.due(now).saturating_sub(sent)
    }

    /// How long after `now` the allowance reaches `n` bytes (zero if it has).
    pub fn wait(&self, sent: u64, n: u64, now: Instant) -> Duration {
        let short = u128::from(sent.saturating_add(n).saturating_sub(self.due(now)));
        let nanos = (short * 8_000_000_000).div_ceil(u128::from(self.bits_per_second));
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// What a finished flow measured.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowResult {
    /// Bytes the sender wrote.
    pub bytes_sent: u64,
    /// Bytes the receiver read.
    pub bytes_received: u64,
    /// Seconds from the receiver's accept to its end of stream.
    pub seconds: f64,
    /// Throughput from the bytes received, in Gbit/s (10^9 bits a second).
    pub gbps: f64,
    /// `tcpi_total_retrans` of the sender's socket at the end.
    pub retransmits: u32,
    /// Whether every byte matched the stream and all bytes sent arrived.
    pub content_ok: bool,
    /// The offset of the first wrong byte, if any.
    pub first_mismatch: Option<u64>,
}

/// Progress of a running flow, as the receiver sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowProgress {
    /// Bytes received so far.
    pub bytes: u64,
    /// Time since the flow started.
    pub elapsed: Duration,
}

/// Gbit/s for `bytes` in `seconds` (0 if no time passed).
pub fn gbps(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 { bytes as f64 * 8.0 / seconds / 1e9 } else { 0.0 }
}

#[derive(Debug)]
struct ReceiveOutcome {
    bytes: u64,
    seconds: f64,
    first_mismatch: Option<u64>,
}

#[derive(Debug)]
struct SendOutcome {
    bytes: u64,
    retransmits: u32,
}

/// `tcpi_total_retrans` of a TCP socket.
pub fn total_retransmits(stream: &TcpStream) -> io::Result<u32> {
    vmpls_sys::ip::tcp_total_retransmits(stream)
}

/// The other side of the flow failed, so this side stopped.
#[derive(Debug)]
struct Stopped;

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stopped because the other side failed")
    }
}

impl std::error::Error for Stopped {}

/// Waits until `fd` is readable, `timeout` passes, or `stop` is set.
fn wait_readable(fd: BorrowedFd<'_>, timeout: Duration, stop: &AtomicBool) -> anyhow::Result<bool> {
    let deadline = Instant::now() + timeout;
    loop {
        check_interrupt()?;
        if stop.load(Ordering::Relaxed) {
            return Err(Stopped.into());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        if vmpls_sys::wait_readable(fd, left.min(Duration::from_millis(100))) {
            return Ok(true);
        }
    }
}

fn receive(
    listener: TcpListener,
    opts: &FlowOptions,
    started: Instant,
    counter: &AtomicU64,
    stop: &AtomicBool,
) -> anyhow::Result<ReceiveOutcome> {
    let deadline = opts.overall_deadline();
    let accept_wait = opts.connect_timeout + Duration::from_secs(5);
    if !wait_readable(listener.as_fd(), accept_wait, stop)? {
        bail!("no connection within {accept_wait:?}");
    }
    let (mut stream, _) = listener.accept().context("accepting the connection")?;
    drop(listener);
    stream.set_read_timeout(Some(opts.io_timeout))?;
    let begin = Instant::now();
    let mut verifier = Verifier::new(opts.seed);
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        check_interrupt()?;
        if stop.load(Ordering::Relaxed) {
            return Err(
                anyhow::Error::from(Stopped).context(format!("after receiving {} bytes", verifier.bytes()))
            );
        }
        if started.elapsed() > deadline {
            bail!("the flow passed its deadline of {deadline:?} after {} bytes", verifier.bytes());
        }
        let n = match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                bail!("no data for {:?}: the flow stalled after {} bytes", opts.io_timeout, verifier.bytes())
            }
            Err(e) => return Err(e).context(format!("receiving after {} bytes", verifier.bytes())),
        };
        verifier.check(&buf[..n]);
        counter.store(verifier.bytes(), Ordering::Relaxed);
    }
    let seconds = begin.elapsed().as_secs_f64();
    // Closing tells the sender everything arrived.
    drop(stream);
    Ok(ReceiveOutcome { bytes: verifier.bytes(), seconds, first_mismatch: verifier.first_mismatch() })
}

fn send(
    dst: SocketAddr,
    opts: &FlowOptions,
    started: Instant,
    stop: &AtomicBool,
) -> anyhow::Result<SendOutcome> {
    let deadline = opts.overall_deadline();
    let mut stream = TcpStream::connect_timeout(&dst, opts.connect_timeout)
        .with_context(|| format!("connecting to {dst}"))?;
    stream.set_write_timeout(Some(opts.io_timeout))?;
    let mut pattern = Pattern::new(opts.seed);
    let begin = Instant::now();
    let pacer = opts.max_rate.map(|rate| Pacer::new(rate, BLOCK as u64, begin));
    loop {
        check_interrupt()?;
        if stop.load(Ordering::Relaxed) {
            return Err(
                anyhow::Error::from(Stopped).context(format!("after sending {} bytes", pattern.position()))
            );
        }
        if started.elapsed() > deadline {
            bail!("the flow passed its deadline of {deadline:?} after sending {} bytes", pattern.position());
        }
        let sent = pattern.position();
        let chunk = pattern.peek();
        let chunk = match opts.limit {
            Limit::Duration(d) if begin.elapsed() >= d => break,
            Limit::Duration(_) => chunk,
            Limit::Bytes(total) if sent >= total => break,
            Limit::Bytes(total) => &chunk[..chunk.len().min((total - sent) as usize)],
        };
        let chunk = match &pacer {
            None => chunk,
            Some(pacer) => {
                let now = Instant::now();
                let allowed = pacer.allowance(sent, now);
                if allowed == 0 {
                    // Short sleeps: the stop flag, the deadline and the interrupt
                    // stay checked.
                    let wait =
                        pacer.wait(sent, 1, now).clamp(Duration::from_micros(100), Duration::from_millis(20));
                    std::thread::sleep(wait);
                    continue;
                }
                &chunk[..chunk.len().min(usize::try_from(allowed).unwrap_or(usize::MAX))]
            }
        };
        match stream.write(chunk) {
            Ok(0) => bail!("the connection closed after sending {sent} bytes"),
            Ok(n) => pattern.advance(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                bail!("could not send for {:?}: the flow stalled after {sent} bytes", opts.io_timeout)
            }
            Err(e) => return Err(e).context(format!("sending after {sent} bytes")),
        }
    }
    let bytes = pattern.position();
    stream.shutdown(Shutdown::Write).context("closing the sending side")?;
    // Wait for the receiver to close after reading everything, so the retransmit
    // count covers the whole transfer.
    let mut rest = [0u8; 64];
    loop {
        if !wait_readable(stream.as_fd(), opts.io_timeout, stop)? {
            bail!("the receiver did not close within {:?} after the end of the stream", opts.io_timeout);
        }
        match stream.read(&mut rest) {
            Ok(0) => break,
            Ok(_) => bail!("the receiver sent data"),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break,
            Err(e) => return Err(e).context("waiting for the receiver to close"),
        }
    }
    let retransmits = total_retransmits(&stream).context("reading TCP_INFO")?;
    Ok(SendOutcome { bytes, retransmits })
}

fn join<T>(handle: JoinHandle<anyhow::Result<T>>, side: &str) -> anyhow::Result<T> {
    match handle.join() {
        Ok(r) => r.with_context(|| format!("the {side}")),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Runs one TCP flow from a host in namespace `sender_ns` to `dst` (an address of a
/// host in namespace `receiver_ns`), checking every byte. `progress` is called every
/// `opts.progress_interval` on the calling thread.
pub fn run_flow(
    sender_ns: &str,
    receiver_ns: &str,
    dst: IpAddr,
    opts: &FlowOptions,
    progress: &mut dyn FnMut(FlowProgress),
) -> anyhow::Result<FlowResult> {
    let started = Instant::now();
    let counter = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (port_tx, port_rx) = mpsc::channel();

    let receiver = {
        let (opts, counter, stop) = (opts.clone(), counter.clone(), stop.clone());
        netns::spawn_in_netns(receiver_ns, move || {
            let listener = TcpListener::bind(SocketAddr::new(dst, opts.port))
                .with_context(|| format!("listening on {dst} port {}", opts.port));
            let listener = match listener {
                Ok(l) => l,
                Err(e) => {
                    let _ = port_tx.send(None);
                    return Err(e);
                }
            };
            let _ = port_tx.send(Some(listener.local_addr()?.port()));
            let r = receive(listener, &opts, started, &counter, &stop);
            if r.is_err() {
                stop.store(true, Ordering::Relaxed);
            }
            r
        })?
    };
    let port = match port_rx.recv_timeout(Duration::from_secs(10)) {
        Ok(Some(port)) => port,
        _ => {
            stop.store(true, Ordering::Relaxed);
            return Err(join(receiver, "receiver")
                .err()
                .unwrap_or_else(|| anyhow!("the receiver did not start")));
        }
    };
    let sender = {
        let (opts, stop2) = (opts.clone(), stop.clone());
        let spawned = netns::spawn_in_netns(sender_ns, move || {
            let r = send(SocketAddr::new(dst, port), &opts, started, &stop2);
            if r.is_err() {
                stop2.store(true, Ordering::Relaxed);
            }
            r
        });
        match spawned {
            Ok(s) => s,
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
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
            progress(FlowProgress { bytes: counter.load(Ordering::Relaxed), elapsed: started.elapsed() });
        }
    }
    let received = join(receiver, "receiver");
    let sent = join(sender, "sender");
    let (received, sent) = match (received, sent) {
        (Ok(r), Ok(s)) => (r, s),
        // The receiver's error usually explains the sender's.
        // Prefer the error of the side that failed first over the other's "stopped".
        (Err(r), Err(s)) if r.chain().any(|c| c.is::<Stopped>()) => return Err(s),
        (Err(e), _) | (Ok(_), Err(e)) => return Err(e),
    };
    let content_ok = received.first_mismatch.is_none() && received.bytes == sent.bytes;
    Ok(FlowResult {
        bytes_sent: sent.bytes,
        bytes_received: received.bytes,
        seconds: received.seconds,
        gbps: gbps(received.bytes, received.seconds),
        retransmits: sent.retransmits,
        content_ok,
        first_mismatch: received.first_mismatch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(seed: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        Pattern::new(seed).fill(&mut v);
        v
    }

    #[test]
    fn pattern_is_deterministic_and_seeded() {
        let a = stream(7, 3 * BLOCK + 123);
        assert_eq!(a, stream(7, 3 * BLOCK + 123));
        assert_ne!(a[..4096], stream(8, 4096)[..]);
        // Blocks differ from each other, so misplaced data is caught.
        assert_ne!(a[..BLOCK], a[BLOCK..2 * BLOCK]);
        // Not trivially constant.
        assert!(a.iter().any(|&b| b != a[0]));
    }

    #[test]
    fn pattern_peek_and_fill_agree_at_odd_offsets() {
        let whole = stream(3, 2 * BLOCK + 17);
        let mut p = Pattern::new(3);
        let mut out = Vec::new();
        for step in [1usize, 7, 13, BLOCK - 5, 9, 100_000] {
            let mut buf = vec![0; step];
            p.fill(&mut buf);
            out.extend_from_slice(&buf);
        }
        assert_eq!(&out[..whole.len()], &whole[..]);
    }

    #[test]
    fn verifier_accepts_the_stream_in_odd_reads() {
        let data = stream(11, 1_000_003);
        let mut v = Verifier::new(11);
        v.check_reader(io::Cursor::new(&data)).unwrap();
        assert_eq!(v.bytes(), data.len() as u64);
        assert_eq!(v.first_mismatch(), None);
    }

    #[test]
    fn verifier_reports_the_first_corrupted_byte() {
        let mut data = stream(11, 1_000_003);
        data[777_777] ^= 0x01;
        data[900_000] ^= 0xff;
        let mut v = Verifier::new(11);
        v.check_reader(io::Cursor::new(&data)).unwrap();
        assert_eq!(v.first_mismatch(), Some(777_777));
        assert_eq!(v.bytes(), data.len() as u64);
    }

    #[test]
    fn verifier_detects_reordered_and_missing_data() {
        let data = stream(5, 4 * BLOCK);
        // Two 1448-byte segments swapped.
        let mut swapped = data.clone();
        let (a, b) = (10 * 1448, 11 * 1448);
        swapped[a..b].copy_from_slice(&data[b..b + 1448]);
        swapped[b..b + 1448].copy_from_slice(&data[a..b]);
        let mut v = Verifier::new(5);
        v.check(&swapped);
        assert_eq!(v.first_mismatch(), Some(a as u64));
        // A segment missing: everything after it is shifted.
        let mut missing = data[..a].to_vec();
        missing.extend_from_slice(&data[b..]);
        let mut v = Verifier::new(5);
        v.check(&missing);
        assert_eq!(v.first_mismatch(), Some(a as u64));
        // A stream from another seed.
        let mut v = Verifier::new(6);
        v.check(&data[..100]);
        assert!(v.first_mismatch().is_some());
    }

    #[test]
    fn pacer_allows_the_rate_plus_one_burst() {
        let t0 = Instant::now();
        // 8 Mbit/s = 1 MB/s, bursts of 1000 bytes.
        let p = Pacer::new(8_000_000, 1000, t0);
        assert_eq!(p.allowance(0, t0), 1000);
        assert_eq!(p.allowance(1000, t0), 0);
        assert_eq!(p.wait(1000, 1, t0), Duration::from_micros(1));
        let later = t0 + Duration::from_millis(10);
        assert_eq!(p.allowance(1000, later), 10_000);
        assert_eq!(p.allowance(20_000, later), 0);
        // 9 000 bytes short at 1 MB/s: 9 ms.
        assert_eq!(p.wait(20_000, 0, later), Duration::from_millis(9));
        assert_eq!(p.wait(0, 5, later), Duration::ZERO);
        // Time before the start counts as none.
        assert_eq!(p.allowance(0, t0.checked_sub(Duration::from_secs(1)).unwrap_or(t0)), 1000);
    }

    #[test]
    fn gbps_is_bits_per_nanosecond() {
        assert_eq!(gbps(1_250_000_000, 1.0), 10.0);
        assert_eq!(gbps(5, 0.0), 0.0);
    }
}
