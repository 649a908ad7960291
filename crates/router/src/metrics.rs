//! `vmpls run --metrics ADDR:PORT`: Prometheus metrics over HTTP at `/metrics`.
//!
//! Each scrape asks the forwarding loop for its counters (the same request as
//! `vmpls stats`, so both agree) and encodes them with `prometheus-client` in the
//! OpenMetrics text format, which Prometheus reads:
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
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use vmpls_control::api::Stats;

use crate::server::Server;

type Labels = Vec<(String, String)>;

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

fn counters(reg: &mut Registry, name: &str, help: &str, label: &str, values: &[(String, u64)]) {
    let fam = Family::<Labels, Counter>::default();
    reg.register(name, help, fam.clone());
    for (l, v) in values {
        fam.get_or_create(&vec![(label.to_string(), l.clone())]).inc_by(*v);
    }
}

fn gauges(reg: &mut Registry, name: &str, help: &str, label: &str, values: &[(String, u64)]) {
    let fam = Family::<Labels, Gauge>::default();
    reg.register(name, help, fam.clone());
    for (l, v) in values {
        fam.get_or_create(&vec![(label.to_string(), l.clone())]).set(i64::try_from(*v).unwrap_or(i64::MAX));
    }
}

fn gauge(reg: &mut Registry, name: &str, help: &str, v: u64) {
    let g = Gauge::<i64>::default();
    g.set(i64::try_from(v).unwrap_or(i64::MAX));
    reg.register(name, help, g);
}

/// The metrics text for `stats` of router `router`.
pub fn render(router: &str, st: &Stats) -> String {
    let mut reg = Registry::with_prefix("vmpls");
    let info = Family::<Labels, Gauge>::default();
    reg.register("info", "The router", info.clone());
    info.get_or_create(&vec![("router".into(), router.into())]).set(1);
    let per_port = |f: fn(&vmpls_control::api::PortCounters) -> u64| -> Vec<(String, u64)> {
        st.ports.iter().map(|p| (p.name.clone(), f(p))).collect()
    };
    counters(&mut reg, "port_rx_packets", "Frames received", "port", &per_port(|p| p.link.rx_packets));
    counters(&mut reg, "port_rx_bytes", "Bytes received", "port", &per_port(|p| p.link.rx_bytes));
    counters(&mut reg, "port_tx_packets", "Frames sent", "port", &per_port(|p| p.link.tx_packets));
    counters(&mut reg, "port_tx_bytes", "Bytes sent", "port", &per_port(|p| p.link.tx_bytes));
    counters(
        &mut reg,
        "port_rx_dropped",
        "Frames dropped on receive by the port",
        "port",
        &per_port(|p| p.link.rx_dropped),
    );
    counters(
        &mut reg,
        "port_tx_dropped",
        "Frames dropped on send (socket buffer full)",
        "port",
        &per_port(|p| p.link.tx_dropped),
    );
    counters(
        &mut reg,
        "port_tx_errors",
        "Frames the kernel refused on send",
        "port",
        &per_port(|p| p.link.tx_errors),
    );
    counters(
        &mut reg,
        "port_rx_kernel_dropped",
        "Frames the kernel dropped before the router read them (receive queue full)",
        "port",
        &per_port(|p| p.link.rx_kernel_dropped),
    );
    counters(
        &mut reg,
        "port_errors",
        "Errors on the port itself (interface down or deleted, failed receive or send)",
        "port",
        &per_port(|p| p.link.errors),
    );
    counters(
        &mut reg,
        "port_reopened",
        "Times the port was opened again on a re-created interface",
        "port",
        &per_port(|p| p.link.reopened),
    );
    gauges(
        &mut reg,
        "port_detached",
        "1 while the port has no usable interface",
        "port",
        &per_port(|p| u64::from(p.link.detached)),
    );
    let named = |l: &[vmpls_control::api::Counter]| -> Vec<(String, u64)> {
        l.iter().map(|c| (c.name.clone(), c.value)).collect()
    };
    counters(&mut reg, "drops", "Frames the pipeline dropped, by reason", "reason", &named(&st.drops));
    counters(&mut reg, "events", "Things the pipeline did, by kind", "event", &named(&st.events));
    if !st.fast_path.is_empty() {
        counters(
            &mut reg,
            "fast_path",
            "What the in-kernel fast path did, by counter",
            "counter",
            &named(&st.fast_path),
        );
        counters(
            &mut reg,
            "port_fast_path_rx_packets",
            "Frames the in-kernel fast path took from the port",
            "port",
            &per_port(|p| p.fast_path_rx),
        );
        counters(
            &mut reg,
            "port_fast_path_tx_packets",
            "Frames the in-kernel fast path sent out of the port",
            "port",
            &per_port(|p| p.fast_path_tx),
        );
    }
    let per_label = |f: fn(&vmpls_control::api::LabelCounter) -> u64| -> Vec<(String, u64)> {
        st.labels.iter().map(|l| (l.label.to_string(), f(l))).collect()
    };
    counters(
        &mut reg,
        "label_packets",
        "Frames switched per incoming label",
        "label",
        &per_label(|l| l.packets),
    );
    counters(&mut reg, "label_bytes", "Bytes switched per incoming label", "label", &per_label(|l| l.bytes));
    let neigh = Family::<Labels, Gauge>::default();
    reg.register("neighbors", "Neighbour table entries", neigh.clone());
    let reachable = i64::try_from(st.neighbors_reachable).unwrap_or(i64::MAX);
    let all = i64::try_from(st.neighbors).unwrap_or(i64::MAX);
    neigh.get_or_create(&vec![("state".into(), "reachable".into())]).set(reachable);
    neigh.get_or_create(&vec![("state".into(), "incomplete".into())]).set(all - reachable);
    gauge(&mut reg, "label_routes", "Label routes", st.label_routes);
    gauge(
        &mut reg,
        "prefix_routes",
        "Prefix routes in all VRFs, local and connected included",
        st.prefix_routes,
    );
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = encode(&mut out, &reg);
    out
}

/// Serves metrics on `listener` from a thread of its own.
///
/// # Errors
/// The thread could not be started.
pub fn spawn(listener: TcpListener, server: Arc<Server>) -> anyhow::Result<()> {
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(c) => {
                        if let Err(e) = serve(c, &server) {
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

fn serve(mut c: TcpStream, server: &Server) -> anyhow::Result<()> {
    let line = request_line(&mut c)?;
    let mut words = line.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let (status, ctype, body) = match (method, path.split('?').next().unwrap_or("")) {
        ("GET", "/metrics") => match server.stats() {
            Ok(st) => (
                "200 OK",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                render(&server.router_name(), &st),
            ),
            Err(e) => ("503 Service Unavailable", "text/plain", format!("{e:#}\n")),
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
    fn render_has_one_sample_per_counter() {
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
        let text = render("pe1", &st);
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
