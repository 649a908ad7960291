//! `vmpls bench soak`: the seed lab's vmpls routers under mixed TCP and UDP traffic for a
//! long time, while the label-switched paths change under the traffic every few seconds.
//!
//! The lab is the `vmpls-mpls` mode of the seed lab (ce1 -- pe1 -- p -- pe2 -- ce2, built
//! by [`vmpls_lab::seed`]). Four flows run at once, each paced below saturation, each
//! checked end to end:
//! - TCP ce1 -> ce2 over IPv4 and ce2 -> ce1 over IPv6, every byte compared with the
//!   seeded stream ([`vmpls_lab::traffic`]);
//! - UDP ce1 -> ce2 over IPv6 and ce2 -> ce1 over IPv4 at a fixed rate, with sequence
//!   numbers ([`vmpls_lab::udp`]).
//!
//! Route changes, make-before-break, through the routers' control sockets: two
//! equivalent LSPs (A: the configs' labels 1002/2002 and 1001/2001; B: 1003/2003 and
//! 1004/2004). Every `change_every` the next LSP's label routes are added (egress pops
//! first, then p's swaps), then pe1's and pe2's four prefix routes (IPv4 and IPv6, both
//! directions) are replaced to push its labels, and half an interval later the previous
//! LSP's label routes are deleted (p's swaps first). Before a deletion, p's per-label
//! counters must show that the LSP carried traffic both ways while it was in use.
//!
//! At the end: bytes per flow, UDP loss, each router's drops by reason over the run
//! (traffic the soak did not send, like the hosts' IPv6 multicast, is listed apart),
//! and each router's resident memory after warm-up and at the end.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use vmpls_control::api::{Family, Request, Stats};
use vmpls_lab::IpPrefix;
use vmpls_lab::seed::{CE1_V4, CE1_V6, CE2_V4, CE2_V6, SeedLab, SeedParams};
use vmpls_lab::traffic::{FlowOptions, FlowResult, Limit, run_flow};
use vmpls_lab::udp::{UdpOptions, UdpResult, run_udp_flow};

use vmpls_router::client::Connection;

/// Drop reasons the soak's own traffic does not cause: listed in the report, not counted
/// against it.
pub use vmpls_lab::stats::BACKGROUND_DROPS;

/// The share of its pace a TCP flow must reach: less means the path stalled it.
pub const MIN_TCP_PACE: f64 = 0.5;

/// The routers of the seed lab.
const ROUTERS: [&str; 3] = ["pe1", "p", "pe2"];

/// Parses a duration the way people write one: `90s`, `10m`, `1h`, `1h30m`, `500ms`;
/// a bare number is seconds.
///
/// # Errors
/// Empty text, a number without digits, an unknown unit, or a value too large.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("a duration is needed, like 90s, 10m or 1h".into());
    }
    if let Ok(secs) = text.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!(
                "\"{text}\" is not a duration; expected a number and a unit, like 90s, 10m or 1h"
            ));
        }
        let n: u64 = rest[..digits].parse().map_err(|_| format!("\"{text}\": the number is too large"))?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let part = match unit {
            "ms" => Some(Duration::from_millis(n)),
            "s" | "sec" | "secs" => Some(Duration::from_secs(n)),
            "m" | "min" | "mins" => n.checked_mul(60).map(Duration::from_secs),
            "h" | "hr" | "hour" | "hours" => n.checked_mul(3600).map(Duration::from_secs),
            _ => return Err(format!("\"{text}\": unknown unit \"{unit}\"; use ms, s, m or h")),
        };
        total = part.and_then(|p| total.checked_add(p)).ok_or_else(|| format!("\"{text}\" is too long"))?;
    }
    Ok(total)
}

/// What `vmpls bench soak` does.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    /// The `vmpls` binary the routers run as (`vmpls run --config FILE`).
    pub router_binary: PathBuf,
    /// How long the traffic runs.
    pub duration: Duration,
    /// Each TCP flow's rate, bits a second.
    pub tcp_rate: u64,
    /// Each UDP flow's rate, bits a second of UDP payload.
    pub udp_rate: u64,
    /// How often the path changes.
    pub change_every: Duration,
    /// How often a progress line is printed.
    pub progress_every: Duration,
    /// Time after the traffic starts before the routers' memory is first measured.
    pub warmup: Duration,
    /// The largest share of UDP datagrams that may go missing, per flow (0 to 1).
    pub max_udp_loss: f64,
    /// The largest growth of a router's resident memory from warm-up to the end, KiB.
    pub max_rss_growth_kib: u64,
    /// The routers run with the in-kernel fast path (`fast-path = "tc"`).
    pub fast_path: bool,
}

impl SoakOptions {
    /// Defaults for a run of `duration`: 200 Mbit/s a TCP flow, 50 Mbit/s a UDP flow, a
    /// path change every 3 s, progress every 10 s (less for short runs), warm-up 5 s (a
    /// quarter of short runs), at most 0.1 % UDP loss and 10 MiB memory growth.
    pub fn new(router_binary: impl Into<PathBuf>, duration: Duration) -> Self {
        Self {
            router_binary: router_binary.into(),
            duration,
            tcp_rate: 200_000_000,
            udp_rate: 50_000_000,
            change_every: Duration::from_secs(3),
            progress_every: (duration / 12).clamp(Duration::from_secs(2), Duration::from_secs(10)),
            warmup: (duration / 4).min(Duration::from_secs(5)),
            max_udp_loss: 0.001,
            max_rss_growth_kib: 10 * 1024,
            fast_path: false,
        }
    }

    fn validate(&self) -> anyhow::Result<()> {
        if self.change_every < Duration::from_millis(200) {
            bail!("routes can change at most every 200 ms, not every {:?}", self.change_every);
        }
        if self.duration < 2 * self.change_every {
            bail!(
                "a soak of {:?} is too short to change the path every {:?}: give at least {:?}",
                self.duration,
                self.change_every,
                2 * self.change_every
            );
        }
        if self.tcp_rate == 0 || self.udp_rate == 0 {
            bail!("the TCP and UDP rates must be more than 0");
        }
        if !self.router_binary.is_file() {
            bail!("router binary {} not found", self.router_binary.display());
        }
        Ok(())
    }
}

/// One LSP through the seed lab, both directions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lsp {
    /// pe1 pushes it toward p (traffic to ce2).
    pe1_push: u32,
    /// p swaps `pe1_push` to it toward pe2, which pops it.
    p_to_pe2: u32,
    /// pe2 pushes it toward p (traffic to ce1).
    pe2_push: u32,
    /// p swaps `pe2_push` to it toward pe1, which pops it.
    p_to_pe1: u32,
}

impl Lsp {
    fn of(params: &SeedParams) -> Self {
        Self {
            pe1_push: params.pe1_push,
            p_to_pe2: params.p_to_pe2,
            pe2_push: params.pe2_push,
            p_to_pe1: params.p_to_pe1,
        }
    }

    /// The label routes that make it, in make-before-break order: the egress pops,
    /// then p's swaps.
    fn label_routes(&self) -> [(&'static str, String); 4] {
        [
            ("pe2", format!("{}", self.p_to_pe2)),
            ("pe1", format!("{}", self.p_to_pe1)),
            ("p", format!("{} as {} via inet 198.18.20.2 dev east", self.pe1_push, self.p_to_pe2)),
            ("p", format!("{} as {} via inet 198.18.10.1 dev west", self.pe2_push, self.p_to_pe1)),
        ]
    }

    /// The prefix routes at the PEs that send traffic into it.
    fn prefix_routes(&self) -> [(&'static str, String); 4] {
        [
            ("pe1", format!("198.18.2.0/24 encap mpls {} via 198.18.10.2 dev core", self.pe1_push)),
            ("pe1", format!("2001:db8:2::/64 encap mpls {} via 2001:db8:10::2 dev core", self.pe1_push)),
            ("pe2", format!("198.18.1.0/24 encap mpls {} via 198.18.20.1 dev core", self.pe2_push)),
            ("pe2", format!("2001:db8:1::/64 encap mpls {} via 2001:db8:20::1 dev core", self.pe2_push)),
        ]
    }
}

/// The LSP that replaces the configs' one every other change.
const SECOND_LSP: Lsp = Lsp { pe1_push: 1003, p_to_pe2: 2003, pe2_push: 1004, p_to_pe1: 2004 };

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    Tcp,
    Udp,
}

/// One flow of the soak.
#[derive(Debug, Clone, Copy)]
struct FlowSpec {
    name: &'static str,
    proto: Proto,
    from: &'static str,
    to: &'static str,
    /// The receiver's address (a prefix constant of the seed lab).
    dst: &'static str,
}

/// Both directions, both families, each route the soak changes carrying some flow.
const FLOWS: [FlowSpec; 4] = [
    FlowSpec { name: "tcp4 ce1->ce2", proto: Proto::Tcp, from: "ce1", to: "ce2", dst: CE2_V4 },
    FlowSpec { name: "tcp6 ce2->ce1", proto: Proto::Tcp, from: "ce2", to: "ce1", dst: CE1_V6 },
    FlowSpec { name: "udp6 ce1->ce2", proto: Proto::Udp, from: "ce1", to: "ce2", dst: CE2_V6 },
    FlowSpec { name: "udp4 ce2->ce1", proto: Proto::Udp, from: "ce2", to: "ce1", dst: CE1_V4 },
];

fn host_addr(prefix: &str) -> anyhow::Result<IpAddr> {
    let p: IpPrefix = prefix.parse().map_err(|e| anyhow!("bad built-in prefix {prefix}: {e}"))?;
    Ok(p.addr())
}

/// What one flow measured (or why it failed).
#[derive(Debug, Clone, PartialEq)]
pub enum FlowOutcome {
    /// A content-checked TCP flow.
    Tcp(FlowResult),
    /// A UDP flow with sequence numbers.
    Udp(UdpResult),
    /// The flow failed before it could report.
    Failed(String),
}

/// One flow in the report.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowReport {
    /// `tcp4 ce1->ce2`, ...
    pub name: String,
    /// `tcp` or `udp`.
    pub proto: &'static str,
    /// The outcome.
    pub outcome: FlowOutcome,
}

/// One router in the report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouterReport {
    /// `pe1`, `p` or `pe2`.
    pub name: String,
    /// Its process id.
    pub pid: u32,
    /// Resident memory after warm-up, KiB.
    pub rss_start_kib: u64,
    /// Resident memory at the end of the traffic, KiB.
    pub rss_end_kib: u64,
    /// The most resident memory seen at a progress sample, KiB.
    pub rss_max_kib: u64,
    /// The kernel's high-water mark of resident memory (`VmHWM`), KiB.
    pub rss_hwm_kib: u64,
    /// Drops over the run by reason, non-zero ones, excluding [`BACKGROUND_DROPS`].
    pub drops: BTreeMap<String, u64>,
    /// Drops over the run by reason among [`BACKGROUND_DROPS`], non-zero ones.
    pub background_drops: BTreeMap<String, u64>,
    /// How the router exited when stopped (`None`: it was not stopped cleanly).
    pub exit: Option<String>,
}

impl RouterReport {
    /// Resident memory growth from warm-up to the end, KiB (negative: it shrank).
    pub fn rss_growth_kib(&self) -> i64 {
        self.rss_end_kib as i64 - self.rss_start_kib as i64
    }
}

/// The result of a soak.
#[derive(Debug, Clone, PartialEq)]
pub struct SoakReport {
    /// How long the traffic ran, seconds.
    pub seconds: f64,
    /// The options' rates and interval, for the record.
    pub tcp_rate: u64,
    /// Each UDP flow's rate, bit/s.
    pub udp_rate: u64,
    /// The path change interval.
    pub change_every: Duration,
    /// Route requests that changed a router's tables (adds, replaces, deletes).
    pub route_changes: u64,
    /// Times the PEs' prefix routes moved to the other LSP.
    pub path_switches: u64,
    /// LSP uses checked against p's label counters before the LSP was deleted.
    pub lsp_uses_checked: u64,
    /// Of those, the ones where the LSP carried traffic in both directions.
    pub lsp_uses_with_traffic: u64,
    /// Frames p switched per incoming label over the run.
    pub p_label_frames: BTreeMap<u32, u64>,
    /// The flows.
    pub flows: Vec<FlowReport>,
    /// The routers.
    pub routers: Vec<RouterReport>,
    /// What went wrong; empty: the soak passed.
    pub failures: Vec<String>,
    /// Configs and router logs, kept when the soak failed.
    pub work_dir: Option<PathBuf>,
}

impl SoakReport {
    /// Whether the soak passed.
    pub fn ok(&self) -> bool {
        self.failures.is_empty()
    }

    fn judge(&mut self, opts: &SoakOptions) {
        let mut failures = Vec::new();
        if self.path_switches == 0 {
            failures.push("no path change was made".to_string());
        }
        if self.lsp_uses_with_traffic < self.lsp_uses_checked {
            failures.push(format!(
                "{} of {} LSP uses carried no traffic in one direction (by p's label counters)",
                self.lsp_uses_checked - self.lsp_uses_with_traffic,
                self.lsp_uses_checked
            ));
        }
        for f in &self.flows {
            match &f.outcome {
                FlowOutcome::Failed(e) => failures.push(format!("{}: {e}", f.name)),
                FlowOutcome::Tcp(t) if !t.content_ok => failures.push(match t.first_mismatch {
                    Some(at) => {
                        format!("{}: received data differs from what was sent, first at byte {at}", f.name)
                    }
                    None => format!("{}: sent {} bytes, received {}", f.name, t.bytes_sent, t.bytes_received),
                }),
                // Paced flows keep their pace unless the path stalls them.
                FlowOutcome::Tcp(t) if t.gbps * 1e9 < opts.tcp_rate as f64 * MIN_TCP_PACE => {
                    failures.push(format!(
                        "{}: {:.1} Mbit/s, less than {:.0} % of its pace of {:.1} Mbit/s",
                        f.name,
                        t.gbps * 1e3,
                        MIN_TCP_PACE * 100.0,
                        opts.tcp_rate as f64 / 1e6
                    ));
                }
                FlowOutcome::Tcp(_) => {}
                FlowOutcome::Udp(u) => {
                    if u.sent == 0 {
                        failures.push(format!("{}: no datagram was sent", f.name));
                    }
                    if u.loss_ratio() > opts.max_udp_loss {
                        failures.push(format!(
                            "{}: {:.3} % of datagrams lost ({} lost, {} failed to send, of {}), more than {:.3} %",
                            f.name,
                            u.loss_ratio() * 100.0,
                            u.lost,
                            u.send_errors,
                            u.sent + u.send_errors,
                            opts.max_udp_loss * 100.0
                        ));
                    }
                    if u.corrupted > 0 || u.duplicated > 0 {
                        failures.push(format!(
                            "{}: {} datagrams corrupted, {} duplicated",
                            f.name, u.corrupted, u.duplicated
                        ));
                    }
                }
            }
        }
        for r in &self.routers {
            if !r.drops.is_empty() {
                failures.push(format!("{}: drops {}", r.name, counts(&r.drops)));
            }
            if r.rss_growth_kib() > opts.max_rss_growth_kib as i64 {
                failures.push(format!(
                    "{}: resident memory grew by {} KiB ({} -> {}), more than {} KiB",
                    r.name,
                    r.rss_growth_kib(),
                    r.rss_start_kib,
                    r.rss_end_kib,
                    opts.max_rss_growth_kib
                ));
            }
            if r.exit.as_deref() != Some("0") {
                failures.push(format!(
                    "{}: did not exit cleanly when stopped ({})",
                    r.name,
                    r.exit.as_deref().unwrap_or("no status")
                ));
            }
        }
        self.failures = failures;
    }

    /// The report for people: a summary, a table of flows, a table of routers, and
    /// what failed.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let mbit = |bits: u64| bits as f64 / 1e6;
        let _ = writeln!(
            s,
            "Soak: {:.0} s of traffic (TCP {:.0} Mbit/s, UDP {:.0} Mbit/s a flow); {} route changes, \
             {} path switches (every {:?}); {} of {} LSP uses carried traffic both ways.\n",
            self.seconds,
            mbit(self.tcp_rate),
            mbit(self.udp_rate),
            self.route_changes,
            self.path_switches,
            self.change_every,
            self.lsp_uses_with_traffic,
            self.lsp_uses_checked
        );
        s.push_str("| flow | sent | received | Mbit/s | check |\n");
        s.push_str("|------|-----:|---------:|-------:|-------|\n");
        for f in &self.flows {
            let _ = match &f.outcome {
                FlowOutcome::Tcp(t) => writeln!(
                    s,
                    "| {} | {} B | {} B | {:.1} | {} ({} retransmits) |",
                    f.name,
                    t.bytes_sent,
                    t.bytes_received,
                    t.gbps * 1000.0,
                    if t.content_ok { "content ok" } else { "CONTENT WRONG" },
                    t.retransmits
                ),
                FlowOutcome::Udp(u) => writeln!(
                    s,
                    "| {} | {} dgrams | {} dgrams | {:.1} | lost {} ({:.4} %), reordered {}, duplicated {}, corrupted {}, send errors {} |",
                    f.name,
                    u.sent,
                    u.received,
                    if u.seconds > 0.0 { u.bytes_received as f64 * 8.0 / u.seconds / 1e6 } else { 0.0 },
                    u.lost,
                    u.loss_ratio() * 100.0,
                    u.reordered,
                    u.duplicated,
                    u.corrupted,
                    u.send_errors
                ),
                FlowOutcome::Failed(e) => writeln!(s, "| {} | - | - | - | FAILED: {e} |", f.name),
            };
        }
        s.push('\n');
        s.push_str("| router | RSS after warm-up | RSS at end | growth | max seen | VmHWM | drops | background drops |\n");
        s.push_str("|--------|------------------:|-----------:|-------:|---------:|------:|-------|------------------|\n");
        for r in &self.routers {
            let _ = writeln!(
                s,
                "| {} | {} KiB | {} KiB | {:+} KiB | {} KiB | {} KiB | {} | {} |",
                r.name,
                r.rss_start_kib,
                r.rss_end_kib,
                r.rss_growth_kib(),
                r.rss_max_kib,
                r.rss_hwm_kib,
                if r.drops.is_empty() { "none".to_string() } else { counts(&r.drops) },
                if r.background_drops.is_empty() { "none".to_string() } else { counts(&r.background_drops) },
            );
        }
        let labels: Vec<String> = self.p_label_frames.iter().map(|(l, n)| format!("{l}: {n}")).collect();
        let _ = writeln!(s, "\nFrames p switched per incoming label: {}", labels.join(", "));
        if self.failures.is_empty() {
            s.push_str("\nResult: ok\n");
        } else {
            s.push_str("\nResult: FAILED\n");
            for f in &self.failures {
                let _ = writeln!(s, "- {}", f.replace('\n', "\n  "));
            }
        }
        if let Some(dir) = &self.work_dir {
            let _ = writeln!(s, "Configs and router logs: {}", dir.display());
        }
        s
    }

    /// The report as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let flows: Vec<_> = self
            .flows
            .iter()
            .map(|f| match &f.outcome {
                FlowOutcome::Tcp(t) => serde_json::json!({
                    "name": f.name,
                    "proto": f.proto,
                    "bytes_sent": t.bytes_sent,
                    "bytes_received": t.bytes_received,
                    "seconds": t.seconds,
                    "mbit_s": t.gbps * 1000.0,
                    "retransmits": t.retransmits,
                    "content_ok": t.content_ok,
                    "first_mismatch": t.first_mismatch,
                }),
                FlowOutcome::Udp(u) => serde_json::json!({
                    "name": f.name,
                    "proto": f.proto,
                    "sent": u.sent,
                    "received": u.received,
                    "lost": u.lost,
                    "loss_ratio": u.loss_ratio(),
                    "reordered": u.reordered,
                    "duplicated": u.duplicated,
                    "corrupted": u.corrupted,
                    "foreign": u.foreign,
                    "send_errors": u.send_errors,
                    "bytes_sent": u.bytes_sent,
                    "bytes_received": u.bytes_received,
                    "seconds": u.seconds,
                }),
                FlowOutcome::Failed(e) => serde_json::json!({
                    "name": f.name,
                    "proto": f.proto,
                    "error": e,
                }),
            })
            .collect();
        let routers: Vec<_> = self
            .routers
            .iter()
            .map(|r| {
                serde_json::json!({
                    "name": r.name,
                    "pid": r.pid,
                    "rss_start_kib": r.rss_start_kib,
                    "rss_end_kib": r.rss_end_kib,
                    "rss_growth_kib": r.rss_growth_kib(),
                    "rss_max_kib": r.rss_max_kib,
                    "rss_hwm_kib": r.rss_hwm_kib,
                    "drops": r.drops,
                    "background_drops": r.background_drops,
                    "exit": r.exit,
                })
            })
            .collect();
        let labels: BTreeMap<String, u64> =
            self.p_label_frames.iter().map(|(l, n)| (l.to_string(), *n)).collect();
        serde_json::json!({
            "ok": self.ok(),
            "seconds": self.seconds,
            "tcp_rate_mbit": self.tcp_rate as f64 / 1e6,
            "udp_rate_mbit": self.udp_rate as f64 / 1e6,
            "change_every_s": self.change_every.as_secs_f64(),
            "route_changes": self.route_changes,
            "path_switches": self.path_switches,
            "lsp_uses_checked": self.lsp_uses_checked,
            "lsp_uses_with_traffic": self.lsp_uses_with_traffic,
            "p_label_frames": labels,
            "flows": flows,
            "routers": routers,
            "failures": self.failures,
            "work_dir": self.work_dir.as_ref().map(|d| d.display().to_string()),
        })
    }
}

fn counts(m: &BTreeMap<String, u64>) -> String {
    m.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
}

/// `VmRSS` and `VmHWM` of a process, KiB.
fn memory_kib(pid: u32) -> anyhow::Result<(u64, u64)> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let field = |name: &str| -> anyhow::Result<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| anyhow!("no {name} in {path}"))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// The process id at the other end of a Unix stream: the router that listens on the
/// control socket.
fn peer_pid(stream: &std::os::unix::net::UnixStream) -> anyhow::Result<u32> {
    let peer = vmpls_sys::cred::unix_peer(stream).context("SO_PEERCRED on the control socket")?;
    peer.pid.ok_or_else(|| anyhow!("no peer process on the control socket"))
}

/// A router's control connection and process.
struct Control {
    name: &'static str,
    conn: Connection,
    pid: u32,
}

impl Control {
    /// Connects to `router`'s default socket in its namespace (the seed lab's configs
    /// name none), waiting up to 5 s for it.
    fn open(lab: &SeedLab, name: &'static str) -> anyhow::Result<Self> {
        let ns = lab.topology().ns(name)?;
        let socket =
            Path::new(vmpls_router::socket::RUN_DIR).join("netns").join(ns).join(format!("{name}.sock"));
        let deadline = Instant::now() + Duration::from_secs(5);
        let conn = loop {
            match Connection::open(&socket) {
                Ok(c) => break c,
                Err(e) if Instant::now() >= deadline => bail!("router {name}: {}", e),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        let pid = peer_pid(&conn.stream).with_context(|| format!("router {name}"))?;
        Ok(Self { name, conn, pid })
    }

    fn request(&mut self, req: &Request) -> anyhow::Result<Option<serde_json::Value>> {
        self.conn.request(req).map_err(|e| anyhow!("router {}: {}", self.name, e))
    }

    /// `vmpls [-f mpls] route WORDS` against this router.
    fn route(&mut self, family: Option<Family>, words: &str) -> anyhow::Result<()> {
        let args: Vec<String> = words.split_whitespace().map(String::from).collect();
        let req = vmpls_control::cli::parse_route(family, &args)
            .map_err(|e| anyhow!("bad built-in route \"{words}\": {e}"))?;
        self.request(&req).with_context(|| format!("route {words}"))?;
        Ok(())
    }

    fn stats(&mut self) -> anyhow::Result<Stats> {
        let data = self.request(&Request::Stats)?;
        serde_json::from_value(data.unwrap_or(serde_json::Value::Null))
            .with_context(|| format!("router {}: bad stats reply", self.name))
    }
}

/// The routers' control connections, and the route changes made through them.
struct Routers {
    controls: Vec<Control>,
    changes: u64,
}

impl Routers {
    fn get(&mut self, name: &str) -> anyhow::Result<&mut Control> {
        self.controls.iter_mut().find(|c| c.name == name).ok_or_else(|| anyhow!("no router {name}"))
    }

    fn route(&mut self, router: &str, family: Option<Family>, words: &str) -> anyhow::Result<()> {
        self.get(router)?.route(family, words)?;
        self.changes += 1;
        Ok(())
    }

    /// Adds `lsp`'s label routes (egress first).
    fn make(&mut self, lsp: &Lsp) -> anyhow::Result<()> {
        for (router, words) in lsp.label_routes() {
            self.route(router, Some(Family::Mpls), &format!("add {words}"))?;
        }
        Ok(())
    }

    /// Points the PEs' prefix routes at `lsp`.
    fn switch(&mut self, lsp: &Lsp) -> anyhow::Result<()> {
        for (router, words) in lsp.prefix_routes() {
            self.route(router, None, &format!("replace {words}"))?;
        }
        Ok(())
    }

    /// Deletes `lsp`'s label routes (p's swaps first).
    fn break_lsp(&mut self, lsp: &Lsp) -> anyhow::Result<()> {
        for (router, words) in lsp.label_routes().iter().rev() {
            let label = words.split_whitespace().next().unwrap_or_default();
            self.route(router, Some(Family::Mpls), &format!("del {label}"))?;
        }
        Ok(())
    }

    /// Frames p switched per incoming label.
    fn p_labels(&mut self) -> anyhow::Result<BTreeMap<u32, u64>> {
        Ok(self.get("p")?.stats()?.labels.iter().map(|l| (l.label, l.packets)).collect())
    }

    fn drops(&mut self) -> anyhow::Result<BTreeMap<&'static str, BTreeMap<String, u64>>> {
        let mut all = BTreeMap::new();
        for c in &mut self.controls {
            let stats = c.stats()?;
            all.insert(c.name, stats.drops.into_iter().map(|d| (d.name, d.value)).collect());
        }
        Ok(all)
    }

    fn memory(&self) -> anyhow::Result<Vec<(u64, u64)>> {
        self.controls
            .iter()
            .map(|c| memory_kib(c.pid).with_context(|| format!("router {}", c.name)))
            .collect()
    }
}

/// A flow running on its own thread; its progress in counters.
struct Running {
    spec: FlowSpec,
    /// TCP: bytes received; UDP: datagrams received.
    received: Arc<AtomicU64>,
    /// UDP: datagrams sent.
    sent: Arc<AtomicU64>,
    handle: JoinHandle<FlowOutcome>,
}

fn start_flow(lab: &SeedLab, spec: FlowSpec, index: u32, opts: &SoakOptions) -> anyhow::Result<Running> {
    let (from, to) = (lab.topology().ns(spec.from)?.to_string(), lab.topology().ns(spec.to)?.to_string());
    let dst = host_addr(spec.dst)?;
    let (received, sent) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (r, s) = (received.clone(), sent.clone());
    let handle = match spec.proto {
        Proto::Tcp => {
            let fo = FlowOptions {
                limit: Limit::Duration(opts.duration),
                seed: 0x736f_616b_0000 + u64::from(index),
                io_timeout: Duration::from_secs(10),
                max_rate: Some(opts.tcp_rate),
                ..FlowOptions::default()
            };
            std::thread::Builder::new().name(format!("soak-{index}")).spawn(move || {
                match run_flow(&from, &to, dst, &fo, &mut |p| r.store(p.bytes, Ordering::Relaxed)) {
                    Ok(f) => FlowOutcome::Tcp(f),
                    Err(e) => FlowOutcome::Failed(format!("{e:#}")),
                }
            })?
        }
        Proto::Udp => {
            let uo = UdpOptions {
                duration: opts.duration,
                rate: opts.udp_rate,
                flow: index,
                ..UdpOptions::default()
            };
            std::thread::Builder::new().name(format!("soak-{index}")).spawn(move || {
                let mut progress = |p: vmpls_lab::udp::UdpProgress| {
                    r.store(p.received, Ordering::Relaxed);
                    s.store(p.sent, Ordering::Relaxed);
                };
                match run_udp_flow(&from, &to, dst, &uo, &mut progress) {
                    Ok(u) => FlowOutcome::Udp(u),
                    Err(e) => FlowOutcome::Failed(format!("{e:#}")),
                }
            })?
        }
    };
    Ok(Running { spec, received, sent, handle })
}

/// `soak 30/120 s: tcp4 ce1->ce2 740 MB, ..., udp6 ce1->ce2 12000/12000 dgrams; 40 route
/// changes; RSS pe1 9000 KiB, ...`
fn progress_line(
    flows: &[Running],
    elapsed: Duration,
    duration: Duration,
    changes: u64,
    routers: &Routers,
    memory: &[(u64, u64)],
) -> String {
    let flows: Vec<String> = flows
        .iter()
        .map(|f| {
            let got = f.received.load(Ordering::Relaxed);
            match f.spec.proto {
                Proto::Tcp => format!("{} {:.1} MB", f.spec.name, got as f64 / 1e6),
                Proto::Udp => format!("{} {}/{} dgrams", f.spec.name, got, f.sent.load(Ordering::Relaxed)),
            }
        })
        .collect();
    let rss: Vec<String> =
        routers.controls.iter().zip(memory).map(|(c, (rss, _))| format!("{} {rss} KiB", c.name)).collect();
    format!(
        "soak {:.0}/{:.0} s: {}; {changes} route changes; RSS {}",
        elapsed.as_secs_f64(),
        duration.as_secs_f64(),
        flows.join(", "),
        rss.join(", ")
    )
}

/// Runs the soak and returns its report; `progress` gets a line at each stage and every
/// `progress_every`. An error means the soak could not run to the end (the lab did not
/// come up, a router died or refused a route change, or an interrupt); a soak that ran
/// and found problems returns a report with failures.
pub fn run_soak(opts: &SoakOptions, progress: &mut dyn FnMut(&str)) -> anyhow::Result<SoakReport> {
    vmpls_lab::require_root()?;
    opts.validate()?;
    let work_dir = make_work_dir()?;
    let result = soak_in(opts, &work_dir, progress);
    match result {
        Ok(mut report) if report.ok() => {
            let _ = std::fs::remove_dir_all(&work_dir);
            report.work_dir = None;
            Ok(report)
        }
        Ok(mut report) => {
            report.work_dir = Some(work_dir);
            Ok(report)
        }
        Err(e) if vmpls_lab::is_interrupted(&e) => {
            let _ = std::fs::remove_dir_all(&work_dir);
            Err(e)
        }
        Err(e) => Err(e.context(format!("soak failed (configs and logs are in {})", work_dir.display()))),
    }
}

fn make_work_dir() -> anyhow::Result<PathBuf> {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "vmpls-soak-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

fn interrupted() -> anyhow::Result<()> {
    if vmpls_lab::interrupted() {
        return Err(vmpls_lab::Interrupted.into());
    }
    Ok(())
}

fn soak_in(
    opts: &SoakOptions,
    work_dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<SoakReport> {
    let params = SeedParams { fast_path: opts.fast_path, ..SeedParams::default() };
    let first = Lsp::of(&params);
    let mode = if opts.fast_path { "vmpls-mpls-tc" } else { "vmpls-mpls" };
    progress(&format!("building the seed topology: ce1 -- pe1 -- p -- pe2 -- ce2 ({mode})"));
    let mut lab = SeedLab::build(&params)?;
    lab.clear_kernel_ip()?;
    lab.start_routers(&opts.router_binary, work_dir)?;
    progress("waiting for ce1 and ce2 to reach each other");
    lab.check_pings(Duration::from_secs(10)).map_err(|e| anyhow!("{e:#}\n{}", lab.router_logs(20)))?;
    let controls = ROUTERS.iter().map(|r| Control::open(&lab, r)).collect::<anyhow::Result<Vec<_>>>()?;
    let mut routers = Routers { controls, changes: 0 };
    let pids: Vec<String> = routers.controls.iter().map(|c| format!("{} {}", c.name, c.pid)).collect();
    progress(&format!("routers running (pids: {}); work directory {}", pids.join(", "), work_dir.display()));

    let drops_before = routers.drops()?;
    let labels_before = routers.p_labels()?;
    progress(&format!(
        "traffic for {:?}: {} flows; the path changes every {:?}",
        opts.duration,
        FLOWS.iter().map(|f| f.name).collect::<Vec<_>>().join(", "),
        opts.change_every
    ));
    let started = Instant::now();
    let mut flows = Vec::new();
    for (i, spec) in FLOWS.iter().enumerate() {
        flows.push(start_flow(&lab, *spec, i as u32 + 1, opts)?);
    }

    let mut rss_start: Option<Vec<(u64, u64)>> = None;
    let mut rss_max = vec![0u64; ROUTERS.len()];
    // The LSP in use, the one to delete and when, and p's label counters when each
    // label was last checked.
    let (mut current, mut path_switches) = (first, 0u64);
    let mut pending_break: Option<(Lsp, Instant)> = None;
    let mut label_seen = labels_before.clone();
    let (mut uses_checked, mut uses_with_traffic) = (0u64, 0u64);
    let mut next_change = started + opts.change_every;
    let mut next_progress = started + opts.progress_every;
    // No switch in the last second: the flows are ending.
    let last_switch = started + opts.duration.saturating_sub(Duration::from_secs(1));
    while !flows.iter().all(|f| f.handle.is_finished()) {
        interrupted()?;
        lab.check_routers_running()?;
        let now = Instant::now();
        if rss_start.is_none() && now >= started + opts.warmup {
            let m = routers.memory()?;
            progress(&format!(
                "memory after warm-up: {}",
                routers
                    .controls
                    .iter()
                    .zip(&m)
                    .map(|(c, (rss, _))| format!("{} {rss} KiB", c.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            rss_start = Some(m);
        }
        if let Some((old, at)) = pending_break
            && now >= at
        {
            // The LSP carried traffic both ways while it was in use, by p's counters.
            let labels = routers.p_labels()?;
            let grew =
                |l: u32| labels.get(&l).copied().unwrap_or(0) > label_seen.get(&l).copied().unwrap_or(0);
            uses_checked += 1;
            if grew(old.pe1_push) && grew(old.pe2_push) {
                uses_with_traffic += 1;
            }
            label_seen = labels;
            routers.break_lsp(&old)?;
            pending_break = None;
        }
        if now >= next_change && now < last_switch && pending_break.is_none() {
            let next = if current == first { SECOND_LSP } else { first };
            routers.make(&next)?;
            routers.switch(&next)?;
            path_switches += 1;
            pending_break = Some((current, now + opts.change_every / 2));
            current = next;
            next_change += opts.change_every;
        }
        if now >= next_progress {
            next_progress += opts.progress_every;
            let m = routers.memory()?;
            for (max, (rss, _)) in rss_max.iter_mut().zip(&m) {
                *max = (*max).max(*rss);
            }
            progress(&progress_line(&flows, started.elapsed(), opts.duration, routers.changes, &routers, &m));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let seconds = started.elapsed().as_secs_f64().min(opts.duration.as_secs_f64());

    let rss_end = routers.memory()?;
    let rss_start = rss_start.unwrap_or_else(|| rss_end.clone());
    let drops_after = routers.drops()?;
    let labels_after = routers.p_labels()?;
    let outcomes: Vec<FlowReport> = flows
        .into_iter()
        .map(|f| FlowReport {
            name: f.spec.name.to_string(),
            proto: if f.spec.proto == Proto::Tcp { "tcp" } else { "udp" },
            outcome: f
                .handle
                .join()
                .unwrap_or_else(|_| FlowOutcome::Failed("the flow's thread panicked".into())),
        })
        .collect();

    let mut reports = Vec::new();
    for (i, c) in routers.controls.iter().enumerate() {
        let before = drops_before.get(c.name).cloned().unwrap_or_default();
        let (mut drops, mut background) = (BTreeMap::new(), BTreeMap::new());
        for (reason, n) in drops_after.get(c.name).cloned().unwrap_or_default() {
            let n = n.saturating_sub(before.get(&reason).copied().unwrap_or(0));
            if n == 0 {
                continue;
            }
            if BACKGROUND_DROPS.contains(&reason.as_str()) {
                background.insert(reason, n);
            } else {
                drops.insert(reason, n);
            }
        }
        reports.push(RouterReport {
            name: c.name.to_string(),
            pid: c.pid,
            rss_start_kib: rss_start[i].0,
            rss_end_kib: rss_end[i].0,
            rss_max_kib: rss_max[i].max(rss_end[i].0).max(rss_start[i].0),
            rss_hwm_kib: rss_end[i].1,
            drops,
            background_drops: background,
            exit: None,
        });
    }
    let route_changes = routers.changes;
    drop(routers);
    for (name, status) in lab.stop_routers_status(Duration::from_secs(5))? {
        if let Some(r) = reports.iter_mut().find(|r| r.name == name) {
            r.exit = Some(match status.code() {
                Some(code) => code.to_string(),
                None => status.to_string(),
            });
        }
    }
    lab.cleanup()?;

    let p_label_frames = labels_after
        .iter()
        .map(|(l, n)| (*l, n.saturating_sub(labels_before.get(l).copied().unwrap_or(0))))
        .filter(|(_, n)| *n > 0)
        .collect();
    let mut report = SoakReport {
        seconds,
        tcp_rate: opts.tcp_rate,
        udp_rate: opts.udp_rate,
        change_every: opts.change_every,
        route_changes,
        path_switches,
        lsp_uses_checked: uses_checked,
        lsp_uses_with_traffic: uses_with_traffic,
        p_label_frames,
        flows: outcomes,
        routers: reports,
        failures: Vec::new(),
        work_dir: None,
    };
    report.judge(opts);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_people_write_them() {
        let secs = Duration::from_secs;
        assert_eq!(parse_duration("90s"), Ok(secs(90)));
        assert_eq!(parse_duration("10m"), Ok(secs(600)));
        assert_eq!(parse_duration("1h"), Ok(secs(3600)));
        assert_eq!(parse_duration("1h30m"), Ok(secs(5400)));
        assert_eq!(parse_duration("2m5s"), Ok(secs(125)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration(" 45 "), Ok(secs(45)));
        assert_eq!(parse_duration("20sec"), Ok(secs(20)));
        for bad in ["", "m", "10x", "1.5m", "-3s", "s10", "99999999999999999999999s", "18446744073709551615h"]
        {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        assert!(parse_duration("10x").unwrap_err().contains("unknown unit \"x\""));
    }

    #[test]
    fn both_lsps_routes_parse_and_mirror_each_other() {
        let first = Lsp::of(&SeedParams::default());
        assert_eq!(first, Lsp { pe1_push: 1002, p_to_pe2: 2002, pe2_push: 1001, p_to_pe1: 2001 });
        for lsp in [first, SECOND_LSP] {
            for (router, words) in lsp.label_routes() {
                for verb in ["add", "del"] {
                    let args: Vec<String> =
                        format!("{verb} {words}").split_whitespace().map(String::from).collect();
                    let args = if verb == "del" { args[..2].to_vec() } else { args };
                    vmpls_control::cli::parse_route(Some(Family::Mpls), &args)
                        .unwrap_or_else(|e| panic!("{router}: {verb} {words}: {e}"));
                }
            }
            for (router, words) in lsp.prefix_routes() {
                let args: Vec<String> =
                    format!("replace {words}").split_whitespace().map(String::from).collect();
                let req = vmpls_control::cli::parse_route(None, &args)
                    .unwrap_or_else(|e| panic!("{router}: {words}: {e}"));
                let Request::RouteReplace { route } = req else { panic!("{req:?}") };
                let labels = match route {
                    vmpls_control::api::RouteSpec::Inet(r) | vmpls_control::api::RouteSpec::Inet6(r) => {
                        r.nexthops[0].labels.clone()
                    }
                    other => panic!("{other:?}"),
                };
                let want = if router == "pe1" { lsp.pe1_push } else { lsp.pe2_push };
                assert_eq!(labels, vec![want], "{words}");
            }
        }
        // The second LSP shares no label with the first.
        let labels = |l: Lsp| [l.pe1_push, l.p_to_pe2, l.pe2_push, l.p_to_pe1];
        assert!(labels(SECOND_LSP).iter().all(|l| !labels(first).contains(l)));
    }

    fn passing_report() -> SoakReport {
        let tcp = FlowResult {
            bytes_sent: 1000,
            bytes_received: 1000,
            seconds: 1.0,
            gbps: 0.2,
            retransmits: 0,
            content_ok: true,
            first_mismatch: None,
        };
        let udp = UdpResult { sent: 10_000, received: 10_000, seconds: 1.0, ..UdpResult::default() };
        let router = |name: &str| RouterReport {
            name: name.into(),
            pid: 1,
            rss_start_kib: 50_000,
            rss_end_kib: 50_100,
            rss_max_kib: 50_100,
            rss_hwm_kib: 50_100,
            background_drops: [("ip_multicast".to_string(), 2)].into(),
            exit: Some("0".into()),
            ..RouterReport::default()
        };
        SoakReport {
            seconds: 20.0,
            tcp_rate: 200_000_000,
            udp_rate: 50_000_000,
            change_every: Duration::from_secs(3),
            route_changes: 72,
            path_switches: 6,
            lsp_uses_checked: 6,
            lsp_uses_with_traffic: 6,
            p_label_frames: [(1002, 10), (1003, 9)].into(),
            flows: vec![
                FlowReport { name: "tcp4".into(), proto: "tcp", outcome: FlowOutcome::Tcp(tcp) },
                FlowReport { name: "udp6".into(), proto: "udp", outcome: FlowOutcome::Udp(udp) },
            ],
            routers: vec![router("pe1"), router("p")],
            failures: Vec::new(),
            work_dir: None,
        }
    }

    #[test]
    fn a_clean_run_passes_and_reports_everything() {
        let opts = SoakOptions::new("/nonexistent", Duration::from_secs(20));
        let mut r = passing_report();
        r.judge(&opts);
        assert!(r.ok(), "{:?}", r.failures);
        let text = r.to_text();
        assert!(text.contains("72 route changes, 6 path switches"), "{text}");
        assert!(text.contains("| tcp4 | 1000 B | 1000 B | 200.0 | content ok (0 retransmits) |"), "{text}");
        assert!(text.contains("| pe1 | 50000 KiB | 50100 KiB | +100 KiB |"), "{text}");
        assert!(text.contains("| none | ip_multicast 2 |"), "{text}");
        assert!(text.contains("Result: ok"), "{text}");
        let json = r.to_json();
        assert_eq!(json["ok"], true);
        assert_eq!(json["route_changes"], 72);
        assert_eq!(json["flows"][0]["bytes_received"], 1000);
        assert_eq!(json["flows"][1]["lost"], 0);
        assert_eq!(json["flows"][1]["proto"], "udp");
        assert_eq!(json["routers"][1]["rss_growth_kib"], 100);
        assert_eq!(json["routers"][0]["background_drops"]["ip_multicast"], 2);
        assert_eq!(json["p_label_frames"]["1003"], 9);
    }

    #[test]
    fn each_problem_fails_the_soak() {
        let opts = SoakOptions::new("/nonexistent", Duration::from_secs(20));
        type Spoil = Box<dyn Fn(&mut SoakReport)>;
        let cases: Vec<(&str, Spoil)> = vec![
            (
                "differs from what was sent, first at byte 7",
                Box::new(|r| {
                    if let FlowOutcome::Tcp(t) = &mut r.flows[0].outcome {
                        t.content_ok = false;
                        t.first_mismatch = Some(7);
                    }
                }),
            ),
            (
                "0.200 % of datagrams lost",
                Box::new(|r| {
                    if let FlowOutcome::Udp(u) = &mut r.flows[1].outcome {
                        u.received -= 20;
                        u.lost = 20;
                    }
                }),
            ),
            (
                "1 datagrams corrupted",
                Box::new(|r| {
                    if let FlowOutcome::Udp(u) = &mut r.flows[1].outcome {
                        u.corrupted = 1;
                    }
                }),
            ),
            (
                "p: drops unknown_label 3",
                Box::new(|r| {
                    r.routers[1].drops.insert("unknown_label".into(), 3);
                }),
            ),
            ("resident memory grew by 20000 KiB", Box::new(|r| r.routers[0].rss_end_kib = 70_000)),
            ("did not exit cleanly", Box::new(|r| r.routers[0].exit = None)),
            (
                "tcp4: 80.0 Mbit/s, less than 50 % of its pace of 200.0 Mbit/s",
                Box::new(|r| {
                    if let FlowOutcome::Tcp(t) = &mut r.flows[0].outcome {
                        t.gbps = 0.08;
                    }
                }),
            ),
            ("no path change", Box::new(|r| r.path_switches = 0)),
            ("1 of 6 LSP uses carried no traffic", Box::new(|r| r.lsp_uses_with_traffic = 5)),
            (
                "tcp4: the receiver: stalled",
                Box::new(|r| r.flows[0].outcome = FlowOutcome::Failed("the receiver: stalled".into())),
            ),
        ];
        for (want, spoil) in cases {
            let mut r = passing_report();
            spoil(&mut r);
            r.judge(&opts);
            assert!(!r.ok(), "{want}");
            assert!(r.failures.iter().any(|f| f.contains(want)), "{want}: {:?}", r.failures);
            assert!(r.to_text().contains("Result: FAILED"));
            assert_eq!(r.to_json()["ok"], false);
        }
    }

    #[test]
    fn options_are_checked_before_anything_is_built() {
        let exe = std::env::current_exe().expect("test binary");
        let ok = SoakOptions::new(&exe, Duration::from_secs(20));
        assert!(ok.validate().is_ok());
        assert_eq!(ok.warmup, Duration::from_secs(5));
        assert_eq!(ok.progress_every, Duration::from_secs(2));
        assert_eq!(SoakOptions::new(&exe, Duration::from_secs(600)).progress_every, Duration::from_secs(10));
        let short = SoakOptions::new(&exe, Duration::from_secs(5));
        assert!(short.validate().unwrap_err().to_string().contains("too short"));
        let missing = SoakOptions::new("/nonexistent/vmpls", Duration::from_secs(20));
        assert!(missing.validate().unwrap_err().to_string().contains("not found"));
        let zero = SoakOptions { udp_rate: 0, ..ok };
        assert!(zero.validate().is_err());
    }
}
