//! VPLS instances (RFC 4762) as the pipeline uses them: a bridge over attachment circuits
//! (ports in raw Ethernet mode) and pseudowires (entries of
//! [`Fib::pseudowires`](crate::Fib::pseudowires) without an attachment of their own).
//! The bridge's MAC table is the pipeline's state, not part of the FIB.

use crate::PortId;

/// One VPLS instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VplsInstance {
    /// Its name (the key in the control plane and in `bridge fdb show`).
    pub name: String,
    /// Its attachment circuits.
    pub attachments: Vec<PortId>,
    /// Its pseudowires: indexes into [`Fib::pseudowires`](crate::Fib::pseudowires).
    pub pseudowires: Vec<u16>,
    /// MAC addresses the instance learns at most; source MACs beyond are not learned.
    pub mac_limit: u32,
    /// Frames a second the instance floods at most (unknown unicast, broadcast,
    /// multicast); 0: no limit.
    pub flood_rate: u32,
    /// Seconds a learned MAC stays without being seen again.
    pub mac_aging_s: u32,
}

impl crate::Fib {
    /// The VPLS instance whose attachment circuit `port` is.
    #[inline]
    pub fn port_vpls(&self, port: PortId) -> Option<u16> {
        *self.port_vpls.get(usize::from(port))?
    }

    /// The VPLS instance pseudowire `pw` belongs to.
    #[inline]
    pub fn pw_vpls(&self, pw: u16) -> Option<u16> {
        *self.pw_vpls.get(usize::from(pw))?
    }
}
