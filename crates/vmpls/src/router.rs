//! `vmpls run`: one router in the foreground. The forwarding loop is the only place where
//! the sans-I/O pipeline meets the ports: poll, receive a batch, process, send.

use std::io::Write;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use tracing::{info, warn};
use vmpls_control::Config;
use vmpls_dataplane::{Dataplane, DataplaneConfig, Output, PacketPool, PortId};
use vmpls_fib::FibHandle;
use vmpls_ports::{AfPacketPort, BATCH, Port};

/// Buffers per router: enough for a full batch on every port, frames held for neighbour
/// resolution, and the segments of one super-frame.
const POOL_SIZE: usize = 1024;
/// How often timers run and stats are written.
const TICK: Duration = Duration::from_millis(200);
const STATS_EVERY: Duration = Duration::from_secs(1);

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn install_signal_handlers() -> anyhow::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe; the
        // sigaction struct is zero-initialised and fully set before the call. No
        // SA_RESTART: poll() returns EINTR so the loop sees STOP at once.
        let rc = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error()).context("installing signal handlers");
        }
    }
    Ok(())
}

/// Options of `vmpls run`.
pub struct RunOptions {
    pub config: PathBuf,
    pub stats_file: Option<PathBuf>,
}

/// Loads and validates a config, including that its interfaces exist.
pub fn load_config(path: &Path) -> anyhow::Result<Config> {
    let cfg = Config::from_file(path)?;
    vmpls_control::check_interfaces(&cfg, vmpls_ports::interface_exists)?;
    Ok(cfg)
}

/// Runs a router until SIGINT or SIGTERM.
pub fn run(opts: RunOptions) -> anyhow::Result<()> {
    let cfg = load_config(&opts.config)?;
    let fib = cfg.build_fib()?;
    let mut ports: Vec<Box<dyn Port>> = Vec::new();
    for (i, p) in cfg.ports.iter().enumerate() {
        let id = PortId::try_from(i).context("too many ports")?;
        let port = AfPacketPort::open(id, &p.name, &p.interface, p.mtu)
            .with_context(|| format!("opening port {:?} on interface {}", p.name, p.interface))?;
        let info = port.info();
        info!(port = %p.name, interface = %p.interface, mtu = info.mtu, caps = ?info.caps, "port up");
        ports.push(Box::new(port));
    }
    let infos = ports.iter().map(|p| p.info().clone()).collect();
    let mut dp = Dataplane::new(FibHandle::new(fib), infos, DataplaneConfig::default());
    install_signal_handlers()?;
    info!(router = %cfg.router.name, ports = ports.len(), "forwarding");
    let result = forward(&mut dp, &mut ports, opts.stats_file.as_deref());
    write_stats(&dp, &ports, opts.stats_file.as_deref());
    for (name, n) in dp.counters().drop_list() {
        info!(reason = name, count = n, "dropped");
    }
    for (name, n) in dp.counters().event_list() {
        info!(event = name, count = n, "counted");
    }
    info!(router = %cfg.router.name, "stopped");
    result
}

fn forward(dp: &mut Dataplane, ports: &mut [Box<dyn Port>], stats: Option<&Path>) -> anyhow::Result<()> {
    let mut pool = PacketPool::new(POOL_SIZE);
    let mut out = Output::new(ports.len());
    let mut batch = Vec::with_capacity(BATCH);
    let mut fds: Vec<libc::pollfd> =
        ports.iter().map(|p| libc::pollfd { fd: p.fd() as RawFd, events: libc::POLLIN, revents: 0 }).collect();
    let mut next_tick = Instant::now() + TICK;
    let mut next_stats = Instant::now() + STATS_EVERY;
    while !STOP.load(Ordering::Relaxed) {
        let timeout = next_tick.saturating_duration_since(Instant::now()).as_millis() as i32;
        // SAFETY: fds is a valid, exclusively borrowed array of pollfd of the given length.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout.max(0)) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e).context("poll");
        }
        let now = Instant::now();
        for (i, fd) in fds.iter_mut().enumerate() {
            if fd.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
                warn!(port = %ports[i].info().name, revents = fd.revents, "port error");
            }
            if fd.revents & libc::POLLIN == 0 {
                continue;
            }
            fd.revents = 0;
            match ports[i].recv_batch(&mut pool, &mut batch, BATCH) {
                Ok(0) => {}
                Ok(_) => dp.process_batch(now, &mut batch, &mut pool, &mut out),
                Err(e) => warn!(port = %ports[i].info().name, error = %e, "receive failed"),
            }
            flush(ports, &mut out, &mut pool);
        }
        if now >= next_tick {
            dp.poll(now, &mut pool, &mut out);
            flush(ports, &mut out, &mut pool);
            next_tick = now + TICK;
        }
        if now >= next_stats {
            write_stats(dp, ports, stats);
            next_stats = now + STATS_EVERY;
        }
    }
    Ok(())
}

fn flush(ports: &mut [Box<dyn Port>], out: &mut Output, pool: &mut PacketPool) {
    for (port, tx) in ports.iter_mut().zip(out.tx.iter_mut()) {
        if tx.is_empty() {
            continue;
        }
        if let Err(e) = port.send_batch(tx, pool) {
            warn!(port = %port.info().name, error = %e, "send failed");
            for p in tx.drain(..) {
                pool.put(p);
            }
        }
    }
}

/// The counters as JSON: drops and events by name, and per-port frame counts.
pub fn stats_json(dp: &Dataplane, ports: &[Box<dyn Port>]) -> serde_json::Value {
    let c = dp.counters();
    let drops: serde_json::Map<_, _> =
        vmpls_dataplane::Drop::ALL.iter().map(|d| (d.name().to_string(), c.drops(*d).into())).collect();
    let events: serde_json::Map<_, _> =
        vmpls_dataplane::Event::ALL.iter().map(|e| (e.name().to_string(), c.events(*e).into())).collect();
    let ports: Vec<serde_json::Value> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let s = p.stats();
            serde_json::json!({
                "name": p.info().name,
                "rx_packets": s.rx_packets,
                "rx_bytes": s.rx_bytes,
                "tx_packets": s.tx_packets,
                "tx_bytes": s.tx_bytes,
                "rx_dropped": s.rx_bad_vnet_hdr + s.rx_truncated + s.rx_no_buffer,
                "tx_dropped": s.tx_dropped,
                "tx_errors": s.tx_errors.total(),
                "pipeline_rx": c.rx_frames.get(i).copied().unwrap_or(0),
                "pipeline_tx": c.tx_frames.get(i).copied().unwrap_or(0),
            })
        })
        .collect();
    serde_json::json!({ "drops": drops, "events": events, "ports": ports })
}

fn write_stats(dp: &Dataplane, ports: &[Box<dyn Port>], path: Option<&Path>) {
    let Some(path) = path else { return };
    let tmp = path.with_extension("tmp");
    let r = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(serde_json::to_string_pretty(&stats_json(dp, ports)).unwrap_or_default().as_bytes()))
        .and_then(|_| std::fs::rename(&tmp, path));
    if let Err(e) = r {
        warn!(path = %path.display(), error = %e, "writing stats failed");
    }
}
