//! What zebra's table ids and interface indexes mean: the question [`crate::fpm`] asks to
//! put zebra's routes into VRFs, and the answer for a router without VRFs
//! ([`DefaultVrfOnly`]). [`crate::vrfs`] defines it and answers it for the VRFs the kernel has.

use vmpls_fib::PortId;

pub use crate::vrfs::VrfLookup;

/// The default VRF only: no table but 254, no VRF interface, and the ports by the
/// interface index their interface has now in the router's namespace (an interface can
/// be deleted and created again under another index).
#[derive(Debug, Clone)]
pub struct DefaultVrfOnly {
    /// Each port's interface, by port id.
    interfaces: Vec<String>,
}

impl DefaultVrfOnly {
    /// The ports' interfaces, in port order.
    pub fn new(interfaces: Vec<String>) -> DefaultVrfOnly {
        DefaultVrfOnly { interfaces }
    }
}

impl VrfLookup for DefaultVrfOnly {
    fn generation(&self) -> u64 {
        0
    }

    fn vrf_of_table(&self, _table: u32) -> Option<String> {
        None
    }

    fn vrf_of_device(&self, _ifindex: u32) -> Option<String> {
        None
    }

    fn port(&self, vrf: Option<&str>, ifindex: u32) -> Option<PortId> {
        if vrf.is_some() {
            return None;
        }
        let i = self.interfaces.iter().position(|name| vmpls_ports::if_nametoindex(name) == Some(ifindex))?;
        PortId::try_from(i).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_vrf_alone_knows_its_ports_and_nothing_else() {
        // The loopback has index 1 in every namespace.
        let lookup = DefaultVrfOnly::new(vec!["no-such-port0".into(), "lo".into()]);
        assert_eq!(lookup.port(None, 1), Some(1));
        assert_eq!(lookup.port(Some("red"), 1), None);
        assert_eq!(lookup.port(None, 0), None);
        assert_eq!((lookup.vrf_of_table(1000), lookup.vrf_of_device(1)), (None, None));
    }
}
