//! Building a [`Fib`] from ports, addresses and routes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use vmpls_wire::prefix::mask;

use crate::{
    DEFAULT_VRF_NAME, FIRST_UNRESERVED, Fib, FibError, Label, LabelAcceptance, LabelAction, LabelRoute,
    LabelTable, LpmKey, MAX_LABEL, NexthopGroup, PortAddrs, PortId, PrefixRoute, RouteTarget, Vrf, VrfId,
};

#[derive(Debug, Clone)]
struct PortSpec {
    name: String,
    vrf: VrfId,
    addrs: PortAddrs,
    label_acceptance: LabelAcceptance,
}

/// Collects ports, router addresses and routes, then [`build`](FibBuilder::build)s a
/// [`Fib`] with the routes the addresses imply.
///
/// For every port address `build` adds a `Local` host route (/32 or /128) and a
/// `Connected` route for its subnet in the port's VRF; router addresses become `Local`
/// routes in the default VRF.
///
/// ```
/// use std::net::{IpAddr, Ipv4Addr};
/// use vmpls_fib::*;
/// let mut b = Fib::builder();
/// let core = b.add_port("core", DEFAULT_VRF, &[(IpAddr::V4(Ipv4Addr::new(198, 18, 10, 1)), 24)]).unwrap();
/// let via = Some(IpAddr::V4(Ipv4Addr::new(198, 18, 10, 2)));
/// let group = NexthopGroup::single(Nexthop::new(core, via, vec![1002])).unwrap();
/// b.add_prefix_route(DEFAULT_VRF, IpAddr::V4(Ipv4Addr::new(198, 18, 2, 0)), 24,
///     PrefixRoute::new(RouteTarget::Forward(group))).unwrap();
/// let fib = b.build().unwrap();
/// let (_, len, _) = fib.vrfs[0].v4.lookup(Ipv4Addr::new(198, 18, 10, 7)).unwrap();
/// assert_eq!(len, 24); // the connected subnet
/// ```
#[derive(Debug, Clone)]
pub struct FibBuilder {
    vrfs: Vec<String>,
    ports: Vec<PortSpec>,
    router_v4: Option<Ipv4Addr>,
    router_v6: Option<Ipv6Addr>,
    labels: LabelTable,
    routes: Vec<(VrfId, IpAddr, u8, PrefixRoute)>,
}

impl Default for FibBuilder {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether `a` can be one of the router's own addresses.
fn usable_host(a: IpAddr) -> bool {
    !(a.is_unspecified() || a.is_multicast() || a == IpAddr::V4(Ipv4Addr::BROADCAST))
}

pub(crate) fn check_len(addr: IpAddr, len: u8) -> Result<(), FibError> {
    let max = if addr.is_ipv4() { <Ipv4Addr as LpmKey>::BITS } else { <Ipv6Addr as LpmKey>::BITS };
    if len > max {
        return Err(FibError::InvalidPrefixLength { len, max });
    }
    Ok(())
}

impl FibBuilder {
    /// A builder with the default VRF and nothing else.
    pub fn new() -> Self {
        FibBuilder {
            vrfs: vec![DEFAULT_VRF_NAME.to_string()],
            ports: Vec::new(),
            router_v4: None,
            router_v6: None,
            labels: LabelTable::new(),
            routes: Vec::new(),
        }
    }

    /// Adds a VRF and returns its id.
    ///
    /// # Errors
    /// [`FibError::DuplicateVrf`] if the name is taken (also "default"),
    /// [`FibError::TooManyVrfs`].
    pub fn add_vrf(&mut self, name: &str) -> Result<VrfId, FibError> {
        if self.vrf_id(name).is_some() {
            return Err(FibError::DuplicateVrf { name: name.to_string() });
        }
        let id = VrfId::try_from(self.vrfs.len()).map_err(|_| FibError::TooManyVrfs)?;
        self.vrfs.push(name.to_string());
        Ok(id)
    }

    /// The id of the VRF named `name`.
    pub fn vrf_id(&self, name: &str) -> Option<VrfId> {
        self.vrfs.iter().position(|v| v == name).map(|i| i as VrfId)
    }

    /// Adds a port in `vrf` with its addresses (address, prefix length) and returns its
    /// id; ids count up from 0 in the order ports are added. A port in the default VRF
    /// accepts labelled frames, a port in another VRF (a customer's) does not;
    /// [`set_port_accepts_mpls`](FibBuilder::set_port_accepts_mpls) and
    /// [`set_port_label_acceptance`](FibBuilder::set_port_label_acceptance) decide otherwise.
    ///
    /// # Errors
    /// Unknown VRF, a prefix length too long, an address that cannot be a host's
    /// (unspecified, multicast, broadcast), or too many ports.
    pub fn add_port(&mut self, name: &str, vrf: VrfId, addrs: &[(IpAddr, u8)]) -> Result<PortId, FibError> {
        if usize::from(vrf) >= self.vrfs.len() {
            return Err(FibError::UnknownVrf { vrf });
        }
        let id = PortId::try_from(self.ports.len()).map_err(|_| FibError::TooManyPorts)?;
        let mut pa = PortAddrs::default();
        for &(addr, len) in addrs {
            check_len(addr, len)?;
            if !usable_host(addr) {
                return Err(FibError::InvalidAddress { addr });
            }
            match addr {
                IpAddr::V4(a) => pa.v4.push((a, len)),
                IpAddr::V6(a) => pa.v6.push((a, len)),
            }
        }
        self.ports.push(PortSpec {
            name: name.to_string(),
            vrf,
            addrs: pa,
            label_acceptance: if vrf == crate::DEFAULT_VRF {
                LabelAcceptance::Always
            } else {
                LabelAcceptance::Never
            },
        });
        Ok(id)
    }

    /// Sets whether labelled frames arriving on `port` are switched ([`Fib::accepts_mpls`]).
    ///
    /// # Errors
    /// [`FibError::UnknownPort`].
    pub fn set_port_accepts_mpls(&mut self, port: PortId, accepts: bool) -> Result<&mut Self, FibError> {
        let acceptance = if accepts { LabelAcceptance::Always } else { LabelAcceptance::Never };
        self.set_port_label_acceptance(port, acceptance)
    }

    /// Sets when labelled frames arriving on `port` are switched.
    ///
    /// # Errors
    /// [`FibError::UnknownPort`].
    pub fn set_port_label_acceptance(
        &mut self,
        port: PortId,
        acceptance: LabelAcceptance,
    ) -> Result<&mut Self, FibError> {
        let spec = self.ports.get_mut(usize::from(port)).ok_or(FibError::UnknownPort { port })?;
        spec.label_acceptance = acceptance;
        Ok(self)
    }

    /// The id of the port named `name`.
    pub fn port_id(&self, name: &str) -> Option<PortId> {
        self.ports.iter().position(|p| p.name == name).map(|i| i as PortId)
    }

    /// Sets the router's IPv4 address (source of the ICMP it originates).
    pub fn router_v4(&mut self, addr: Ipv4Addr) -> &mut Self {
        self.router_v4 = Some(addr);
        self
    }

    /// Sets the router's IPv6 address (source of the ICMPv6 it originates).
    pub fn router_v6(&mut self, addr: Ipv6Addr) -> &mut Self {
        self.router_v6 = Some(addr);
        self
    }

    /// Adds the route for incoming label `label`.
    ///
    /// # Errors
    /// A label above 1048575 or in the reserved range 0-15, a label given twice.
    /// (Ports and VRFs the route names are checked by [`build`](FibBuilder::build).)
    pub fn add_label_route(&mut self, label: Label, route: LabelRoute) -> Result<(), FibError> {
        if label > MAX_LABEL {
            return Err(FibError::LabelOutOfRange { label });
        }
        if label < FIRST_UNRESERVED {
            return Err(FibError::ReservedLabel { label });
        }
        if self.labels.get(label).is_some() {
            return Err(FibError::DuplicateLabel { label });
        }
        self.labels.try_insert(label, route)?;
        Ok(())
    }

    /// Adds a route for `addr/len` in `vrf`.
    ///
    /// # Errors
    /// A prefix length too long for the family. (Duplicates, ports and VRFs are checked by
    /// [`build`](FibBuilder::build).)
    pub fn add_prefix_route(
        &mut self,
        vrf: VrfId,
        addr: IpAddr,
        len: u8,
        route: PrefixRoute,
    ) -> Result<(), FibError> {
        check_len(addr, len)?;
        self.routes.push((vrf, addr, len, route));
        Ok(())
    }

    fn check_group(&self, group: &NexthopGroup) -> Result<(), FibError> {
        match group.nexthops().iter().find(|nh| usize::from(nh.port) >= self.ports.len()) {
            Some(nh) => Err(FibError::UnknownPort { port: nh.port }),
            None => Ok(()),
        }
    }

    fn check_vrf(&self, vrf: VrfId) -> Result<(), FibError> {
        if usize::from(vrf) >= self.vrfs.len() {
            return Err(FibError::UnknownVrf { vrf });
        }
        Ok(())
    }

    /// The FIB: VRFs, port addresses with their `Local` and `Connected` routes, router
    /// addresses as `Local` routes, then the label and prefix routes added.
    ///
    /// # Errors
    /// A route naming an unknown port or VRF; a prefix defined twice in one VRF, counting
    /// the connected subnets and local addresses (two ports may not share a subnet in one
    /// VRF).
    pub fn build(self) -> Result<Fib, FibError> {
        for (_, route) in self.labels.iter() {
            match route.action() {
                LabelAction::Forward(g) => self.check_group(g)?,
                LabelAction::PopAndLookup { vrf } => self.check_vrf(*vrf)?,
                // Pseudowires are set on the built tables (`Fib::pseudowires`).
                LabelAction::Pseudowire { pw } => return Err(FibError::UnknownPseudowire { pw: *pw }),
            }
        }
        for (vrf, _, _, route) in &self.routes {
            self.check_vrf(*vrf)?;
            if let RouteTarget::Forward(g) = &route.target {
                self.check_group(g)?;
            }
            match route.target {
                RouteTarget::Connected { port } if usize::from(port) >= self.ports.len() => {
                    return Err(FibError::UnknownPort { port });
                }
                _ => {}
            }
        }

        let mut vrfs: Vec<Vrf> = self.vrfs.iter().map(Vrf::new).collect();
        for (id, port) in self.ports.iter().enumerate() {
            let vrf = &mut vrfs[usize::from(port.vrf)];
            for &(a, len) in &port.addrs.v4 {
                add_port_routes(&mut vrf.v4, port.vrf, a, len, id as PortId)?;
            }
            for &(a, len) in &port.addrs.v6 {
                add_port_routes(&mut vrf.v6, port.vrf, a, len, id as PortId)?;
            }
        }
        let default = &mut vrfs[usize::from(crate::DEFAULT_VRF)];
        if let Some(a) = self.router_v4 {
            add_local(&mut default.v4, crate::DEFAULT_VRF, a)?;
        }
        if let Some(a) = self.router_v6 {
            add_local(&mut default.v6, crate::DEFAULT_VRF, a)?;
        }
        let mut labels_out = vec![0u32; self.ports.len()];
        let ports_out = self.labels.iter().flat_map(|(_, r)| crate::label_route_labels_out(r));
        let ports_out =
            ports_out.chain(self.routes.iter().flat_map(|(_, _, _, r)| crate::prefix_route_labels_out(r)));
        for p in ports_out {
            labels_out[usize::from(p)] += 1;
        }
        for (vrf, addr, len, route) in self.routes {
            let table = &mut vrfs[usize::from(vrf)];
            let dup = match addr {
                IpAddr::V4(a) => table.v4.get(a, len).is_some() || table.v4.insert(a, len, route)?.is_some(),
                IpAddr::V6(a) => table.v6.get(a, len).is_some() || table.v6.insert(a, len, route)?.is_some(),
            };
            if dup {
                return Err(FibError::DuplicatePrefix { vrf, addr: mask(addr, len), len });
            }
        }
        Ok(Fib {
            labels: self.labels,
            vrfs,
            port_vrf: self.ports.iter().map(|p| p.vrf).collect(),
            port_accepts_mpls: self
                .ports
                .iter()
                .zip(&labels_out)
                .map(|(p, &n)| p.label_acceptance.accepts(n))
                .collect(),
            port_label_acceptance: self.ports.iter().map(|p| p.label_acceptance).collect(),
            port_labels_out: labels_out,
            port_pw: vec![None; self.ports.len()],
            port_vpls: vec![None; self.ports.len()],
            port_addrs: self.ports.into_iter().map(|p| p.addrs).collect(),
            router_v4: self.router_v4,
            router_v6: self.router_v6,
            pseudowires: Vec::new(),
            vpls: Vec::new(),
            pw_vpls: Vec::new(),
        })
    }
}

fn add_local<A: LpmKey + Into<IpAddr>>(
    t: &mut crate::Lpm<A, PrefixRoute>,
    vrf: VrfId,
    a: A,
) -> Result<(), FibError> {
    match t.get(a, A::BITS) {
        Some(r) if r.target == RouteTarget::Local => Ok(()),
        Some(_) => Err(FibError::DuplicatePrefix { vrf, addr: a.into(), len: A::BITS }),
        None => t.insert(a, A::BITS, PrefixRoute::new(RouteTarget::Local)).map(|_| ()),
    }
}

fn add_port_routes<A: LpmKey + Into<IpAddr>>(
    t: &mut crate::Lpm<A, PrefixRoute>,
    vrf: VrfId,
    a: A,
    len: u8,
    port: PortId,
) -> Result<(), FibError> {
    add_local(t, vrf, a)?;
    if len == A::BITS {
        return Ok(());
    }
    let connected = RouteTarget::Connected { port };
    match t.get(a, len) {
        Some(r) if r.target == connected => Ok(()),
        Some(_) => Err(FibError::DuplicatePrefix { vrf, addr: mask(a.into(), len), len }),
        None => t.insert(a, len, PrefixRoute::new(connected)).map(|_| ()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DEFAULT_VRF, Nexthop, TtlModel};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn pe1() -> FibBuilder {
        let mut b = FibBuilder::new();
        b.router_v4("198.18.255.1".parse().unwrap()).router_v6("2001:db8:ff::1".parse().unwrap());
        b.add_port("ce1", DEFAULT_VRF, &[(ip("198.18.1.1"), 24), (ip("2001:db8:1::1"), 64)]).unwrap();
        b.add_port("core", DEFAULT_VRF, &[(ip("198.18.10.1"), 24), (ip("2001:db8:10::1"), 64)]).unwrap();
        b
    }

    #[test]
    fn build_adds_local_and_connected_routes() {
        let fib = pe1().build().unwrap();
        let v = &fib.vrfs[0];
        let target = |a: &str| v.lookup(ip(a)).map(|r| r.target.clone());
        assert_eq!(target("198.18.1.1"), Some(RouteTarget::Local));
        assert_eq!(target("198.18.1.9"), Some(RouteTarget::Connected { port: 0 }));
        assert_eq!(target("198.18.10.200"), Some(RouteTarget::Connected { port: 1 }));
        assert_eq!(target("198.18.255.1"), Some(RouteTarget::Local));
        assert_eq!(target("2001:db8:ff::1"), Some(RouteTarget::Local));
        assert_eq!(target("2001:db8:10::1"), Some(RouteTarget::Local));
        assert_eq!(target("2001:db8:10::99"), Some(RouteTarget::Connected { port: 1 }));
        assert_eq!(target("198.18.2.1"), None);
        assert_eq!(v.v4.len(), 5);
        assert_eq!(fib.port_vrf, vec![0, 0]);
    }

    #[test]
    fn build_adds_label_and_prefix_routes() {
        let mut b = pe1();
        let g = NexthopGroup::single(Nexthop::new(1, Some(ip("198.18.10.2")), vec![1002])).unwrap();
        b.add_prefix_route(
            DEFAULT_VRF,
            ip("198.18.2.0"),
            24,
            PrefixRoute::new(RouteTarget::Forward(g.clone())).with_ttl_model(TtlModel::Pipe),
        )
        .unwrap();
        b.add_prefix_route(DEFAULT_VRF, ip("0.0.0.0"), 0, PrefixRoute::new(RouteTarget::Blackhole)).unwrap();
        b.add_label_route(
            2001,
            LabelRoute::new(LabelAction::PopAndLookup { vrf: DEFAULT_VRF }, TtlModel::Uniform),
        )
        .unwrap();
        let fib = b.build().unwrap();
        let r = fib.vrfs[0].lookup(ip("198.18.2.5")).unwrap();
        assert_eq!(r.target, RouteTarget::Forward(g));
        assert_eq!(r.ttl_model(), TtlModel::Pipe);
        assert_eq!(fib.vrfs[0].lookup(ip("203.0.113.1")).unwrap().target, RouteTarget::Blackhole);
        assert!(matches!(fib.labels.get(2001).unwrap().action(), LabelAction::PopAndLookup { vrf: 0 }));
    }

    #[test]
    fn ports_in_a_vrf_get_their_routes_there() {
        let mut b = FibBuilder::new();
        let cust = b.add_vrf("cust").unwrap();
        assert_eq!(b.add_vrf("cust"), Err(FibError::DuplicateVrf { name: "cust".into() }));
        b.add_port("core", DEFAULT_VRF, &[(ip("198.18.10.1"), 24)]).unwrap();
        // The same subnet in another VRF is fine.
        b.add_port("ce", cust, &[(ip("198.18.10.1"), 24)]).unwrap();
        let fib = b.build().unwrap();
        assert_eq!(fib.vrfs[1].name, "cust");
        assert_eq!(fib.vrfs[1].lookup(ip("198.18.10.5")).unwrap().target, RouteTarget::Connected { port: 1 });
        assert_eq!(fib.vrfs[0].lookup(ip("198.18.10.5")).unwrap().target, RouteTarget::Connected { port: 0 });
        assert_eq!(fib.port_vrf, vec![0, 1]);
    }

    #[test]
    fn only_ports_in_the_default_vrf_accept_labels_unless_set() {
        let mut b = FibBuilder::new();
        let cust = b.add_vrf("cust").unwrap();
        let core = b.add_port("core", DEFAULT_VRF, &[]).unwrap();
        let ce = b.add_port("ce", cust, &[]).unwrap();
        let fib = b.clone().build().unwrap();
        assert_eq!((fib.accepts_mpls(core), fib.accepts_mpls(ce), fib.accepts_mpls(7)), (true, false, false));
        b.set_port_accepts_mpls(ce, true).unwrap().set_port_accepts_mpls(core, false).unwrap();
        let fib = b.build().unwrap();
        assert_eq!(fib.port_accepts_mpls, vec![false, true]);
        assert_eq!(
            FibBuilder::new().set_port_accepts_mpls(0, true).err(),
            Some(FibError::UnknownPort { port: 0 })
        );
    }

    #[test]
    fn conflicts_and_bad_references_are_errors() {
        let mut b = pe1();
        b.add_prefix_route(DEFAULT_VRF, ip("198.18.1.0"), 24, PrefixRoute::new(RouteTarget::Blackhole))
            .unwrap();
        assert_eq!(
            b.build().unwrap_err(),
            FibError::DuplicatePrefix { vrf: 0, addr: ip("198.18.1.0"), len: 24 }
        );

        let mut b = pe1();
        b.add_port("other", DEFAULT_VRF, &[(ip("198.18.1.2"), 24)]).unwrap();
        assert!(matches!(b.build(), Err(FibError::DuplicatePrefix { len: 24, .. })));

        let mut b = pe1();
        let g = NexthopGroup::single(Nexthop::new(7, None, vec![])).unwrap();
        b.add_prefix_route(DEFAULT_VRF, ip("198.18.2.0"), 24, PrefixRoute::new(RouteTarget::Forward(g)))
            .unwrap();
        assert_eq!(b.build().unwrap_err(), FibError::UnknownPort { port: 7 });

        let mut b = pe1();
        b.add_label_route(100, LabelRoute::new(LabelAction::PopAndLookup { vrf: 3 }, TtlModel::Uniform))
            .unwrap();
        assert_eq!(b.build().unwrap_err(), FibError::UnknownVrf { vrf: 3 });

        let mut b = pe1();
        let pop = LabelRoute::new(LabelAction::PopAndLookup { vrf: 0 }, TtlModel::Uniform);
        assert_eq!(b.add_label_route(15, pop.clone()), Err(FibError::ReservedLabel { label: 15 }));
        assert_eq!(
            b.add_label_route(1 << 20, pop.clone()),
            Err(FibError::LabelOutOfRange { label: 1 << 20 })
        );
        b.add_label_route(16, pop.clone()).unwrap();
        assert_eq!(b.add_label_route(16, pop), Err(FibError::DuplicateLabel { label: 16 }));
        assert_eq!(
            b.add_prefix_route(0, ip("198.18.0.0"), 33, PrefixRoute::new(RouteTarget::Blackhole)),
            Err(FibError::InvalidPrefixLength { len: 33, max: 32 })
        );
        assert_eq!(
            b.add_port("x", 0, &[(ip("224.0.0.1"), 24)]),
            Err(FibError::InvalidAddress { addr: ip("224.0.0.1") })
        );
        assert_eq!(b.add_port("x", 5, &[]), Err(FibError::UnknownVrf { vrf: 5 }));
    }

    #[test]
    fn host_address_port_and_shared_router_address() {
        let mut b = FibBuilder::new();
        b.router_v4("198.18.1.1".parse().unwrap());
        b.add_port("p2p", DEFAULT_VRF, &[(ip("198.18.1.1"), 32)]).unwrap();
        let fib = b.build().unwrap();
        assert_eq!(fib.vrfs[0].v4.len(), 1);
        assert_eq!(fib.vrfs[0].lookup(ip("198.18.1.1")).unwrap().target, RouteTarget::Local);
    }
}
