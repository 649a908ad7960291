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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use vmpls_fib::LabelAction;

    use crate::tables::Tables;
    use crate::{Config, ConfigError};

    const BASE: &str = r#"[router]
name = "pe1"
addresses = ["198.18.255.1"]

[[port]]
name = "ce1"
interface = "t-ce1"

[[port]]
name = "ce2"
interface = "t-ce2"

[[port]]
name = "core"
interface = "t-core"
addresses = ["198.18.10.1/24"]

[[route]]
prefix = "198.18.255.2/32"
via = "198.18.10.2"
port = "core"
"#;

    const BLUE: &str = r#"
[[vpls]]
name = "blue"
attachments = ["ce1", "ce2"]
flood-rate = 500

[[vpls.pseudowire]]
name = "blue-pe2"
local-label = 1021
remote-label = 1012
peer = "198.18.255.2"

[[vpls.pseudowire]]
name = "blue-pe3"
local-label = 1031
remote-label = 1013
peer = "198.18.255.3"
control-word = false
"#;

    fn parse(extra: &str) -> Result<Config, ConfigError> {
        Config::from_str(&format!("{BASE}{extra}"), Path::new("t.toml"))
    }

    #[test]
    fn a_vpls_instance_is_parsed_with_its_defaults() {
        let c = parse(BLUE).unwrap();
        let v = &c.vpls[0];
        assert_eq!((v.name.as_str(), v.attachments.as_slice()), ("blue", &[0, 1][..]));
        assert_eq!((v.mac_limit, v.flood_rate, v.mac_aging_s), (4096, 500, 300));
        assert_eq!(v.pseudowires.len(), 2);
        assert!(v.pseudowires[0].control_word && !v.pseudowires[1].control_word);
        assert_eq!(v.pseudowires[1].peer, "198.18.255.3".parse::<std::net::IpAddr>().unwrap());
    }

    #[test]
    fn bad_vpls_configs_are_refused_with_the_reason() {
        let cases: [(&str, &str); 6] = [
            ("[[vpls]]\nname = \"b\"\nattachments = [\"core\"]\n", "has addresses"),
            ("[[vpls]]\nname = \"b\"\nattachments = [\"nope\"]\n", "no port named \"nope\""),
            ("[[vpls]]\nname = \"b\"\nattachments = []\n", "at least one attachment"),
            (
                "[[vpls]]\nname = \"b\"\nattachments = [\"ce1\"]\n[[vpls]]\nname = \"c\"\nattachments = [\"ce1\"]\n",
                "already an attachment circuit of VPLS \"b\"",
            ),
            ("[[vpls]]\nname = \"b\"\nattachments = [\"ce1\"]\nmac-limit = 0\n", "out of range"),
            (
                "[[vpls]]\nname = \"b\"\nattachments = [\"ce1\"]\n[[vpls.pseudowire]]\nname = \"x\"\nlocal-label = 1000\nremote-label = 1000\npeer = \"198.18.255.2\"\n[[vpls.pseudowire]]\nname = \"y\"\nlocal-label = 1000\nremote-label = 1001\npeer = \"198.18.255.3\"\n",
                "already the local label",
            ),
        ];
        for (extra, needle) in cases {
            let e = parse(extra).expect_err(extra).to_string();
            assert!(e.contains(needle), "{extra}: {e}");
        }
    }

    #[test]
    fn the_instances_go_into_the_forwarding_tables_after_the_pseudowires() {
        let (t, fib) = Tables::built(parse(BLUE).unwrap()).unwrap();
        assert_eq!(fib.vpls.len(), 1);
        let vi = &fib.vpls[0];
        assert_eq!((vi.name.as_str(), vi.attachments.as_slice(), vi.flood_rate), ("blue", &[0, 1][..], 500));
        assert_eq!(fib.port_vpls, vec![Some(0), Some(0), None]);
        for (&pw, label) in vi.pseudowires.iter().zip([1021, 1031]) {
            let p = &fib.pseudowires[usize::from(pw)];
            assert_eq!((p.local_label, p.attachment, p.up), (label, None, true));
            assert_eq!(fib.pw_vpls(pw), Some(0));
            let route = fib.labels.get(label).expect("local label installed");
            assert_eq!(route.action, LabelAction::Pseudowire { pw });
        }
        let status = t.vpls_status(|_| true, |_| 7);
        assert_eq!(status[0].macs, 7);
        // 198.18.255.3 has no route: that pseudowire is down, with the reason.
        let down: Vec<_> = status[0].pseudowires.iter().map(|p| (p.up, p.reason.clone())).collect();
        assert_eq!(down, vec![(true, None), (false, Some("no route to peer".into()))]);
    }
}
