//! The file's VPLS instances in the forwarding tables: after the point-to-point
//! pseudowires (`pw_set`, which clears every pseudowire of the FIB it is given, these
//! included), each instance's members are added to the FIB's pseudowires without an
//! attachment, marked as the instance's, their local labels installed as label routes of
//! [`LabelAction::Pseudowire`] unless a route holds the label ("label in use"). A
//! member's labels and peer are those in force in the pseudowire set (the file's for a
//! static member, ldpd's through zebra for an FRR-signalled one); a member not signalled
//! yet is in the instance, down, with no label.

use vmpls_fib::{Fib, FibError, LabelAction, LabelRoute, PortId, Pseudowire, TtlModel, VplsInstance};

use super::Tables;
use super::pw_set::PwSet;
use crate::VplsConfig;
use crate::api::{PwOrigin, VplsAttachment, VplsPseudowire, VplsStatus};

/// Sets the instances of `vpls` into `fib` (its point-to-point pseudowires set already),
/// each member as `pws` has it.
pub(crate) fn install(vpls: &[VplsConfig], pws: &PwSet, fib: &mut Fib) -> Result<(), FibError> {
    fib.vpls.clear();
    fib.port_vpls = vec![None; fib.port_vrf.len()];
    fib.pw_vpls = vec![None; fib.pseudowires.len()];
    for (i, v) in vpls.iter().enumerate() {
        let Ok(inst) = u16::try_from(i) else { break };
        let mut pseudowires = Vec::with_capacity(v.pseudowires.len());
        for member in &v.pseudowires {
            let Ok(idx) = u16::try_from(fib.pseudowires.len()) else { break };
            let spec = pws.get(&member.name).and_then(|e| e.selected().0);
            let pw = match spec {
                Some(s) => Pseudowire {
                    name: member.name.clone(),
                    attachment: None,
                    local_label: s.local_label,
                    remote_label: s.remote_label,
                    peer: s.peer,
                    control_word: s.control_word,
                    up: fib.labels.get(s.local_label).is_none(),
                },
                None => Pseudowire {
                    name: member.name.clone(),
                    attachment: None,
                    local_label: 0,
                    remote_label: 0,
                    peer: std::net::IpAddr::from([0, 0, 0, 0]),
                    control_word: member.control_word,
                    up: false,
                },
            };
            let (up, local_label) = (pw.up, pw.local_label);
            fib.pseudowires.push(pw);
            fib.pw_vpls.push(Some(inst));
            if up {
                let route = LabelRoute::new(LabelAction::Pseudowire { pw: idx }, TtlModel::Pipe);
                fib.set_label_route(local_label, Some(route))?;
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
                    .map(|m| {
                        let e = self.pws.get(&m.name);
                        let (spec, origin) = e.map_or((None, PwOrigin::Config), |e| e.selected());
                        let reason = match e {
                            Some(e) => self.pw_down_reason(&m.name, e, &port_up),
                            None => Some("not signalled"),
                        };
                        VplsPseudowire {
                            name: m.name.clone(),
                            origin,
                            spec: spec.cloned(),
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
        let spec = v.pseudowires[1].static_spec.as_ref().unwrap();
        assert_eq!(spec.peer, "198.18.255.3".parse::<std::net::IpAddr>().unwrap());
        assert!(!spec.control_word);
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
            assert_eq!(route.action(), &LabelAction::Pseudowire { pw });
        }
        let status = t.vpls_status(|_| true, |_| 7);
        assert_eq!(status[0].macs, 7);
        // 198.18.255.3 has no route: that pseudowire is down, with the reason.
        let down: Vec<_> = status[0].pseudowires.iter().map(|p| (p.up, p.reason.clone())).collect();
        assert_eq!(down, vec![(true, None), (false, Some("no route to peer".into()))]);
    }
}

/// VPLS members signalled by ldpd through zebra (FRR mode): the config's
/// `[[vpls.pseudowire]]` without labels, filled in by the pseudowire channel.
#[cfg(test)]
mod frr_tests {
    use std::net::IpAddr;
    use std::path::Path;

    use vmpls_fib::{Fib, LabelAction};

    use crate::api::{Protocol, PwOrigin, PwSpec, PwType};
    use crate::tables::pw::NOT_IN_CONFIG;
    use crate::tables::{FrrChange, Tables};
    use crate::{Config, NexthopConfig, RouteAction};

    const PE1: &str = r#"[router]
name = "pe1"

[frr]

[[port]]
name = "ce1"
interface = "t-ce1"

[[port]]
name = "ce2"
interface = "t-ce2"

[[port]]
name = "core"
interface = "t-core"

[[vpls]]
name = "blue"
attachments = ["ce1", "ce2"]

[[vpls.pseudowire]]
name = "blue-pe2"             # ldpd's

[[vpls.pseudowire]]
name = "blue-pe3"             # ldpd's
control-word = false

[[vpls.pseudowire]]
name = "blue-pe4"             # static, beside them
local-label = 5041
remote-label = 5014
peer = "198.18.255.3"
"#;

    /// pe1's tables with the kernel's address on the core port (as the router reads
    /// them in FRR mode) and OSPF's routes to the far PEs from zebra.
    fn tables() -> Tables {
        let mut c = Config::from_str(PE1, Path::new("pe1.toml")).unwrap();
        c.ports[2].addresses = vec![("198.18.10.1".parse().unwrap(), 24)];
        let mut t = Tables::built(c).unwrap().0;
        let routes = ["198.18.255.2", "198.18.255.3"].map(|pe| FrrChange::Route {
            vrf: vmpls_fib::DEFAULT_VRF_NAME.into(),
            prefix: pe.parse().unwrap(),
            len: 32,
            route: Some((
                RouteAction::Forward(vec![NexthopConfig {
                    port: 2,
                    via: Some("198.18.10.2".parse().unwrap()),
                    labels: vec![100],
                    weight: 1,
                }]),
                Protocol::Ospf,
            )),
        });
        let applied = t.apply_frr(routes.into()).unwrap();
        assert!(applied.refused.is_empty(), "{:?}", applied.refused);
        t
    }

    fn frr_pw(name: &str, local: u32, remote: u32, peer: &str) -> PwSpec {
        PwSpec {
            name: name.into(),
            local_label: local,
            remote_label: remote,
            peer: peer.parse().unwrap(),
            control_word: true,
            pw_type: PwType::Ethernet,
        }
    }

    /// The FIB's member `name`: (local label, remote label, peer, up) and its instance.
    fn member(fib: &Fib, name: &str) -> (u32, u32, IpAddr, bool, Option<u16>) {
        let i = fib.pseudowires.iter().position(|p| p.name == name).expect(name);
        let p = &fib.pseudowires[i];
        (p.local_label, p.remote_label, p.peer, p.up, fib.pw_vpls(i as u16))
    }

    fn member_status(t: &Tables, name: &str, acs_up: bool) -> (bool, Option<String>, PwOrigin) {
        let s = t.vpls_status(|_| acs_up, |_| 0);
        let p = s[0].pseudowires.iter().find(|p| p.name == name).expect(name);
        (p.up, p.reason.clone(), p.origin)
    }

    #[test]
    fn members_without_labels_are_ldpds_and_may_sit_beside_static_ones() {
        let c = Config::from_str(PE1, Path::new("pe1.toml")).unwrap();
        let m = &c.vpls[0].pseudowires;
        assert_eq!(m.len(), 3);
        assert!(m[0].static_spec.is_none() && m[0].control_word);
        assert!(m[1].static_spec.is_none() && !m[1].control_word);
        assert_eq!(m[2].static_spec.as_ref().map(|s| s.local_label), Some(5041));
        assert_eq!((m[0].line, m[2].line), (23, 30));
    }

    #[test]
    fn half_static_members_and_unsignalled_ones_without_frr_are_refused_with_the_line() {
        let cases = [
            (
                PE1.replace(
                    "name = \"blue-pe2\"             # ldpd's",
                    "name = \"blue-pe2\"\nlocal-label = 100",
                ),
                "pe1.toml:23: vpls.pseudowire: pseudowire \"blue-pe2\" gives only some of local-label",
            ),
            (
                PE1.replace("[frr]\n", ""),
                "pe1.toml:22: vpls.pseudowire: pseudowire \"blue-pe2\" needs local-label, remote-label and peer (or [frr]",
            ),
            (
                PE1.replace("name = \"blue-pe4\"", "name = \"blue-pe2\""),
                "pe1.toml:30: vpls.pseudowire.name: pseudowire \"blue-pe2\" is already defined at line 23",
            ),
        ];
        for (text, want) in cases {
            let e = Config::from_str(&text, Path::new("pe1.toml")).expect_err(want).to_string();
            assert!(e.contains(want), "{e}\nwanted: {want}");
        }
    }

    #[test]
    fn ldpds_pseudowire_fills_in_the_member_of_its_name_and_its_removal_takes_it_out() {
        let mut t = tables();
        // before ldpd: in the instance, down, no label
        let fib = t.build_fib().unwrap();
        assert_eq!(fib.vpls[0].pseudowires.len(), 3);
        assert_eq!(member(&fib, "blue-pe2"), (0, 0, "0.0.0.0".parse().unwrap(), false, Some(0)));
        assert_eq!(
            member_status(&t, "blue-pe2", true),
            (false, Some("not signalled".into()), PwOrigin::Config)
        );
        assert_eq!(member_status(&t, "blue-pe4", true), (true, None, PwOrigin::Config));

        // the module's sync: both of ldpd's members, with its labels
        let fib = t
            .pw_sync_frr(vec![
                frr_pw("blue-pe2", 30, 40, "198.18.255.2"),
                frr_pw("blue-pe3", 31, 41, "198.18.255.3"),
            ])
            .unwrap();
        assert_eq!(member(&fib, "blue-pe2"), (30, 40, "198.18.255.2".parse().unwrap(), true, Some(0)));
        assert!(member(&fib, "blue-pe3").3);
        let i = fib.pseudowires.iter().position(|p| p.name == "blue-pe2").unwrap() as u16;
        assert_eq!(fib.labels.get(30).map(|r| r.action().clone()), Some(LabelAction::Pseudowire { pw: i }));
        assert!(fib.vpls[0].pseudowires.contains(&i));
        assert_eq!(fib.port_pw, vec![None, None, None], "members have no attachment of their own");
        assert_eq!(member_status(&t, "blue-pe2", true), (true, None, PwOrigin::Frr));
        let pw = t.pw_status(|_| true).into_iter().find(|p| p.name == "blue-pe3").unwrap();
        assert_eq!((pw.vpls.as_deref(), pw.attachment, pw.up), (Some("blue"), None, true));
        assert_eq!(pw.spec.map(|s| (s.local_label, s.remote_label)), Some((31, 41)));

        // status: every attachment circuit down takes the members down, with the reason
        assert_eq!(
            member_status(&t, "blue-pe2", false),
            (false, Some("attachment down".into()), PwOrigin::Frr)
        );
        let down = t.pw_status(|p| p != 0 && p != 1);
        assert!(down.iter().all(|p| p.reason.as_deref() == Some("attachment down")), "{down:?}");
        assert!(t.pw_status(|p| p == 1).iter().all(|p| p.up), "one attachment circuit up is enough");

        // ldpd's new labels replace the old ones
        let fib = t.pw_replace_frr(frr_pw("blue-pe2", 32, 42, "198.18.255.2")).unwrap();
        assert_eq!(member(&fib, "blue-pe2").0, 32);
        assert!(fib.labels.get(30).is_none(), "the old label is gone");

        // removed: down, not signalled, its label gone (the pipeline withdraws the MACs of
        // a member no longer up: dataplane `a_pseudowire_going_down_withdraws_its_macs`)
        let fib = t.pw_del_frr("blue-pe2").unwrap();
        assert!(!member(&fib, "blue-pe2").3);
        assert!(fib.labels.get(32).is_none());
        assert!(member(&fib, "blue-pe3").3, "the other member stays");
        assert_eq!(
            member_status(&t, "blue-pe2", true),
            (false, Some("not signalled".into()), PwOrigin::Config)
        );

        // the module's empty sync (zebra gone past the hold time): the static member stays
        let fib = t.pw_sync_frr(Vec::new()).unwrap();
        assert!(!member(&fib, "blue-pe3").3 && member(&fib, "blue-pe4").3);
    }

    #[test]
    fn a_member_whose_label_another_holds_is_down_and_the_cli_cannot_change_members() {
        let mut t = tables();
        // ldpd gives the static member's local label to another member: the first in the
        // file holds it, the other is down with the reason
        let fib = t.pw_replace_frr(frr_pw("blue-pe2", 5041, 40, "198.18.255.2")).unwrap();
        assert_eq!((member(&fib, "blue-pe2").3, member(&fib, "blue-pe4").3), (true, false));
        assert_eq!(member_status(&t, "blue-pe4", true).1.as_deref(), Some("label in use"));
        let fib = t.pw_replace_frr(frr_pw("blue-pe2", 5042, 40, "198.18.255.2")).unwrap();
        assert_eq!((member(&fib, "blue-pe2").3, member(&fib, "blue-pe4").3), (true, true));
        assert_eq!(member_status(&t, "blue-pe4", true), (true, None, PwOrigin::Config));
        let e = t.pw_del_cli("blue-pe4").unwrap_err().to_string();
        assert!(e.contains("is a member of VPLS \"blue\" (line 19)"), "{e}");
        let e = t.pw_replace_cli(frr_pw("blue-pe3", 900, 901, "198.18.255.3"), None).unwrap_err();
        assert!(e.to_string().contains("is a member of VPLS \"blue\""), "{e}");
        // nor can a point-to-point pseudowire take one of the instance's circuits
        let e = t.pw_replace_cli(frr_pw("p2p", 900, 901, "198.18.255.3"), Some("ce1")).unwrap_err();
        assert!(e.to_string().contains("port \"ce1\" is an attachment circuit of VPLS \"blue\""), "{e}");
    }

    #[test]
    fn a_pseudowire_of_a_name_the_config_lacks_is_shown_down_and_never_carried() {
        let mut t = tables();
        let before = t.build_fib().unwrap();
        assert!(t.pw_declared("blue-pe2") && !t.pw_declared("stranger"));
        let fib = t.pw_replace_frr(frr_pw("stranger", 77, 78, "198.18.255.2")).unwrap();
        assert!(fib.labels.get(77).is_none(), "not installed");
        assert_eq!(fib.pseudowires.len(), before.pseudowires.len(), "not in the FIB");
        let s = t.pw_status(|_| true).into_iter().find(|p| p.name == "stranger").unwrap();
        assert_eq!((s.up, s.reason.as_deref(), s.origin), (false, Some(NOT_IN_CONFIG), PwOrigin::Frr));
        t.pw_del_frr("stranger").unwrap();
        assert!(t.pw_status(|_| true).iter().all(|p| p.name != "stranger"), "gone with FRR's");
    }
}
