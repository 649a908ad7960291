use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use tracing::{info, warn};
use vmpls_control::OffloadOverrides;
use vmpls_dataplane::{Dataplane, PortId};
use vmpls_ports::{AfPacketPort, Port, PortStats};
use vmpls_sys::event::{PollSet, Readiness};

use crate::offloads::with_overrides;
use crate::protocol::PortFaults;
use crate::vrfs::VrfNetns;

/// How often the ports' interfaces are checked (a deleted interface come back) and ports
/// muted for errors are polled again.
pub(crate) const LINK_CHECK_EVERY: Duration = Duration::from_secs(1);
/// At most one warning per port this often while its errors go on (each is counted).
const ERROR_LOG_EVERY: Duration = Duration::from_secs(10);

/// How the router finds an AF_PACKET port's interface again.
#[derive(Debug, Clone)]
pub(crate) struct Relink {
    /// The interface name (from the config).
    pub(crate) ifname: String,
    /// The index of the interface the port's socket is bound to.
    pub(crate) ifindex: u32,
    /// The config's offload overrides, for the reopened port.
    pub(crate) offloads: OffloadOverrides,
    /// The config's `mtu`, if any: it wins over the interface's while the interface
    /// carries it.
    pub(crate) mtu: Option<u32>,
    /// The VRF namespace the interface is in; `None`: the router's.
    pub(crate) netns: Option<VrfNetns>,
    /// A pseudowire's attachment circuit: the reopened port receives every frame too.
    pub(crate) receive_every_frame: bool,
}

impl Relink {
    /// The index and MTU of the interface of the port's name now, in its namespace.
    fn interface_now(&self) -> (Option<u32>, Option<u32>) {
        crate::vrfs::run_in(self.netns.as_ref(), || {
            (AfPacketPort::interface_index(&self.ifname), AfPacketPort::interface_mtu(&self.ifname))
        })
        .unwrap_or((None, None))
    }
}

/// The MTU a port uses on an interface whose MTU is `interface`: the configured one
/// (`configured`) if the interface carries it, else the interface's (frames above it
/// could not leave: the kernel refuses them one by one, and the fast path's redirects
/// skip the check altogether).
pub(crate) fn port_mtu(configured: Option<u32>, interface: u32) -> u32 {
    configured.map_or(interface, |c| c.min(interface))
}

/// What the link check changed.
#[derive(Debug, Default)]
pub(crate) struct LinkChanges {
    /// Ports opened again on a re-created interface, with its new index.
    pub(crate) reopened: Vec<(PortId, u32)>,
    /// Ports whose MTU changed, with the new one.
    pub(crate) mtu: Vec<(PortId, u32)>,
}

/// Follows the MTU of an AF_PACKET port's interface (`relink`, now `interface`) into the
/// pipeline (the configured `mtu`, if any, wins while the interface carries it), with a
/// log line; records the change in `changes`.
fn follow_mtu(
    dp: &mut Dataplane,
    id: PortId,
    name: &str,
    relink: &Relink,
    interface: Option<u32>,
    changes: &mut LinkChanges,
) {
    let Some(interface) = interface else { return };
    let Some(old) = dp.ports().get(usize::from(id)).map(|p| p.mtu) else { return };
    let mtu = port_mtu(relink.mtu, interface);
    if mtu == old {
        return;
    }
    match relink.mtu {
        Some(configured) if configured > interface => warn!(
            port = %name,
            interface = %relink.ifname,
            old_mtu = old,
            mtu,
            configured,
            "the interface's MTU is below the port's configured mtu: the port uses the interface's until it is raised"
        ),
        _ => {
            info!(port = %name, interface = %relink.ifname, old_mtu = old, mtu, "the interface's MTU changed: the port follows it")
        }
    }
    dp.set_port_mtu(id, mtu);
    changes.mtu.push((id, mtu));
}

/// The forwarding loop's record of one port's faults, next to the port.
#[derive(Debug)]
pub(crate) struct PortWatch {
    pub(crate) faults: PortFaults,
    /// Counters of the port's earlier sockets (before it was reopened): the port's
    /// counters run on across a reopen.
    earlier: PortStats,
    /// For AF_PACKET ports.
    relink: Option<Relink>,
    /// The descriptor reported an error in the last poll round.
    erred_last_round: bool,
    /// Left out of the poll set until the next link check: it reported errors in two
    /// poll rounds in a row (an error condition that reading does not clear would
    /// otherwise wake the loop at once, forever).
    muted: bool,
    /// Errors since the last receive that delivered frames.
    pub(crate) failing: bool,
    last_warning: Option<Instant>,
    /// Why the port could not be reopened, as last logged (logged again only if it changes).
    refusal: Option<String>,
}

impl PortWatch {
    pub(crate) fn new(relink: Option<Relink>) -> PortWatch {
        PortWatch {
            faults: PortFaults::default(),
            earlier: PortStats::default(),
            relink,
            erred_last_round: false,
            muted: false,
            failing: false,
            last_warning: None,
            refusal: None,
        }
    }

    /// Counts an error of port `name`; warns at most every [`ERROR_LOG_EVERY`].
    pub(crate) fn error(&mut self, now: Instant, name: &str, what: &dyn std::fmt::Display) {
        self.faults.errors += 1;
        self.failing = true;
        if self.last_warning.is_none_or(|t| now.duration_since(t) >= ERROR_LOG_EVERY) {
            self.last_warning = Some(now);
            warn!(port = %name, error = %what, errors = self.faults.errors, "port error");
        }
    }

    /// Takes in a poll round's result for the port (index `i` of `set`); returns whether
    /// to receive from it. An error condition (the interface went down or was deleted:
    /// `ENETDOWN`) is level-triggered: the receive reads it, and so clears it. One that
    /// reading does not clear would wake the loop at once, forever: a port reporting
    /// errors in two rounds in a row is left out of the poll set until
    /// [`PortWatch::unmute`] (the next link check).
    pub(crate) fn polled(&mut self, now: Instant, name: &str, set: &mut PollSet, i: usize) -> bool {
        let receive = self.took(now, name, set.take(i));
        if self.muted {
            set.mute(i);
        }
        receive
    }

    /// [`PortWatch::polled`] on what the poll reported (`r`): whether to receive; sets
    /// `muted` on the second round of errors in a row.
    fn took(&mut self, now: Instant, name: &str, r: Readiness) -> bool {
        let erred = r.error();
        if erred {
            self.error(now, name, &format_args!("poll revents {:#x}", r.bits()));
            if self.erred_last_round {
                self.muted = true;
                warn!(port = %name, "the port keeps reporting errors: not polled for a second");
            }
        }
        self.erred_last_round = erred;
        erred || r.readable()
    }

    /// Puts a muted port back in the poll set (index `i` of `set`, `port`: its descriptor).
    fn unmute(&mut self, set: &mut PollSet, i: usize, port: BorrowedFd<'_>) {
        if self.muted {
            self.muted = false;
            self.erred_last_round = false;
            set.set(i, port);
        }
    }

    /// The port delivered frames.
    pub(crate) fn received(&mut self, name: &str) {
        if self.failing {
            self.failing = false;
            self.last_warning = None;
            info!(port = %name, errors = self.faults.errors, "port receives again");
        }
    }

    /// The port's counters, its earlier sockets' included.
    pub(crate) fn stats(&self, port: &dyn Port) -> PortStats {
        self.earlier + port.stats()
    }
}

/// Follows the MTU of a port whose medium is not an interface (a tunnel's path MTU, see
/// [`Port::medium_mtu`]) into the pipeline, with a log line.
fn follow_medium_mtu(dp: &mut Dataplane, id: PortId, port: &dyn Port, changes: &mut LinkChanges) {
    let Some(mtu) = port.medium_mtu() else { return };
    let Some(old) = dp.ports().get(usize::from(id)).map(|p| p.mtu) else { return };
    if mtu == old {
        return;
    }
    info!(port = %port.info().name, old_mtu = old, mtu, "the path MTU of the port's medium changed: the port follows it");
    dp.set_port_mtu(id, mtu);
    changes.mtu.push((id, mtu));
}

/// The state of interface `ifname` of the calling thread's namespace now: administratively
/// up or down, with its carrier or without (`IFF_UP`, `IFF_RUNNING`), as `ip link` says.
pub(crate) fn interface_state(ifname: &str) -> std::io::Result<vmpls_control::api::LinkState> {
    let name = vmpls_sys::iface::IfName::new(ifname)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "not an interface name"))?;
    let ctl = vmpls_sys::iface::control_socket()?;
    let f = libc::c_int::from(vmpls_sys::iface::flags(&ctl, &name)?);
    Ok(vmpls_control::api::LinkState::of(f & libc::IFF_UP != 0, f & libc::IFF_RUNNING != 0))
}

/// Hands the pipeline the link state (administratively up with a carrier) of a VPLS
/// attachment circuit: one that goes down has its MACs withdrawn and is left out of
/// floods until it is back. Ports of no VPLS are not asked about.
fn follow_vpls_link(dp: &mut Dataplane, id: PortId, name: &str, relink: &Relink) {
    if relink.netns.is_some() || dp.fib().load().port_vpls(id).is_none() {
        return;
    }
    let up = match interface_state(&relink.ifname) {
        Ok(state) => state == vmpls_control::api::LinkState::Up,
        Err(_) => return,
    };
    if up != dp.port_link_up(id) {
        info!(port = %name, up, "VPLS attachment circuit link changed");
        dp.set_port_link(id, up);
    }
}

/// Checks the interfaces of the AF_PACKET ports: one whose interface was deleted and
/// created again (a new index under the same name) is opened anew on it, standing in for
/// the port it replaces (same MAC and MTU, see [`AfPacketPort::stand_in_for`]), so the
/// pipeline and the neighbours on the link go on as before. A down interface needs
/// nothing: the kernel keeps the socket bound and resumes it when the interface comes up.
/// Follows each interface's MTU ([`follow_mtu`]) and each tunnel's path MTU
/// ([`follow_medium_mtu`]). Also puts muted ports back in the poll set. Bounded: one name
/// lookup and one MTU query per port, and one open per port whose interface came back.
pub(crate) fn check_links(
    dp: &mut Dataplane,
    ports: &mut [Box<dyn Port>],
    watch: &mut [PortWatch],
    set: &mut PollSet,
) -> LinkChanges {
    let mut changes = LinkChanges::default();
    for (i, w) in watch.iter_mut().enumerate() {
        w.unmute(set, i, ports[i].as_fd());
        let Some(relink) = &mut w.relink else {
            follow_medium_mtu(dp, i as PortId, ports[i].as_ref(), &mut changes);
            continue;
        };
        let name = ports[i].info().name.clone();
        let (now_index, now_mtu) = relink.interface_now();
        // An interface seen gone and now back under its old index (moved out of a VRF's
        // namespace and into the namespace created again keeps its index) needs the
        // reopen all the same: the socket lost its binding when it left.
        if now_index == Some(relink.ifindex) && !w.faults.detached {
            follow_mtu(dp, i as PortId, &name, relink, now_mtu, &mut changes);
            follow_vpls_link(dp, i as PortId, &name, relink);
            continue;
        }
        // Deleted (a socket bound to it is unbound for good), and maybe back.
        if !w.faults.detached {
            w.faults.detached = true;
            warn!(
                port = %name,
                interface = %relink.ifname,
                "the interface was deleted: the port is out of service until an interface of that name is back"
            );
        }
        let Some(mut previous) = dp.ports().get(i).filter(|_| now_index.is_some()).cloned() else { continue };
        // The new interface's MTU is followed as any change of it (the configured one
        // wins while it carries it).
        if let Some(interface) = now_mtu {
            previous.mtu = port_mtu(relink.mtu, interface);
        }
        // The MTU asked for is checked before the socket is bound: a refused interface
        // costs a socket and a few ioctls a second, and no membership change on it.
        let reopened = crate::vrfs::run_in(relink.netns.as_ref(), || {
            AfPacketPort::open(previous.id, &previous.name, &relink.ifname, Some(previous.mtu))
        })
        .map_err(|source| vmpls_ports::PortError::Io {
            ifname: relink.ifname.clone(),
            op: "enter the VRF's network namespace",
            source,
        })
        .and_then(|r| r)
        .and_then(|mut port| {
            if relink.receive_every_frame {
                port.receive_every_frame()?;
            }
            port.stand_in_for(&previous).map(|own| (port, own))
        });
        match reopened {
            Ok((port, (mac, mtu))) => {
                let ifindex = port.ifindex();
                w.earlier = w.earlier + ports[i].stats();
                ports[i] = with_overrides(Box::new(port), relink.offloads);
                set.set(i, ports[i].as_fd());
                relink.ifindex = ifindex;
                w.faults.reopened += 1;
                w.faults.detached = false;
                w.refusal = None;
                w.erred_last_round = false;
                changes.reopened.push((previous.id, ifindex));
                info!(port = %name, interface = %relink.ifname, ifindex, "the interface is back: port reopened");
                if mac != previous.mac {
                    info!(
                        port = %name,
                        interface_mac = %vmpls_wire::ethernet::Address(mac),
                        port_mac = %vmpls_wire::ethernet::Address(previous.mac),
                        "the interface has a new MAC; the port keeps its own (promiscuous mode)"
                    );
                }
                if dp.ports().get(i).is_some_and(|p| p.mtu != previous.mtu) {
                    info!(
                        port = %name,
                        interface_mtu = mtu,
                        mtu = previous.mtu,
                        "the interface has another MTU: the port follows it"
                    );
                    dp.set_port_mtu(previous.id, previous.mtu);
                    changes.mtu.push((previous.id, previous.mtu));
                }
            }
            Err(e) => {
                let why = format!("{:#}", anyhow::Error::from(e));
                if w.refusal.as_deref() != Some(why.as_str()) {
                    warn!(
                        port = %name,
                        interface = %relink.ifname,
                        error = %why,
                        "the interface is back but the port cannot use it; trying again every second"
                    );
                    w.refusal = Some(why);
                }
            }
        }
    }
    changes
}

/// Hands the pipeline the offloads each port accepts now, where they changed: a
/// vhost-user port's caps follow what its guest negotiated (they change when a guest
/// connects, renegotiates or goes away). One struct compare per port.
pub(crate) fn refresh_caps(dp: &mut Dataplane, ports: &[Box<dyn Port>]) {
    for (i, port) in ports.iter().enumerate() {
        let caps = port.info().caps;
        if dp.ports().get(i).is_some_and(|known| known.caps != caps) {
            info!(port = %port.info().name, ?caps, "port offloads changed");
            dp.set_port_caps(i as PortId, caps);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakePort;
    use vmpls_dataplane::DataplaneConfig;
    use vmpls_fib::FibHandle;

    #[test]
    fn caps_follow_the_ports_when_they_change() {
        use vmpls_dataplane::{PortCaps, PortInfo};
        let info = |id: PortId, caps| PortInfo {
            id,
            name: format!("p{id}"),
            mac: [2, 0, 0, 0, 0, id as u8],
            mtu: 1500,
            caps,
        };
        let offered = PortCaps { tso4: true, tso6: true, csum: true, ..PortCaps::default() };
        let mut ports: Vec<Box<dyn Port>> =
            vec![Box::new(FakePort::new(info(0, offered))), Box::new(FakePort::new(info(1, offered)))];
        let infos: Vec<_> = ports.iter().map(|p| p.info().clone()).collect();
        let fib = FibHandle::new(vmpls_fib::Fib::default());
        let mut dp = Dataplane::new(fib, infos, DataplaneConfig::default());
        refresh_caps(&mut dp, &ports);
        assert_eq!(dp.ports()[1].caps, offered);
        // The guest on port 1 negotiated no receive offloads.
        ports[1] = Box::new(FakePort::new(info(1, PortCaps::default())));
        refresh_caps(&mut dp, &ports);
        assert_eq!(dp.ports()[1].caps, PortCaps::default());
        assert_eq!(dp.ports()[0].caps, offered, "other ports keep theirs");
    }

    #[test]
    fn a_port_whose_error_condition_persists_is_muted_until_the_link_check() {
        // A pipe whose writer is gone: POLLHUP that no read clears.
        let (rd, wr) = std::io::pipe().unwrap();
        drop(wr);
        let mut w = PortWatch::new(None);
        let mut set = PollSet::new();
        set.push(rd.as_fd());
        let now = Instant::now();
        let mut rounds = 0;
        // A muted entry is left out and the poll times out.
        while set.poll(Duration::from_millis(50)).unwrap() > 0 {
            assert!(w.polled(now, "p", &mut set, 0), "an error is read to clear it");
            rounds += 1;
            assert!(rounds <= 2, "still polled after {rounds} rounds");
        }
        assert_eq!((rounds, set.is_muted(0), w.faults.errors), (2, true, 2));
        w.unmute(&mut set, 0, rd.as_fd());
        assert!(!set.is_muted(0));
        assert_eq!(set.poll(Duration::ZERO).unwrap(), 1, "polled again after the check");
        // A single error (read, cleared) mutes nothing.
        let mut w = PortWatch::new(None);
        assert!(w.took(now, "p", Readiness::from_bits(libc::POLLERR)));
        assert!(w.took(now, "p", Readiness::from_bits(libc::POLLIN)));
        assert!(!w.took(now, "p", Readiness::default()), "nothing to read");
        assert_eq!((w.faults.errors, w.muted), (1, false));
    }

    #[test]
    fn the_configured_mtu_wins_while_the_interface_carries_it() {
        assert_eq!(port_mtu(None, 1400), 1400, "none configured: the interface's");
        assert_eq!(port_mtu(None, 9000), 9000);
        assert_eq!(port_mtu(Some(1500), 9000), 1500, "a raised interface keeps the configured");
        assert_eq!(port_mtu(Some(1500), 1400), 1400, "frames above the interface's cannot leave");
    }

    #[test]
    fn counters_run_on_across_a_reopen() {
        let mut a = PortStats { rx_packets: 3, tx_bytes: 100, ..PortStats::default() };
        a.tx_errors.record(libc::ENXIO);
        let mut b = PortStats { rx_packets: 2, tx_bytes: 50, tx_dropped: 1, ..PortStats::default() };
        b.tx_errors.record(libc::ENOBUFS);
        let sum = a + b;
        assert_eq!((sum.rx_packets, sum.tx_bytes, sum.tx_dropped), (5, 150, 1));
        assert_eq!((sum.tx_errors.total(), sum.tx_errors.last_other_errno), (2, libc::ENXIO));
    }
}
