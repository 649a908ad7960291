//! `vmpls run --metrics ADDR:PORT`: Prometheus metrics over HTTP at `/metrics`.
//!
//! A `prometheus-client` collector reads the counters at each scrape (the same request
//! as `vmpls stats`, so both agree: nothing is copied or kept between scrapes) and
//! encodes them in the OpenMetrics text format, which Prometheus reads:
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `vmpls_port_rx_packets_total`, `_rx_bytes_total`, `_tx_packets_total`, `_tx_bytes_total` | `port` | frames and bytes per port (with the fast path, its frames included) |
//! | `vmpls_port_rx_dropped_total`, `_tx_dropped_total`, `_tx_errors_total` | `port` | frames lost at the port |
//! | `vmpls_port_rx_kernel_dropped_total` | `port` | of the receive drops, those the kernel made (the router fell behind) |
//! | `vmpls_port_tx_waited_total` | `port` | frames that waited in the port for room at the peer (a vhost-user guest's full receive ring) |
//! | `vmpls_port_errors_total`, `_reopened_total`, `vmpls_port_detached` | `port` | interface faults: down or deleted, re-created, gone now |
//! | `vmpls_drops_total` | `reason` | frames the pipeline dropped, by reason |
//! | `vmpls_events_total` | `event` | label push/swap/pop, software segmentation (`gso_superframes_segmented`, `gso_segments_out`), super-frames passed whole, ICMP sent, ... |
//! | `vmpls_neighbors` | `state` | neighbour table size (`reachable`, `incomplete`) |
//! | `vmpls_label_routes`, `vmpls_prefix_routes` | | forwarding table sizes |
//! | `vmpls_label_packets_total`, `vmpls_label_bytes_total` | `label` | frames and bytes switched per incoming label |
//! | `vmpls_fast_path_total` | `counter` | the in-kernel fast path (`fast-path = "tc"`): `swap`, `push`, `pop`, `ip_forward`, `passed`, `bytes`, ... (its frames are also in the events and label counters) |
//! | `vmpls_port_fast_path_rx_packets_total`, `_tx_packets_total` | `port` | frames the fast path took from and sent out of each port |
//! | `vmpls_forwarding_loop_total` | `counter` | where the forwarding loop's time went: `busy_us` (turns that received frames), `idle_us` (awake, none received), `slept_us` (in `poll(2)`), `turns`, `busy_turns` |
//! | `vmpls_vrf_rx_packets_total`, `_rx_bytes_total`, `_tx_packets_total`, `_tx_bytes_total` | `vrf` | frames and bytes of each VRF's ports (all VRFs but the default) |
//! | `vmpls_vrf_label_packets_total`, `_label_bytes_total` | `vrf` | frames and bytes that arrived under the labels that pop into the VRF (its VPN labels) |
//! | `vmpls_info` | `router` | 1 |
//!
//! Each client is served on a thread of its own (at most [`MAX_CLIENTS`] at once; one
//! more is answered 503 at once) and within [`CLIENT_DEADLINE`] from its connection to
//! the end of the answer, its request head at most [`MAX_REQUEST_HEAD`] bytes: a client
//! that trickles its request, never sends one or never reads the answer holds up no
//! scrape.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use std::fmt;
use std::sync::Mutex;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use vmpls_control::api::{Counter, LabelCounter, PortCounters, Stats, VrfStats};

/// Parses `--metrics`: `ADDR:PORT`, or `PORT` / `:PORT` for loopback.
///
/// # Errors
/// Not an address and port.
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    let port_only = s.strip_prefix(':').unwrap_or(s);
    if let Ok(port) = port_only.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse().map_err(|_| format!("\"{s}\" is not ADDR:PORT (like 127.0.0.1:9100 or [::1]:9100) or a port"))
}

/// One metric family of counters, one sample per label value.
fn counters(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &str,
    values: impl IntoIterator<Item = (String, u64)>,
) -> fmt::Result {
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (value, n) in values {
        ConstCounter::new(n).encode(family.encode_family(&[(label, value)])?)?;
    }
    Ok(())
}

/// One metric family of gauges, one sample per label value.
fn gauges(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &str,
    values: impl IntoIterator<Item = (String, u64)>,
) -> fmt::Result {
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (value, n) in values {
        ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX))
            .encode(family.encode_family(&[(label, value)])?)?;
    }
    Ok(())
}

/// One gauge without labels.
fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, n: u64) -> fmt::Result {
    let g = ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX));
    g.encode(enc.encode_descriptor(name, help, None, g.metric_type())?)
}

/// Encodes the counters `st` of router `router` (the table in the module's
/// documentation).
fn encode_stats(enc: &mut DescriptorEncoder, router: &str, st: &Stats) -> fmt::Result {
    gauges(enc, "info", "The router", "router", [(router.to_string(), 1)])?;
    let per_port = |f: fn(&PortCounters) -> u64| st.ports.iter().map(move |p| (p.name.clone(), f(p)));
    counters(enc, "port_rx_packets", "Frames received", "port", per_port(|p| p.link.rx_packets))?;
    counters(enc, "port_rx_bytes", "Bytes received", "port", per_port(|p| p.link.rx_bytes))?;
    counters(enc, "port_tx_packets", "Frames sent", "port", per_port(|p| p.link.tx_packets))?;
    counters(enc, "port_tx_bytes", "Bytes sent", "port", per_port(|p| p.link.tx_bytes))?;
    counters(
        enc,
        "port_rx_dropped",
        "Frames dropped on receive by the port",
        "port",
        per_port(|p| p.link.rx_dropped),
    )?;
    counters(
        enc,
        "port_tx_dropped",
        "Frames dropped on send (socket buffer full)",
        "port",
        per_port(|p| p.link.tx_dropped),
    )?;
    counters(
        enc,
        "port_tx_waited",
        "Frames that waited in the port for room at the peer (a guest's receive ring)",
        "port",
        per_port(|p| p.link.tx_waited),
    )?;
    counters(
        enc,
        "port_tx_errors",
        "Frames the kernel refused on send",
        "port",
        per_port(|p| p.link.tx_errors),
    )?;
    counters(
        enc,
        "port_rx_kernel_dropped",
        "Frames the kernel dropped before the router read them (receive queue full)",
        "port",
        per_port(|p| p.link.rx_kernel_dropped),
    )?;
    counters(
        enc,
        "port_errors",
        "Errors on the port itself (interface down or deleted, failed receive or send)",
        "port",
        per_port(|p| p.link.errors),
    )?;
    counters(
        enc,
        "port_reopened",
        "Times the port was opened again on a re-created interface",
        "port",
        per_port(|p| p.link.reopened),
    )?;
    gauges(
        enc,
        "port_detached",
        "1 while the port has no usable interface",
        "port",
        per_port(|p| u64::from(p.link.detached)),
    )?;
    let named = |l: &[Counter]| l.iter().map(|c| (c.name.clone(), c.value)).collect::<Vec<_>>();
    counters(enc, "drops", "Frames the pipeline dropped, by reason", "reason", named(&st.drops))?;
    counters(enc, "events", "Things the pipeline did, by kind", "event", named(&st.events))?;
    if !st.forwarding_loop.is_empty() {
        counters(
            enc,
            "forwarding_loop",
            "Where the forwarding loop's time went (microseconds) and its turns",
            "counter",
            named(&st.forwarding_loop),
        )?;
    }
    if !st.fast_path.is_empty() {
        counters(
            enc,
            "fast_path",
            "What the in-kernel fast path did, by counter",
            "counter",
            named(&st.fast_path),
        )?;
        counters(
            enc,
            "port_fast_path_rx_packets",
            "Frames the in-kernel fast path took from the port",
            "port",
            per_port(|p| p.fast_path_rx),
        )?;
        counters(
            enc,
            "port_fast_path_tx_packets",
            "Frames the in-kernel fast path sent out of the port",
            "port",
            per_port(|p| p.fast_path_tx),
        )?;
    }
    let per_label = |f: fn(&LabelCounter) -> u64| st.labels.iter().map(move |l| (l.label.to_string(), f(l)));
    counters(enc, "label_packets", "Frames switched per incoming label", "label", per_label(|l| l.packets))?;
    counters(enc, "label_bytes", "Bytes switched per incoming label", "label", per_label(|l| l.bytes))?;
    if !st.vrfs.is_empty() {
        let per_vrf = |f: fn(&VrfStats) -> u64| st.vrfs.iter().map(move |v| (v.vrf.clone(), f(&v.stats)));
        counters(
            enc,
            "vrf_rx_packets",
            "Frames received on the VRF's ports",
            "vrf",
            per_vrf(|v| v.rx_packets),
        )?;
        counters(enc, "vrf_rx_bytes", "Bytes received on the VRF's ports", "vrf", per_vrf(|v| v.rx_bytes))?;
        counters(
            enc,
            "vrf_tx_packets",
            "Frames sent out of the VRF's ports",
            "vrf",
            per_vrf(|v| v.tx_packets),
        )?;
        counters(enc, "vrf_tx_bytes", "Bytes sent out of the VRF's ports", "vrf", per_vrf(|v| v.tx_bytes))?;
        counters(
            enc,
            "vrf_label_packets",
            "Frames that arrived under the labels popping into the VRF",
            "vrf",
            per_vrf(|v| v.label_packets),
        )?;
        counters(
            enc,
            "vrf_label_bytes",
            "Bytes that arrived under the labels popping into the VRF",
            "vrf",
            per_vrf(|v| v.label_bytes),
        )?;
    }
    let incomplete = st.neighbors.saturating_sub(st.neighbors_reachable);
    gauges(
        enc,
        "neighbors",
        "Neighbour table entries",
        "state",
        [("reachable".to_string(), st.neighbors_reachable), ("incomplete".to_string(), incomplete)],
    )?;
    gauge(enc, "label_routes", "Label routes", st.label_routes)?;
    gauge(enc, "prefix_routes", "Prefix routes in all VRFs, local and connected included", st.prefix_routes)
}

/// The router's counters as a prometheus-client collector: read from the router at
/// each scrape (the same request `vmpls stats` makes, so both agree), nothing kept in
/// between.
struct StatsCollector {
    source: Arc<dyn StatsSource>,
    /// Why the last scrape could not read the counters, for the 503 answer.
    failure: Mutex<Option<String>>,
}

impl fmt::Debug for StatsCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StatsCollector")
    }
}

impl Collector for StatsCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let st = self.source.stats().map_err(|e| {
            *self.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("{e:#}"));
            fmt::Error
        })?;
        encode_stats(&mut enc, &self.source.router_name(), &st)
    }
}

/// The metrics endpoint's registry: the counters of `source`, read at each scrape.
struct Metrics {
    registry: Registry,
    collector: Arc<StatsCollector>,
}

impl Metrics {
    fn new(source: Arc<dyn StatsSource>) -> Metrics {
        let collector = Arc::new(StatsCollector { source, failure: Mutex::new(None) });
        let mut registry = Registry::with_prefix("vmpls");
        registry.register_collector(Box::new(collector.clone()));
        Metrics { registry, collector }
    }

    /// The metrics text now, or why the router's counters could not be read.
    fn scrape(&self) -> Result<String, String> {
        let mut out = String::new();
        match encode(&mut out, &self.registry) {
            Ok(()) => Ok(out),
            Err(_) => Err(self
                .collector
                .failure
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
                .unwrap_or_else(|| "the counters could not be encoded".into())),
        }
    }
}

/// Where the metrics come from at each scrape: the router's counters now (the control
/// server implements it, with the same request `vmpls stats` makes).
pub trait StatsSource: Send + Sync {
    /// The router's name, for `vmpls_info`.
    fn router_name(&self) -> String;
    /// The counters now.
    ///
    /// # Errors
    /// The forwarding loop did not answer.
    fn stats(&self) -> anyhow::Result<Stats>;
}

/// How long one client may take, from its connection to the last byte of the answer: a
/// client that sends its request a byte at a time, or never, or does not read the
/// answer, is cut off then.
pub const CLIENT_DEADLINE: Duration = Duration::from_secs(5);
/// Clients served at once, each on a thread of its own; one more is answered 503 at once.
pub const MAX_CLIENTS: usize = 8;
/// The most a request's head (request line and headers) may hold: an answer 431 beyond.
pub const MAX_REQUEST_HEAD: usize = 8192;

/// How the endpoint treats its clients ([`CLIENT_DEADLINE`], [`MAX_CLIENTS`] for the
/// router; tests shorten them).
#[derive(Debug, Clone, Copy)]
struct ClientLimits {
    deadline: Duration,
    max_clients: usize,
}

/// Serves metrics on `listener`: a thread accepts, each client is served on a thread of
/// its own within [`CLIENT_DEADLINE`], at most [`MAX_CLIENTS`] at once, so a slow client
/// holds up no scrape.
///
/// # Errors
/// The thread could not be started.
pub fn spawn(listener: TcpListener, server: Arc<dyn StatsSource>) -> anyhow::Result<()> {
    spawn_with(listener, server, ClientLimits { deadline: CLIENT_DEADLINE, max_clients: MAX_CLIENTS })
}

fn spawn_with(
    listener: TcpListener,
    server: Arc<dyn StatsSource>,
    limits: ClientLimits,
) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::new(server));
    let active = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(c) => accept(c, &metrics, &active, limits),
                    Err(e) => {
                        tracing::warn!(error = %e, "metrics accept failed");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        })
        .context("starting the metrics thread")?;
    Ok(())
}

/// One client served while it counts in `active`.
struct ActiveClient(Arc<AtomicUsize>);

impl Drop for ActiveClient {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Starts serving client `c` on a thread of its own, or answers 503 without waiting
/// when [`ClientLimits::max_clients`] are being served.
fn accept(c: TcpStream, metrics: &Arc<Metrics>, active: &Arc<AtomicUsize>, limits: ClientLimits) {
    if active.fetch_add(1, Ordering::Relaxed) >= limits.max_clients {
        active.fetch_sub(1, Ordering::Relaxed);
        // Best effort: the answer fits any socket buffer, and nothing waits for it.
        let _ = c.set_nonblocking(true);
        let _ = (&c).write_all(&answer(
            "503 Service Unavailable",
            "text/plain",
            &format!("busy: {} scrapes in progress; try again\n", limits.max_clients),
        ));
        return;
    }
    let guard = ActiveClient(active.clone());
    let metrics = metrics.clone();
    let spawned = std::thread::Builder::new().name("metrics-client".into()).spawn(move || {
        let _guard = guard;
        let deadline = Instant::now() + limits.deadline;
        if let Err(e) = serve(c, &metrics, deadline) {
            tracing::debug!(error = %e, "metrics request failed");
        }
    });
    if let Err(e) = spawned {
        // The closure, and the guard with it, is dropped: the client is not counted.
        tracing::warn!(error = %e, "cannot start a thread for a metrics client");
    }
}

/// What the client sent before its headers ended.
enum RequestHead {
    /// The request line.
    Line(String),
    /// More than [`MAX_REQUEST_HEAD`] bytes without the end of the headers.
    TooLarge,
}

/// The time left before `deadline`, or `TimedOut` if none.
fn time_left(deadline: Instant) -> std::io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the client's time is up"));
    }
    Ok(left)
}

/// The request line of an HTTP request, read with a bound on size and a deadline for the
/// whole of it (not per read: a client sending a byte a second would reset that).
fn request_head(c: &mut TcpStream, deadline: Instant) -> std::io::Result<RequestHead> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        if buf.len() > MAX_REQUEST_HEAD {
            return Ok(RequestHead::TooLarge);
        }
        c.set_read_timeout(Some(time_left(deadline)?))?;
        let n = match c.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&buf);
    Ok(RequestHead::Line(text.lines().next().unwrap_or("").to_string()))
}

/// Writes all of `bytes` before `deadline` (a client that reads slowly is cut off then).
fn write_before(c: &mut TcpStream, mut bytes: &[u8], deadline: Instant) -> std::io::Result<()> {
    while !bytes.is_empty() {
        c.set_write_timeout(Some(time_left(deadline)?))?;
        match c.write(bytes) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// After an answer given before the whole request was read: says so (FIN) and reads what
/// the client still sends, a bounded amount until `deadline`, so that closing with
/// unread bytes does not reset the connection before the client has read the answer.
fn discard_rest(c: &mut TcpStream, deadline: Instant) {
    let _ = c.shutdown(std::net::Shutdown::Write);
    let mut chunk = [0u8; 4096];
    for _ in 0..64 {
        let Ok(left) = time_left(deadline) else { return };
        if c.set_read_timeout(Some(left)).is_err() || !matches!(c.read(&mut chunk), Ok(n) if n > 0) {
            return;
        }
    }
}

/// An HTTP answer that closes the connection.
fn answer(status: &str, ctype: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn serve(mut c: TcpStream, metrics: &Metrics, deadline: Instant) -> anyhow::Result<()> {
    let line = match request_head(&mut c, deadline)? {
        RequestHead::Line(line) => line,
        RequestHead::TooLarge => {
            let body = format!("request head over {MAX_REQUEST_HEAD} bytes\n");
            write_before(
                &mut c,
                &answer("431 Request Header Fields Too Large", "text/plain", &body),
                deadline,
            )?;
            discard_rest(&mut c, deadline);
            return Ok(());
        }
    };
    let mut words = line.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let (status, ctype, body) = match (method, path.split('?').next().unwrap_or("")) {
        ("GET", "/metrics") => match metrics.scrape() {
            Ok(text) => ("200 OK", "application/openmetrics-text; version=1.0.0; charset=utf-8", text),
            Err(e) => ("503 Service Unavailable", "text/plain", format!("{e}\n")),
        },
        ("GET", "/") => ("200 OK", "text/plain", "vmpls: metrics at /metrics\n".to_string()),
        ("GET", _) => ("404 Not Found", "text/plain", "not found; metrics are at /metrics\n".to_string()),
        _ => ("405 Method Not Allowed", "text/plain", "only GET\n".to_string()),
    };
    write_before(&mut c, &answer(status, ctype, &body), deadline)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmpls_control::api::{Counter as C, LinkStats, PortCounters};

    /// A router whose counters never change.
    struct Quiet;
    impl StatsSource for Quiet {
        fn router_name(&self) -> String {
            "pe1".into()
        }
        fn stats(&self) -> anyhow::Result<Stats> {
            Ok(Stats {
                ports: Vec::new(),
                drops: Vec::new(),
                events: Vec::new(),
                neighbors: 0,
                neighbors_reachable: 0,
                label_routes: 0,
                prefix_routes: 0,
                labels: Vec::new(),
                fast_path: Vec::new(),
                forwarding_loop: Vec::new(),
                frr: Vec::new(),
                vrfs: Vec::new(),
            })
        }
    }

    /// An endpoint on a loopback port of its own.
    fn endpoint(limits: ClientLimits) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        spawn_with(listener, Arc::new(Quiet), limits).unwrap();
        addr
    }

    /// Sends `request` and reads the answer, giving up after `wait`.
    fn ask(addr: SocketAddr, request: &[u8], wait: Duration) -> std::io::Result<String> {
        let mut c = TcpStream::connect(addr)?;
        c.set_read_timeout(Some(wait))?;
        c.write_all(request)?;
        let mut text = String::new();
        c.read_to_string(&mut text)?;
        Ok(text)
    }

    const SCRAPE: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: pe1\r\n\r\n";

    #[test]
    fn a_slow_client_holds_up_no_scrape() {
        let addr = endpoint(ClientLimits { deadline: CLIENT_DEADLINE, max_clients: MAX_CLIENTS });
        // One client never sends anything, another sends its request a byte at a time.
        let _silent = TcpStream::connect(addr).unwrap();
        let trickler = std::thread::spawn(move || {
            let mut c = TcpStream::connect(addr).unwrap();
            for b in b"GET /metrics HTTP/1.1\r\n".iter().take(12) {
                if c.write_all(&[*b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        });
        std::thread::sleep(Duration::from_millis(200));
        let start = Instant::now();
        let text = ask(addr, SCRAPE, Duration::from_secs(2)).expect("a scrape while slow clients hang on");
        assert!(text.starts_with("HTTP/1.1 200 OK") && text.contains("vmpls_info"), "{text}");
        assert!(start.elapsed() < Duration::from_secs(1), "the scrape took {:?}", start.elapsed());
        trickler.join().unwrap();
    }

    #[test]
    fn a_trickling_client_is_cut_off_at_its_deadline() {
        let deadline = Duration::from_millis(600);
        let addr = endpoint(ClientLimits { deadline, max_clients: MAX_CLIENTS });
        let c = TcpStream::connect(addr).unwrap();
        let mut writer = c.try_clone().unwrap();
        let start = Instant::now();
        // A byte every 100 ms for up to 4 s: each read finishes well within any per-read
        // timeout, so only a deadline for the whole request ends it.
        let trickler = std::thread::spawn(move || {
            for _ in 0..40 {
                if writer.write_all(b"G").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let mut c = c;
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 64];
        // Closed (0) or reset: either way the server let go.
        let _ = c.read(&mut buf);
        let held = start.elapsed();
        assert!(held >= deadline && held < Duration::from_secs(2), "the server held the client {held:?}");
        trickler.join().unwrap();
    }

    #[test]
    fn an_endless_request_head_is_refused_with_431() {
        let addr = endpoint(ClientLimits { deadline: CLIENT_DEADLINE, max_clients: MAX_CLIENTS });
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        // No end of line, ever: the server stops reading at its bound and says why.
        let junk = vec![b'X'; 4 * MAX_REQUEST_HEAD];
        let _ = c.write_all(&junk);
        let mut text = Vec::new();
        let _ = c.read_to_end(&mut text);
        let text = String::from_utf8_lossy(&text);
        assert!(text.starts_with("HTTP/1.1 431"), "{text}");
    }

    #[test]
    fn clients_beyond_the_cap_are_answered_503_at_once() {
        let addr = endpoint(ClientLimits { deadline: CLIENT_DEADLINE, max_clients: 2 });
        let _held: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
        std::thread::sleep(Duration::from_millis(200));
        let start = Instant::now();
        // The answer comes before any request is read (bytes sent and never read would
        // reset the connection as it closes).
        let text = ask(addr, b"", Duration::from_secs(2)).unwrap();
        assert!(text.starts_with("HTTP/1.1 503") && text.contains("busy"), "{text}");
        assert!(start.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn addresses_default_to_loopback() {
        assert_eq!(parse_addr("9100").unwrap(), "127.0.0.1:9100".parse().unwrap());
        assert_eq!(parse_addr(":9100").unwrap(), "127.0.0.1:9100".parse().unwrap());
        assert_eq!(parse_addr("[::1]:9100").unwrap(), "[::1]:9100".parse().unwrap());
        assert!(parse_addr("localhost").unwrap_err().contains("ADDR:PORT"));
    }

    #[test]
    fn a_scrape_without_the_forwarding_loop_says_why() {
        struct Stopped;
        impl StatsSource for Stopped {
            fn router_name(&self) -> String {
                "pe1".into()
            }
            fn stats(&self) -> anyhow::Result<Stats> {
                anyhow::bail!("the forwarding loop has stopped")
            }
        }
        let metrics = Metrics::new(Arc::new(Stopped));
        assert_eq!(metrics.scrape().unwrap_err(), "the forwarding loop has stopped");
    }

    #[test]
    fn a_scrape_has_one_sample_per_counter() {
        let st = Stats {
            ports: vec![PortCounters {
                name: "core".into(),
                link: LinkStats {
                    rx_packets: 7,
                    tx_bytes: 1500,
                    rx_kernel_dropped: 4,
                    tx_waited: 6,
                    reopened: 1,
                    detached: true,
                    ..LinkStats::default()
                },
                pipeline_rx: 7,
                pipeline_tx: 1,
                fast_path_rx: 90,
                fast_path_tx: 0,
            }],
            drops: vec![C { name: "unknown_label".into(), value: 3 }],
            events: vec![C { name: "gso_segments_out".into(), value: 44 }],
            neighbors: 3,
            neighbors_reachable: 2,
            label_routes: 2,
            prefix_routes: 9,
            labels: vec![vmpls_control::api::LabelCounter { label: 1002, packets: 5, bytes: 740 }],
            fast_path: vec![C { name: "swap".into(), value: 88 }],
            forwarding_loop: vec![C { name: "busy_us".into(), value: 1200 }],
            frr: Vec::new(),
            vrfs: Vec::new(),
        };
        struct Fixed(Stats);
        impl StatsSource for Fixed {
            fn router_name(&self) -> String {
                "pe1".into()
            }
            fn stats(&self) -> anyhow::Result<Stats> {
                Ok(self.0.clone())
            }
        }
        let text = Metrics::new(Arc::new(Fixed(st))).scrape().unwrap();
        for want in [
            "vmpls_port_rx_packets_total{port=\"core\"} 7",
            "vmpls_port_tx_bytes_total{port=\"core\"} 1500",
            "vmpls_drops_total{reason=\"unknown_label\"} 3",
            "vmpls_events_total{event=\"gso_segments_out\"} 44",
            "vmpls_neighbors{state=\"incomplete\"} 1",
            "vmpls_port_rx_kernel_dropped_total{port=\"core\"} 4",
            "vmpls_port_tx_waited_total{port=\"core\"} 6",
            "vmpls_port_reopened_total{port=\"core\"} 1",
            "vmpls_port_detached{port=\"core\"} 1",
            "vmpls_label_routes 2",
            "vmpls_label_packets_total{label=\"1002\"} 5",
            "vmpls_label_bytes_total{label=\"1002\"} 740",
            "vmpls_info{router=\"pe1\"} 1",
            "vmpls_fast_path_total{counter=\"swap\"} 88",
            "vmpls_port_fast_path_rx_packets_total{port=\"core\"} 90",
            "vmpls_forwarding_loop_total{counter=\"busy_us\"} 1200",
            "# EOF",
        ] {
            assert!(text.lines().any(|l| l == want), "missing {want:?} in\n{text}");
        }
    }
}
