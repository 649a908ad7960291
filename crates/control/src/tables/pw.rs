//! The pseudowires in the tables: one entry a name, holding what each source says of it
//! (the file's `[[pseudowire]]` or `[[vpls.pseudowire]]`, the CLI's `pw add`, ldpd's
//! through zebra), the one in force chosen as for routes (the CLI's, then the file's,
//! then FRR's). ldpd's pseudowire fills in the file's of its name, point-to-point or a
//! VPLS instance's member alike; one whose name the file has not is kept and shown, down
//! ([`NOT_IN_CONFIG`]), and never carried. Set into the
//! forwarding tables after the routes: a pseudowire's local label becomes a label route
//! of [`LabelAction::Pseudowire`] unless a route holds the label ("label in use").
//! Every change goes through the one transaction ([`Txn`]): the forwarding tables are
//! made with the change, and if that fails the set is put back.

use std::collections::BTreeMap;

use vmpls_fib::{Fib, Label, PortId, RouteTarget};

use super::pw_set::{PwEntry, PwSet};
use super::txn::Txn;
use super::{Tables, TablesError};
use crate::api::{MplsAction, MplsRoute, Nexthop, Protocol, PwOrigin, PwSpec, PwStatus};

impl Tables {
    /// Changes the pseudowire set with `f` and makes the forwarding tables; on error
    /// the set is as it was.
    fn pw_change(
        &mut self,
        f: impl FnOnce(&mut PwSet) -> Result<(), TablesError>,
    ) -> Result<Fib, TablesError> {
        let old = self.pws.clone();
        if let Err(e) = f(&mut self.pws) {
            self.pws = old;
            return Err(e);
        }
        self.pws.retain(|_, e| !e.is_empty());
        match Txn::new(self).finish() {
            Ok(fib) => Ok(fib),
            Err(e) => {
                self.pws = old;
                Err(e)
            }
        }
    }

    /// Adds or changes a pseudowire of the CLI (`pw add`, `pw-replace`); `attachment`:
    /// the port's name, or `None` for the file's `[[pseudowire]]` of that name.
    ///
    /// # Errors
    /// An unknown port, a port already attached to another pseudowire or holding
    /// addresses, a label out of range or the local label held by a route or another
    /// pseudowire, no attachment at all.
    pub fn pw_replace_cli(&mut self, spec: PwSpec, attachment: Option<&str>) -> Result<Fib, TablesError> {
        check_spec(&spec)?;
        let port = match attachment {
            Some(name) => {
                let Some((id, p)) = self.file.port(name) else {
                    return Err(format!("no port named \"{name}\"").into());
                };
                if !p.addresses.is_empty() && self.file.frr.is_none() {
                    return Err(format!(
                        "port \"{name}\" has addresses; an attachment circuit is in raw Ethernet mode and has none"
                    )
                    .into());
                }
                if let Some(v) = self.file.vpls.iter().find(|v| v.attachments.contains(&id)) {
                    return Err(format!(
                        "port \"{name}\" is an attachment circuit of VPLS \"{}\" (line {}); a port serves one service",
                        v.name, v.line
                    )
                    .into());
                }
                Some(id)
            }
            None => None,
        };
        if self.rib.labels().get(&spec.local_label).and_then(|d| d.selected_route()).is_some() {
            return Err(format!("label {} is in use by a label route", spec.local_label).into());
        }
        let name = spec.name.clone();
        self.not_a_vpls_member(&name)?;
        self.pw_change(move |pws| {
            if let Some((other, _)) = pws.iter().find(|(n, e)| {
                **n != name && e.selected().0.is_some_and(|s| s.local_label == spec.local_label)
            }) {
                return Err(format!("label {} is the local label of pseudowire \"{other}\"", spec.local_label).into());
            }
            let attachment = port.or(pws.get(&name).and_then(|e| e.attachment));
            let Some(attachment) = attachment else {
                return Err(format!(
                    "pseudowire \"{name}\" has no attachment: give `attachment PORT` (the config has no [[pseudowire]] of that name)"
                )
                .into());
            };
            if let Some((other, _)) = pws.iter().find(|(n, e)| **n != name && e.attachment == Some(attachment)) {
                return Err(format!("that port is already the attachment of pseudowire \"{other}\"").into());
            }
            let e = pws.entry(name).or_default();
            e.attachment = Some(attachment);
            e.cli = Some(spec);
            Ok(())
        })
    }

    /// Removes a pseudowire (`pw del`): the CLI's, or the file's static one until the
    /// next reload or restart.
    ///
    /// # Errors
    /// No such pseudowire, or one only FRR made (ldpd removes it).
    pub fn pw_del_cli(&mut self, name: &str) -> Result<Fib, TablesError> {
        self.not_a_vpls_member(name)?;
        self.pw_change(|pws| {
            let Some(e) = pws.get_mut(name) else {
                return Err(format!("no pseudowire named \"{name}\"").into());
            };
            if e.cli.is_none() && e.file.is_none() {
                return Err(format!("pseudowire \"{name}\" is ldpd's: remove it in FRR's config").into());
            }
            if e.cli.take().is_none() {
                e.file = None;
                e.in_file = false;
            }
            if e.in_file || e.frr.is_some() {
                return Ok(());
            }
            pws.remove(name);
            Ok(())
        })
    }

    /// Refuses a CLI change to a VPLS instance's member (the file's, restart to change).
    fn not_a_vpls_member(&self, name: &str) -> Result<(), TablesError> {
        match self.pws.get(name).and_then(|e| e.vpls).and_then(|i| self.file.vpls.get(i)) {
            Some(v) => Err(format!(
                "pseudowire \"{name}\" is a member of VPLS \"{}\" (line {}): change it in the config",
                v.name, v.line
            )
            .into()),
            None => Ok(()),
        }
    }

    /// Replaces every pseudowire FRR gave (sent after the module (re)connects).
    ///
    /// # Errors
    /// The forwarding tables refuse the result (nothing changed).
    pub fn pw_sync_frr(&mut self, specs: Vec<PwSpec>) -> Result<Fib, TablesError> {
        self.pw_change(|pws| {
            for e in pws.values_mut() {
                e.frr = None;
            }
            for s in specs {
                let name = s.name.clone();
                pws.entry(name).or_default().frr = Some(s);
            }
            Ok(())
        })
    }

    /// Adds or changes one pseudowire from FRR.
    ///
    /// # Errors
    /// As [`pw_sync_frr`](Tables::pw_sync_frr).
    pub fn pw_replace_frr(&mut self, spec: PwSpec) -> Result<Fib, TablesError> {
        self.pw_change(|pws| {
            let name = spec.name.clone();
            pws.entry(name).or_default().frr = Some(spec);
            Ok(())
        })
    }

    /// Removes FRR's pseudowire `name` (the file's declaration stays, not signalled).
    ///
    /// # Errors
    /// As [`pw_sync_frr`](Tables::pw_sync_frr).
    pub fn pw_del_frr(&mut self, name: &str) -> Result<Fib, TablesError> {
        self.pw_change(|pws| {
            if let Some(e) = pws.get_mut(name) {
                e.frr = None;
            }
            Ok(())
        })
    }

    /// Every pseudowire with its state against the forwarding tables in force and the
    /// ports' state (`port_up`: the port is open and its link up): the point-to-point
    /// ones and the VPLS instances' members (with their instance's name). Counters are
    /// zero: the caller adds the pipeline's.
    pub fn pw_status(&self, port_up: impl Fn(PortId) -> bool) -> Vec<PwStatus> {
        self.pws
            .iter()
            .map(|(name, e)| {
                let (spec, origin) = e.selected();
                let reason = self.pw_down_reason(name, e, &port_up);
                PwStatus {
                    name: name.clone(),
                    attachment: e
                        .attachment
                        .and_then(|p| self.file.ports.get(usize::from(p)))
                        .map(|p| p.name.clone()),
                    vpls: e.vpls.and_then(|i| self.file.vpls.get(i)).map(|v| v.name.clone()),
                    origin,
                    spec: spec.cloned(),
                    up: reason.is_none(),
                    reason: reason.map(str::to_string),
                    rx_frames: 0,
                    rx_bytes: 0,
                    tx_frames: 0,
                    tx_bytes: 0,
                }
            })
            .collect()
    }

    /// Whether the config has a pseudowire `name` (a `[[pseudowire]]`, a
    /// `[[vpls.pseudowire]]`) or the CLI made one: something ldpd's of that name can be.
    pub fn pw_declared(&self, name: &str) -> bool {
        self.pws.get(name).is_some_and(|e| e.in_file || e.attachment.is_some() || e.vpls.is_some())
    }

    /// Why pseudowire `name` does not forward, or `None` if it does: against the
    /// forwarding tables in force and the ports' links. A VPLS member's attachment is
    /// down when every attachment circuit of its instance is.
    pub(super) fn pw_down_reason(
        &self,
        name: &str,
        e: &PwEntry,
        port_up: &impl Fn(PortId) -> bool,
    ) -> Option<&'static str> {
        let fib = self.built.as_ref();
        let (spec, _) = e.selected();
        let installed = fib.is_some_and(|f| f.pseudowires.iter().any(|p| p.name == *name && p.up));
        let route_to_peer = |peer| {
            fib.and_then(|f| f.vrfs.first()).and_then(|v| v.lookup(peer)).is_some_and(|r| {
                matches!(r.target(), RouteTarget::Forward(_) | RouteTarget::Connected { .. })
            })
        };
        let attachment_up = match (e.attachment, e.vpls.and_then(|i| self.file.vpls.get(i))) {
            (Some(p), _) => Some(port_up(p)),
            (None, Some(v)) => Some(v.attachments.iter().any(|&p| port_up(p))),
            (None, None) => None,
        };
        match (attachment_up, spec) {
            (None, _) => Some(NOT_IN_CONFIG),
            (_, None) => Some("not signalled"),
            (_, Some(_)) if !installed => Some("label in use"),
            (Some(false), _) => Some("attachment down"),
            (_, Some(s)) if !route_to_peer(s.peer) => Some("no route to peer"),
            _ => None,
        }
    }
}

/// The reason a pseudowire FRR gave is down when the config has none of its name.
pub(crate) const NOT_IN_CONFIG: &str = "no [[pseudowire]] or [[vpls.pseudowire]] of that name";

impl Tables {
    /// The label routes the pseudowires in force hold, as `route show table mpls` lists
    /// them: the local label popped to the attachment (`LABEL dev PORT`, iproute2's
    /// line for a pop out of an interface), pipe TTL, the protocol of who made the PW
    /// (ldpd's through zebra: `ldp`).
    pub(super) fn pw_label_rows(&self) -> BTreeMap<Label, MplsRoute> {
        let Some(fib) = self.built.as_ref() else { return BTreeMap::new() };
        fib.pseudowires
            .iter()
            .filter(|p| p.up)
            .filter_map(|p| {
                let port = p.attachment.and_then(|a| self.file.ports.get(usize::from(a)))?;
                let protocol = match self.pws.get(&p.name)?.selected().1 {
                    PwOrigin::Frr => Protocol::Ldp,
                    PwOrigin::Config => Protocol::Static,
                    PwOrigin::Cli => Protocol::Boot,
                };
                let row = MplsRoute {
                    label: p.local_label,
                    action: MplsAction::Forward,
                    nexthops: vec![Nexthop {
                        gateway: None,
                        dev: Some(port.name.clone()),
                        labels: Vec::new(),
                        weight: 1,
                    }],
                    vrf: None,
                    ttl_propagate: false,
                    protocol,
                };
                Some((p.local_label, row))
            })
            .collect()
    }
}

fn check_spec(spec: &PwSpec) -> Result<(), TablesError> {
    let ok_name = !spec.name.is_empty()
        && spec.name.len() <= crate::parse::pseudowires::MAX_PW_NAME
        && spec.name.bytes().all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(&c));
    if !ok_name {
        return Err(format!("\"{}\" is not a pseudowire name", spec.name).into());
    }
    for (what, l) in [("local", spec.local_label), ("remote", spec.remote_label)] {
        if !(vmpls_fib::FIRST_UNRESERVED..=vmpls_fib::MAX_LABEL).contains(&l) {
            return Err(format!("{what} label {l} is out of range (16..=1048575)").into());
        }
    }
    if spec.peer.is_unspecified() || spec.peer.is_multicast() {
        return Err(format!("{} cannot be a PE's address", spec.peer).into());
    }
    Ok(())
}
