//! The file's VPLS instances in the forwarding tables: after the point-to-point
//! pseudowires (`pw_set`, which clears every pseudowire of the FIB it is given, these
//! included), each instance's pseudowires are added to the FIB's pseudowires without an
//! attachment, marked as the instance's, their local labels installed as label routes of
//! [`LabelAction::Pseudowire`] unless a route holds the label ("label in use").

use vmpls_fib::{
    Fib, FibError, LabelAction, LabelRoute, PortId, Pseudowire, RouteTarget, TtlModel, VplsInstance,
};

use super::Tables;
use crate::VplsConfig;
use crate::api::{VplsAttachment, VplsPseudowire, VplsStatus};

/// Sets the instances of `vpls` into `fib` (its point-to-point pseudowires set already).
pub(crate) fn install(vpls: &[VplsConfig], fib: &mut Fib) -> Result<(), FibError> {
    fib.vpls.clear();
    fib.port_vpls = vec![None; fib.port_vrf.len()];
    fib.pw_vpls = vec![None; fib.pseudowires.len()];
    for (i, v) in vpls.iter().enumerate() {
        let Ok(inst) = u16::try_from(i) else { break };
        let mut pseudowires = Vec::with_capacity(v.pseudowires.len());
        for spec in &v.pseudowires {
            let Ok(idx) = u16::try_from(fib.pseudowires.len()) else { break };
            let up = fib.labels.get(spec.local_label).is_none();
            fib.pseudowires.push(Pseudowire {
                name: spec.name.clone(),
                attachment: None,
                local_label: spec.local_label,
                remote_label: spec.remote_label,
                peer: spec.peer,
                control_word: spec.control_word,
                up,
            });
            fib.pw_vpls.push(Some(inst));
            if up {
                let route =
                    LabelRoute { action: LabelAction::Pseudowire { pw: idx }, ttl_model: TtlModel::Pipe };
                fib.set_label_route(spec.local_label, Some(route))?;
            }
            pseudowires.push(idx);
        }
        let attachments: Vec<PortId> =
            v.attachments.iter().copied().filter(|&p| usize::from(p) < fib.port_vpls.len()).collect();
        for &p in &attachments {
            fib.port_vpls[usize::from(p)] = Some(inst);
        }
        fib.vpls.push(VplsInstance {
            name: v.name.clone(),
            attachments,
            pseudowires,
            mac_limit: v.mac_limit,
            flood_rate: v.flood_rate,
            mac_aging_s: v.mac_aging_s,
        });
    }
    Ok(())
}

impl Tables {
    /// Every VPLS instance with its members' state against the forwarding tables in
    /// force and the ports' links (`port_up`); `macs`: the MACs the pipeline holds for
    /// an instance (by name).
    pub fn vpls_status(
        &self,
        port_up: impl Fn(PortId) -> bool,
        macs: impl Fn(&str) -> u64,
    ) -> Vec<VplsStatus> {
        let fib = self.built.as_ref();
        self.file
            .vpls
            .iter()
            .map(|v| {
                let attachments = v
                    .attachments
                    .iter()
                    .map(|&p| VplsAttachment {
                        port: self.file.ports.get(usize::from(p)).map(|c| c.name.clone()).unwrap_or_default(),
                        up: port_up(p),
                    })
                    .collect();
                let pseudowires = v
                    .pseudowires
                    .iter()
                    .map(|spec| {
                        let installed =
                            fib.is_some_and(|f| f.pseudowires.iter().any(|p| p.name == spec.name && p.up));
                        let route = fib.and_then(|f| f.vrfs.first()).and_then(|t| t.lookup(spec.peer));
                        let reachable = route.is_some_and(|r| {
                            matches!(r.target, RouteTarget::Forward(_) | RouteTarget::Connected { .. })
                        });
                        let reason = match (installed, reachable) {
                            (false, _) => Some("label in use"),
                            (true, false) => Some("no route to peer"),
                            (true, true) => None,
                        };
                        VplsPseudowire {
                            spec: spec.clone(),
                            up: reason.is_none(),
                            reason: reason.map(str::to_string),
                        }
                    })
                    .collect();
                VplsStatus {
                    name: v.name.clone(),
                    attachments,
                    pseudowires,
                    mac_limit: v.mac_limit,
                    flood_rate: v.flood_rate,
                    mac_aging: v.mac_aging_s,
                    macs: macs(&v.name),
                }
            })
            .collect()
    }
}
