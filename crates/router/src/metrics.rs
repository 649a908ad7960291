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
//! | `vmpls_port_errors_total`, `_reopened_total`, `vmpls_port_detached` | `port` | interface faults: down or deleted, re-created, gone now |
//! | `vmpls_drops_total` | `reason` | frames the pipeline dropped, by reason |
//! | `vmpls_events_total` | `event` | label push/swap/pop, software segmentation (`gso_superframes_segmented`, `gso_segments_out`), super-frames passed whole, ICMP sent, ... |
//! | `vmpls_neighbors` | `state` | neighbour table size (`reachable`, `incomplete`) |
//! | `vmpls_label_routes`, `vmpls_prefix_routes` | | forwarding table sizes |
//! | `vmpls_label_packets_total`, `vmpls_label_bytes_total` | `label` | frames and bytes switched per incoming label |
//! | `vmpls_fast_path_total` | `counter` | the in-kernel fast path (`fast-path = "tc"`): `swap`, `push`, `pop`, `ip_forward`, `passed`, `bytes`, ... (its frames are also in the events and label counters) |
//! | `vmpls_port_fast_path_rx_packets_total`, `_tx_packets_total` | `port` | frames the fast path took from and sent out of each port |
//! | `vmpls_info` | `router` | 1 |

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

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
use vmpls_control::api::{Counter, LabelCounter, PortCounters, Stats};

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

/// Serves metrics on `listener` from a thread of its own.
///
/// # Errors
/// The thread could not be started.
pub fn spawn(listener: TcpListener, server: Arc<dyn StatsSource>) -> anyhow::Result<()> {
    let metrics = Metrics::new(server);
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(c) => {
                        if let Err(e) = serve(c, &metrics) {
                            tracing::debug!(error = %e, "metrics request failed");
                        }
                    }
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

/// The request line of an HTTP request, read with a bound on size and time.
fn request_line(c: &mut TcpStream) -> std::io::Result<String> {
    c.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 8192 {
        let n = c.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&buf);
    Ok(text.lines().next().unwrap_or("").to_string())
}

fn serve(mut c: TcpStream, metrics: &Metrics) -> anyhow::Result<()> {
    let line = request_line(&mut c)?;
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
    write!(
        c,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmpls_control::api::{Counter as C, LinkStats, PortCounters};

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
            frr: Vec::new(),
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
            "vmpls_port_reopened_total{port=\"core\"} 1",
            "vmpls_port_detached{port=\"core\"} 1",
            "vmpls_label_routes 2",
            "vmpls_label_packets_total{label=\"1002\"} 5",
            "vmpls_label_bytes_total{label=\"1002\"} 740",
            "vmpls_info{router=\"pe1\"} 1",
            "vmpls_fast_path_total{counter=\"swap\"} 88",
            "vmpls_port_fast_path_rx_packets_total{port=\"core\"} 90",
            "# EOF",
        ] {
            assert!(text.lines().any(|l| l == want), "missing {want:?} in\n{text}");
        }
    }
}
