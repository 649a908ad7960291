//! The pseudowire set the tables hold, and how it goes into the forwarding tables: below
//! the transaction (which sets it after the routes of every change) and the pseudowire
//! changes (`pw`), which go through that transaction. The set holds every pseudowire by
//! name: the point-to-point ones (`[[pseudowire]]`, the CLI's) and the VPLS instances'
//! members (`[[vpls.pseudowire]]`, marked with their instance), so that ldpd's through
//! zebra fill in either kind alike; `install` sets the point-to-point ones, `vpls_set`
//! the members.

use std::collections::BTreeMap;

use vmpls_fib::{Fib, LabelAction, LabelRoute, PortId, Pseudowire, TtlModel};

use crate::Config;
use crate::api::{PwOrigin, PwSpec};

/// One pseudowire name and what each source says of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PwEntry {
    /// The attachment: the file's `[[pseudowire]]`'s, or the CLI's.
    pub(super) attachment: Option<PortId>,
    /// A member of the file's VPLS instance of this index (`[[vpls.pseudowire]]`): no
    /// attachment of its own, set into the FIB with its instance.
    pub(super) vpls: Option<usize>,
    /// Declared in the file (with or without a static part).
    pub(super) in_file: bool,
    pub(super) file: Option<PwSpec>,
    pub(super) cli: Option<PwSpec>,
    pub(super) frr: Option<PwSpec>,
}

impl PwEntry {
    /// The spec in force and who made it.
    pub(super) fn selected(&self) -> (Option<&PwSpec>, PwOrigin) {
        if let Some(s) = &self.cli {
            return (Some(s), PwOrigin::Cli);
        }
        if let Some(s) = &self.file {
            return (Some(s), PwOrigin::Config);
        }
        if let Some(s) = &self.frr {
            return (Some(s), PwOrigin::Frr);
        }
        (None, if self.in_file { PwOrigin::Config } else { PwOrigin::Cli })
    }

    pub(super) fn is_empty(&self) -> bool {
        !self.in_file && self.cli.is_none() && self.frr.is_none()
    }
}

/// The pseudowire set, by name.
pub(crate) type PwSet = BTreeMap<String, PwEntry>;

/// The set the file declares: its `[[pseudowire]]`s and its VPLS instances' members.
pub(crate) fn pws_of(config: &Config) -> PwSet {
    let vpws = config.pseudowires.iter().map(|p| {
        let e = PwEntry {
            attachment: Some(p.attachment),
            vpls: None,
            in_file: true,
            file: p.static_spec.clone(),
            cli: None,
            frr: None,
        };
        (p.name.clone(), e)
    });
    let members = config.vpls.iter().enumerate().flat_map(|(i, v)| {
        v.pseudowires.iter().map(move |m| {
            let e = PwEntry {
                attachment: None,
                vpls: Some(i),
                in_file: true,
                file: m.static_spec.clone(),
                cli: None,
                frr: None,
            };
            (m.name.clone(), e)
        })
    });
    vpws.chain(members).collect()
}

/// Sets the point-to-point pseudowires of `pws` into `fib` (built or edited from the
/// routes): the pseudowire list, the attachment ports, the local labels no route holds.
/// The label routes of the pseudowires `fib` had before (VPLS members too) are removed
/// first; the VPLS members are `vpls_set`'s to set.
pub(crate) fn install(pws: &PwSet, fib: &mut Fib) -> Result<(), vmpls_fib::FibError> {
    for old in std::mem::take(&mut fib.pseudowires) {
        let ours = fib
            .labels
            .get(old.local_label)
            .is_some_and(|r| matches!(r.action(), LabelAction::Pseudowire { .. }));
        if ours {
            fib.labels.remove(old.local_label);
        }
    }
    fib.port_pw = vec![None; fib.port_vrf.len()];
    // One FRR gave that the file does not have (no attachment) is not guessed at: shown
    // (`pw show`), never in the FIB, where it would move the members' indexes.
    for (name, e) in pws.iter().filter(|(_, e)| e.vpls.is_none() && e.attachment.is_some()) {
        let (spec, _) = e.selected();
        let Ok(idx) = u16::try_from(fib.pseudowires.len()) else { break };
        let attachment = e.attachment.filter(|&p| usize::from(p) < fib.port_pw.len());
        let (local_label, remote_label, peer, control_word, signalled) = match spec {
            Some(s) => (s.local_label, s.remote_label, s.peer, s.control_word, true),
            None => (0, 0, std::net::IpAddr::from([0, 0, 0, 0]), true, false),
        };
        let up = signalled && fib.labels.get(local_label).is_none();
        fib.pseudowires.push(Pseudowire {
            name: name.clone(),
            attachment,
            local_label,
            remote_label,
            peer,
            control_word,
            up,
        });
        if let Some(p) = attachment {
            fib.port_pw[usize::from(p)] = Some(idx);
        }
        if up {
            let route = LabelRoute::new(LabelAction::Pseudowire { pw: idx }, TtlModel::Pipe);
            fib.set_label_route(local_label, Some(route))?;
        }
    }
    Ok(())
}
