use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::time::Duration;

use vmpls_dataplane::{Counters, PortId};
use vmpls_ports::PortStats;
use vmpls_sys::EventFd;

use crate::capture::CaptureSink;

/// How long a control request waits for the forwarding loop.
pub(crate) const LOOP_ANSWER_TIMEOUT: Duration = Duration::from_secs(3);

/// A copy of the forwarding loop's state, taken on request.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The pipeline's counters.
    pub counters: Counters,
    /// Each port's own counters (index = port id).
    pub ports: Vec<PortStats>,
    /// The neighbour table: (port, address, MAC if resolved).
    pub neighbors: Vec<(PortId, std::net::IpAddr, Option<[u8; 6]>)>,
    /// Each port's faults (index = port id).
    pub faults: Vec<PortFaults>,
    /// The in-kernel fast path's counters by name (empty without it).
    pub fast_path: Vec<(&'static str, u64)>,
    /// Frames and bytes the fast path took from and sent out of each port (index = port
    /// id); `None` for a port it does not serve (or without it).
    pub fast_path_ports: Vec<Option<vmpls_fastpath::FastPortStats>>,
    /// Each port as the pipeline uses it now (index = port id): its MTU and the offloads
    /// it takes, which follow what a vhost-user guest negotiated since the start.
    pub port_info: Vec<vmpls_dataplane::PortInfo>,
    /// The static entries of `neighbors`.
    pub static_neighbors: std::collections::HashSet<(PortId, std::net::IpAddr)>,
    /// Where the forwarding loop's time went.
    pub forwarding_loop: crate::loop_time::LoopTime,
}

/// What went wrong with a port while the router ran, and what the router did about it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortFaults {
    /// Errors the port reported: an error condition on its descriptor (`POLLERR`, as when
    /// its interface goes down or is deleted), a failed receive, a failed send. Frames
    /// the kernel refuses one by one are counted in the port's `tx_errors` instead.
    pub errors: u64,
    /// Times the port was opened again on a re-created interface of the same name.
    pub reopened: u64,
    /// The port has no interface now: it was deleted and is not back, or is back but
    /// cannot be used (down, a smaller MTU); the router checks again every second.
    pub detached: bool,
}

/// What the control side asks of the forwarding loop.
pub enum LoopRequest {
    /// Copy the counters and neighbour table.
    Snapshot(SyncSender<Snapshot>),
    /// Start feeding a capture.
    Capture(CaptureSink),
    /// The FIB was replaced: answered once the loop has handed it to everything that
    /// keeps a copy (the in-kernel fast path's tables).
    FibStored(SyncSender<()>),
    /// Set or remove a static neighbour; answered with what went wrong, if anything.
    Neighbor(NeighborChange, SyncSender<Result<(), String>>),
    /// The VPLS instances' MAC tables and the ports' links as the pipeline knows them.
    Vpls(SyncSender<VplsView>),
}

/// What the loop knows of the VPLS instances.
#[derive(Debug, Clone, Default)]
pub struct VplsView {
    /// The MAC tables, instance by instance.
    pub fdb: Vec<vmpls_dataplane::FdbEntry>,
    /// Per port (index = port id): its link is up as last checked (ports that are no
    /// VPLS attachment circuit count as up).
    pub link_up: Vec<bool>,
}

/// A change of the neighbour table from the control side (`neigh add`, `neigh del`,
/// `[[neighbor]]` on reload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NeighborChange {
    /// A static neighbour: `addr` on `port` is `mac` (`replace`: also over a static
    /// entry with another MAC).
    Set { port: PortId, addr: std::net::IpAddr, mac: [u8; 6], replace: bool },
    /// Remove the entry of `addr` on `port`, static or learned.
    Del { port: PortId, addr: std::net::IpAddr },
}

/// How the control side reaches the forwarding loop: a channel and an eventfd in the
/// loop's poll set.
#[derive(Clone)]
pub struct LoopHandle {
    tx: Sender<LoopRequest>,
    wake: Arc<EventFd>,
}

impl LoopHandle {
    /// A handle and the loop's ends (the request receiver, the eventfd to poll).
    pub fn new() -> std::io::Result<(LoopHandle, Receiver<LoopRequest>, Arc<EventFd>)> {
        let (tx, rx) = mpsc::channel();
        let wake = Arc::new(EventFd::new()?);
        Ok((LoopHandle { tx, wake: wake.clone() }, rx, wake))
    }

    fn send(&self, req: LoopRequest) -> anyhow::Result<()> {
        self.tx.send(req).map_err(|_| anyhow::anyhow!("the forwarding loop has stopped"))?;
        self.wake.signal();
        Ok(())
    }

    /// The loop's counters and neighbours, now.
    ///
    /// # Errors
    /// The loop stopped or did not answer in time.
    pub fn snapshot(&self) -> anyhow::Result<Snapshot> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(LoopRequest::Snapshot(tx))?;
        rx.recv_timeout(LOOP_ANSWER_TIMEOUT)
            .map_err(|_| anyhow::anyhow!("the forwarding loop did not answer"))
    }

    /// The VPLS instances' MAC tables and the attachment circuits' links, now.
    ///
    /// # Errors
    /// The loop stopped or did not answer in time.
    pub fn vpls(&self) -> anyhow::Result<VplsView> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(LoopRequest::Vpls(tx))?;
        rx.recv_timeout(LOOP_ANSWER_TIMEOUT)
            .map_err(|_| anyhow::anyhow!("the forwarding loop did not answer"))
    }

    /// Waits until the loop has put a FIB just stored in force everywhere: with the
    /// in-kernel fast path, the kernel's tables would otherwise follow only at the loop's
    /// next wake-up, and traffic the kernel forwards does not wake it.
    ///
    /// # Errors
    /// The loop stopped or did not answer in time.
    pub fn fib_stored(&self) -> anyhow::Result<()> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(LoopRequest::FibStored(tx))?;
        rx.recv_timeout(LOOP_ANSWER_TIMEOUT)
            .map_err(|_| anyhow::anyhow!("the forwarding loop did not answer"))
    }

    /// Changes the neighbour table; `Ok(Err(..))` is the loop's refusal (a static entry
    /// with another MAC exists, no such entry).
    ///
    /// # Errors
    /// The loop stopped or did not answer in time.
    pub fn neighbor(&self, change: NeighborChange) -> anyhow::Result<Result<(), String>> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(LoopRequest::Neighbor(change, tx))?;
        rx.recv_timeout(LOOP_ANSWER_TIMEOUT)
            .map_err(|_| anyhow::anyhow!("the forwarding loop did not answer"))
    }

    /// Starts a capture; it ends when the receiver of `sink.tx` is dropped.
    ///
    /// # Errors
    /// The loop stopped.
    pub fn capture(&self, sink: CaptureSink) -> anyhow::Result<()> {
        self.send(LoopRequest::Capture(sink))
    }
}
