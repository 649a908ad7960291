//! The config's `offloads` forced over what a port reports.

use std::os::fd::{AsFd, BorrowedFd};

use vmpls_control::OffloadOverrides;
use vmpls_dataplane::{Packet, PacketPool};
use vmpls_ports::{Port, PortStats};

/// `port`, wrapped to report the config's offload overrides if it has any.
pub(crate) fn with_overrides(port: Box<dyn Port>, offloads: OffloadOverrides) -> Box<dyn Port> {
    if offloads == OffloadOverrides::default() { port } else { Box::new(WithOffloads::new(port, offloads)) }
}

/// A port with the config's `offloads` forced over what it reports, in the manner of
/// smoltcp's `phy` middlewares: the frames pass through untouched; only the caps the
/// pipeline sees change (re-read at every batch, since a vhost-user port's follow its
/// guest).
struct WithOffloads {
    inner: Box<dyn Port>,
    overrides: OffloadOverrides,
    info: vmpls_dataplane::PortInfo,
}

impl WithOffloads {
    fn new(inner: Box<dyn Port>, overrides: OffloadOverrides) -> WithOffloads {
        let mut info = inner.info().clone();
        info.caps = apply_offloads(info.caps, &overrides);
        WithOffloads { inner, overrides, info }
    }

    fn refresh(&mut self) {
        self.info.caps = apply_offloads(self.inner.info().caps, &self.overrides);
    }
}

/// `caps` with every offload the config names set as it says.
fn apply_offloads(mut caps: vmpls_dataplane::PortCaps, o: &OffloadOverrides) -> vmpls_dataplane::PortCaps {
    for (cap, forced) in [
        (&mut caps.tso4, o.tso4),
        (&mut caps.tso6, o.tso6),
        (&mut caps.uso, o.uso),
        (&mut caps.csum, o.csum),
        (&mut caps.mpls_gso, o.mpls_gso),
    ] {
        if let Some(v) = forced {
            *cap = v;
        }
    }
    caps
}

impl AsFd for WithOffloads {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }
}

impl Port for WithOffloads {
    fn info(&self) -> &vmpls_dataplane::PortInfo {
        &self.info
    }
    fn recv_batch(
        &mut self,
        pool: &mut PacketPool,
        out: &mut Vec<Packet>,
        max: usize,
    ) -> std::io::Result<usize> {
        self.refresh();
        self.inner.recv_batch(pool, out, max)
    }
    fn send_batch(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) -> std::io::Result<usize> {
        self.refresh();
        self.inner.send_batch(pkts, pool)
    }
    fn stats(&self) -> PortStats {
        self.inner.stats()
    }
    fn point_to_point(&self) -> bool {
        self.inner.point_to_point()
    }
    fn set_polling(&mut self, on: bool) -> bool {
        self.inner.set_polling(on)
    }
    fn polls_rings(&self) -> bool {
        self.inner.polls_rings()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakePort;

    #[test]
    fn configured_offloads_override_what_the_port_reports() {
        use vmpls_dataplane::PortCaps;
        let reported = PortCaps { tso4: true, tso6: true, csum: true, ..PortCaps::default() };
        let info = vmpls_dataplane::PortInfo {
            id: 0,
            name: "core".into(),
            mac: [2, 0, 0, 0, 0, 1],
            mtu: 1500,
            caps: reported,
        };
        let overrides =
            OffloadOverrides { tso4: Some(false), mpls_gso: Some(true), ..OffloadOverrides::default() };
        let mut port = WithOffloads::new(Box::new(FakePort::new(info)), overrides);
        let want = PortCaps { tso4: false, tso6: true, csum: true, mpls_gso: true, uso: false };
        assert_eq!(port.info().caps, want);
        // Re-read at every batch, and still overridden.
        let mut pool = PacketPool::new(1);
        port.recv_batch(&mut pool, &mut Vec::new(), 1).unwrap();
        assert_eq!(port.info().caps, want);
    }
}
