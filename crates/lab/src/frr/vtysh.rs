//! Queries through `vtysh` and the decoding of its JSON: neighbours, LDP sessions and
//! bindings, the MPLS and IP tables, and waiting for convergence.

use super::*;

/// What [`FrrRouter::wait_for`] waits for: at least these counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Convergence {
    /// OSPF neighbours in state Full.
    pub ospf_full: usize,
    /// LDP sessions in state OPERATIONAL.
    pub ldp_operational: usize,
    /// Entries of `show mpls table` (only non-zero with the zebra module: without it
    /// zebra's MPLS is off on kernels without MPLS).
    pub mpls_lsps: usize,
}

/// One next hop of an LSP in `show mpls table json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MplsNexthop {
    /// Who installed it (`LDP`, `Static`, `SR (OSPF)`, ...).
    pub kind: String,
    /// The outgoing label stack (`[3]`: implicit null, i.e. penultimate-hop pop).
    pub out_labels: Vec<u32>,
    /// The next hop's address, if it has one.
    pub via: Option<IpAddr>,
    /// The outgoing interface, if zebra's next hop has one (FRR 8.4's LDP next hops
    /// have only the address).
    pub interface: Option<String>,
    /// zebra marked it installed in the data plane.
    pub installed: bool,
}

/// One LSP of `show mpls table json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lsp {
    /// The incoming label.
    pub in_label: u32,
    /// zebra marked it installed in the data plane.
    pub installed: bool,
    /// Its next hops.
    pub nexthops: Vec<MplsNexthop>,
}

/// An LDP label binding (`show mpls ldp binding json`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LdpBinding {
    /// The FEC.
    pub prefix: IpPrefix,
    /// The LDP neighbour (LSR id) that sent the remote label.
    pub neighbor: Ipv4Addr,
    /// The label we advertise (`None`: `-`, none; `Some(3)`: implicit null).
    pub local_label: Option<u32>,
    /// The neighbour's label.
    pub remote_label: Option<u32>,
    /// The neighbour is the IGP next hop for the FEC, so its label is used.
    pub in_use: bool,
}

/// One next hop of a route in `show ip route json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteNexthop {
    /// The gateway, if any (none: directly connected).
    pub via: Option<IpAddr>,
    /// The outgoing interface.
    pub interface: Option<String>,
    /// Labels pushed on this next hop.
    pub labels: Vec<u32>,
    /// zebra uses this next hop.
    pub active: bool,
    /// A BGP next hop resolved through the next hops marked `resolver` after it (a VPN
    /// route: its labels are the VPN label, the resolvers' the transport's).
    pub recursive: bool,
    /// Resolves the `recursive` next hop before it.
    pub resolver: bool,
}

/// A route of `show ip route json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpRoute {
    /// The destination.
    pub prefix: IpPrefix,
    /// `connected`, `ospf`, `static`, `kernel`, ...
    pub protocol: String,
    /// The best route for its prefix.
    pub selected: bool,
    /// Installed in the data plane (the kernel, or skipped for FPM by our module).
    pub installed: bool,
    /// Its next hops.
    pub nexthops: Vec<RouteNexthop>,
}

impl FrrRouter {
    /// Runs `vtysh` against this router with one `-c` per command and returns what it
    /// printed. Configuration works as at the prompt:
    /// `vtysh(&["configure terminal", "mpls lsp 100 198.18.10.2 200"])`. Fails if vtysh
    /// reports an error (exit status) or prints one (`% ...`).
    pub fn vtysh(&self, commands: &[&str]) -> anyhow::Result<String> {
        let mut argv: Vec<OsString> =
            vec!["vtysh".into(), "--vty_socket".into(), self.inner_dir.clone().into()];
        argv.extend(["--config_dir".into(), self.inner_dir.clone().into()]);
        for c in commands {
            argv.extend(["-c".into(), (*c).into()]);
        }
        let cmd = self.frr_command(&argv);
        let out = crate::process::run_timeout(&self.ns, cmd, VTYSH_TIMEOUT)
            .with_context(|| format!("vtysh {commands:?} on {}", self.options.hostname))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let error_line = stdout.lines().chain(stderr.lines()).find(|l| l.trim_start().starts_with('%'));
        if !out.status.success() || error_line.is_some() {
            bail!(
                "vtysh {commands:?} on {} failed ({}): {}{}",
                self.options.hostname,
                out.status,
                stdout.trim(),
                stderr.trim()
            );
        }
        Ok(stdout)
    }

    /// The JSON a `show ... json` command prints.
    pub fn vtysh_json(&self, command: &str) -> anyhow::Result<Value> {
        let text = self.vtysh(&[command])?;
        if text.trim().is_empty() {
            // Some commands print nothing when there is nothing to show.
            return Ok(Value::Object(Default::default()));
        }
        serde_json::from_str(&text).with_context(|| {
            format!("parsing the output of {command:?} on {}: {text}", self.options.hostname)
        })
    }

    /// The number of OSPF neighbours in state Full.
    pub fn ospf_full_neighbors(&self) -> anyhow::Result<usize> {
        parse_ospf_full(&self.vtysh_json("show ip ospf neighbor json")?)
    }

    /// The number of IS-IS adjacencies in state Up (`show isis neighbor`: FRR 8.4 has
    /// no JSON for it).
    pub fn isis_up_adjacencies(&self) -> anyhow::Result<usize> {
        Ok(parse_isis_up(&self.vtysh(&["show isis neighbor"])?))
    }

    /// The number of LDP sessions in state OPERATIONAL (`show mpls ldp neighbor json`).
    pub fn ldp_sessions_operational(&self) -> anyhow::Result<usize> {
        parse_ldp_operational(&self.vtysh_json("show mpls ldp neighbor json")?)
    }

    /// LDP's label bindings (`show mpls ldp binding json`).
    pub fn ldp_bindings(&self) -> anyhow::Result<Vec<LdpBinding>> {
        parse_ldp_bindings(&self.vtysh_json("show mpls ldp binding json")?)
    }

    /// zebra's label table (`show mpls table json`), by incoming label.
    pub fn mpls_table(&self) -> anyhow::Result<BTreeMap<u32, Lsp>> {
        parse_mpls_table(&self.vtysh_json("show mpls table json")?)
    }

    /// zebra's IPv4 routes (`show ip route json`), all protocols.
    pub fn ip_routes(&self) -> anyhow::Result<Vec<IpRoute>> {
        parse_ip_routes(&self.vtysh_json("show ip route json")?)
    }

    /// zebra's routes of VRF `vrf` (`show ip route vrf VRF json`, or `show ipv6 route`).
    pub fn vrf_routes(&self, vrf: &str, ipv6: bool) -> anyhow::Result<Vec<IpRoute>> {
        let family = if ipv6 { "ipv6" } else { "ip" };
        parse_ip_routes(&self.vtysh_json(&format!("show {family} route vrf {vrf} json"))?)
    }

    /// The BGP sessions of the default instance in state Established that carry
    /// `family` (`ipv4 vpn`, `ipv6 vpn`, `ipv4 unicast`: `show bgp FAMILY summary json`).
    pub fn bgp_established(&self, family: &str) -> anyhow::Result<usize> {
        parse_bgp_established(&self.vtysh_json(&format!("show bgp {family} summary json"))?)
    }

    /// The VPN routes in BGP's table (`show bgp ipv4 vpn json` or `ipv6 vpn`): route
    /// distinguisher -> prefixes.
    pub fn bgp_vpn_routes(&self, ipv6: bool) -> anyhow::Result<BTreeMap<String, Vec<IpPrefix>>> {
        let family = if ipv6 { "ipv6" } else { "ipv4" };
        parse_bgp_vpn(&self.vtysh_json(&format!("show bgp {family} vpn json"))?)
    }

    /// What this router should reach when converged: one OSPF neighbour per
    /// non-passive OSPF interface, one LDP session per LDP interface (the lab's links
    /// are point-to-point and no two lead to the same router), and with the zebra module
    /// at least one LSP when LDP runs.
    pub fn expected(&self) -> Convergence {
        Convergence {
            ospf_full: self.options.ospf.iter().filter(|i| !i.passive && i.name != "lo").count(),
            ldp_operational: self.options.ldp.len(),
            mpls_lsps: usize::from(self.options.zebra_module.is_some() && !self.options.ldp.is_empty()),
        }
    }

    /// Waits until [`FrrRouter::expected`] holds; returns how long it took.
    pub fn wait_converged(&self, timeout: Duration) -> anyhow::Result<Duration> {
        self.wait_for(self.expected(), timeout)
    }

    /// Waits (polling every 100 ms) until the router has at least the counts in
    /// `expect`; returns how long it took, or an error saying what was missing.
    pub fn wait_for(&self, expect: Convergence, timeout: Duration) -> anyhow::Result<Duration> {
        let start = Instant::now();
        loop {
            let now = self.convergence()?;
            if now.ospf_full >= expect.ospf_full
                && now.ldp_operational >= expect.ldp_operational
                && now.mpls_lsps >= expect.mpls_lsps
            {
                return Ok(start.elapsed());
            }
            if start.elapsed() >= timeout {
                bail!(
                    "{} did not converge within {timeout:?}: wanted {expect:?}, has {now:?} (logs in {})",
                    self.options.hostname,
                    self.dir.display()
                );
            }
            self.check_running()?;
            check_interrupt()?;
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The counts [`FrrRouter::wait_for`] compares (only those of running daemons are
    /// queried).
    pub fn convergence(&self) -> anyhow::Result<Convergence> {
        Ok(Convergence {
            ospf_full: if self.pid(Daemon::Ospfd).is_some() { self.ospf_full_neighbors()? } else { 0 },
            ldp_operational: if self.pid(Daemon::Ldpd).is_some() {
                self.ldp_sessions_operational()?
            } else {
                0
            },
            mpls_lsps: self.mpls_table()?.len(),
        })
    }
}

fn label_of(v: &Value) -> Option<u32> {
    match v {
        Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        Value::String(s) => match s.as_str() {
            "imp-null" | "implicit-null" => Some(3),
            "exp-null" | "explicit-null" => Some(0),
            s => s.parse().ok(),
        },
        _ => None,
    }
}

fn str_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn truthy(v: &Value, key: &str) -> bool {
    match v.get(key) {
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_u64().is_some_and(|n| n != 0),
        _ => false,
    }
}

/// The OSPF neighbours in state Full in `show ip ospf neighbor json`.
pub fn parse_ospf_full(v: &Value) -> anyhow::Result<usize> {
    let Some(neighbors) = v.get("neighbors") else {
        return Ok(0);
    };
    let neighbors = neighbors.as_object().ok_or_else(|| anyhow!("\"neighbors\" is not an object: {v}"))?;
    // { "neighbors": { "ROUTER-ID": [ { "converged": "Full", "nbrState": "Full/-" } ] } }
    Ok(neighbors
        .values()
        .filter_map(Value::as_array)
        .flatten()
        .filter(|n| {
            str_field(n, "converged") == Some("Full")
                || str_field(n, "nbrState")
                    .or_else(|| str_field(n, "state"))
                    .is_some_and(|s| s.starts_with("Full"))
        })
        .count())
}

/// The adjacencies in state Up in the table `show isis neighbor` prints (columns
/// System Id, Interface, Level, State, Holdtime, SNPA).
pub fn parse_isis_up(text: &str) -> usize {
    text.lines().filter(|l| l.split_whitespace().nth(3) == Some("Up")).count()
}

/// The LDP sessions in state OPERATIONAL in `show mpls ldp neighbor json`.
pub fn parse_ldp_operational(v: &Value) -> anyhow::Result<usize> {
    let Some(neighbors) = v.get("neighbors") else {
        return Ok(0);
    };
    let neighbors = neighbors.as_array().ok_or_else(|| anyhow!("\"neighbors\" is not an array: {v}"))?;
    Ok(neighbors.iter().filter(|n| str_field(n, "state") == Some("OPERATIONAL")).count())
}

fn parse_ldp_bindings(v: &Value) -> anyhow::Result<Vec<LdpBinding>> {
    let Some(bindings) = v.get("bindings") else {
        return Ok(Vec::new());
    };
    let bindings = bindings.as_array().ok_or_else(|| anyhow!("\"bindings\" is not an array: {v}"))?;
    bindings
        .iter()
        .map(|b| {
            let prefix = str_field(b, "prefix").ok_or_else(|| anyhow!("binding without prefix: {b}"))?;
            let neighbor =
                str_field(b, "neighborId").ok_or_else(|| anyhow!("binding without neighborId: {b}"))?;
            Ok(LdpBinding {
                prefix: prefix.parse().with_context(|| format!("binding prefix {prefix:?}"))?,
                neighbor: neighbor.parse().with_context(|| format!("binding neighbor {neighbor:?}"))?,
                local_label: b.get("localLabel").and_then(label_of),
                remote_label: b.get("remoteLabel").and_then(label_of),
                in_use: truthy(b, "inUse"),
            })
        })
        .collect()
}

/// The LSPs of `show mpls table json`, by incoming label.
pub fn parse_mpls_table(v: &Value) -> anyhow::Result<BTreeMap<u32, Lsp>> {
    // { "16": { "inLabel": 16, "installed": true, "nexthops": [ { "type": "LDP",
    //   "outLabel": 17, "outLabelStack": [17], "distance": 150, "installed": true,
    //   "nexthop": "198.18.20.2", "interface": "p-pe2" } ] }, ... }
    let entries: Vec<&Value> = match v {
        Value::Object(m) => m.values().collect(),
        Value::Array(a) => a.iter().collect(),
        _ => bail!("show mpls table json printed neither an object nor an array: {v}"),
    };
    let mut table = BTreeMap::new();
    for e in entries {
        let in_label =
            e.get("inLabel").and_then(label_of).ok_or_else(|| anyhow!("LSP without inLabel: {e}"))?;
        let nexthops = e
            .get("nexthops")
            .and_then(Value::as_array)
            .map(|a| a.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|n| {
                let out_labels = match n.get("outLabelStack").and_then(Value::as_array) {
                    Some(stack) => stack.iter().filter_map(label_of).collect(),
                    None => n.get("outLabel").and_then(label_of).into_iter().collect(),
                };
                MplsNexthop {
                    kind: str_field(n, "type").unwrap_or_default().to_string(),
                    out_labels,
                    via: str_field(n, "nexthop").and_then(|s| s.parse().ok()),
                    interface: str_field(n, "interface").map(str::to_string),
                    installed: truthy(n, "installed"),
                }
            })
            .collect();
        table.insert(in_label, Lsp { in_label, installed: truthy(e, "installed"), nexthops });
    }
    Ok(table)
}

fn parse_bgp_established(v: &Value) -> anyhow::Result<usize> {
    // { "peers": { "198.18.255.3": { "state": "Established", ... } }, ... }
    let Some(peers) = v.get("peers") else {
        return Ok(0);
    };
    let peers = peers.as_object().ok_or_else(|| anyhow!("\"peers\" is not an object: {v}"))?;
    Ok(peers.values().filter(|p| str_field(p, "state") == Some("Established")).count())
}

fn parse_bgp_vpn(v: &Value) -> anyhow::Result<BTreeMap<String, Vec<IpPrefix>>> {
    // { "routes": { "routeDistinguishers": { "198.18.255.1:1": { "198.18.1.0/24": [...] } } } }
    let Some(rds) = v.get("routes").and_then(|r| r.get("routeDistinguishers")) else {
        return Ok(BTreeMap::new());
    };
    let rds = rds.as_object().ok_or_else(|| anyhow!("\"routeDistinguishers\" is not an object: {v}"))?;
    rds.iter()
        .map(|(rd, prefixes)| {
            let prefixes =
                prefixes.as_object().ok_or_else(|| anyhow!("RD {rd} holds no object: {prefixes}"))?;
            let list = prefixes
                .keys()
                .map(|p| p.parse().with_context(|| format!("VPN prefix {p:?} of RD {rd}")))
                .collect::<anyhow::Result<Vec<IpPrefix>>>()?;
            Ok((rd.clone(), list))
        })
        .collect()
}

/// Decodes the JSON of `show ip route [vrf NAME] json` (for tests on captured output).
pub fn parse_ip_routes_json(v: &Value) -> anyhow::Result<Vec<IpRoute>> {
    parse_ip_routes(v)
}

fn parse_ip_routes(v: &Value) -> anyhow::Result<Vec<IpRoute>> {
    let m = v.as_object().ok_or_else(|| anyhow!("show ip route json printed no object: {v}"))?;
    let mut routes = Vec::new();
    for (prefix, list) in m {
        let prefix: IpPrefix = prefix.parse().with_context(|| format!("route prefix {prefix:?}"))?;
        for r in list.as_array().map(|a| a.as_slice()).unwrap_or_default() {
            let nexthops = r
                .get("nexthops")
                .and_then(Value::as_array)
                .map(|a| a.as_slice())
                .unwrap_or_default()
                .iter()
                .map(|n| RouteNexthop {
                    via: str_field(n, "ip").and_then(|s| s.parse().ok()),
                    interface: str_field(n, "interfaceName").map(str::to_string),
                    labels: n
                        .get("labels")
                        .and_then(Value::as_array)
                        .map(|a| a.iter().filter_map(label_of).collect())
                        .unwrap_or_default(),
                    active: truthy(n, "active"),
                    recursive: truthy(n, "recursive"),
                    resolver: truthy(n, "resolver"),
                })
                .collect();
            routes.push(IpRoute {
                prefix,
                protocol: str_field(r, "protocol").unwrap_or_default().to_string(),
                selected: truthy(r, "selected"),
                installed: truthy(r, "installed"),
                nexthops,
            });
        }
    }
    Ok(routes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_isis_adjacencies_up() {
        // FRR 8.4.4's `show isis neighbor` on p of tests/frr_isis_sr.rs
        let text = "Area 1:\n  System Id           Interface   L  State        Holdtime SNPA\n \
                    pe1                 p-pe1       2  Up            4        2020.2020.2020\n \
                    pe2                 p-pe2       2  Up            3        2020.2020.2020\n\n";
        assert_eq!(parse_isis_up(text), 2);
        assert_eq!(parse_isis_up(&text.replacen("  Up    ", "  Initializing", 1)), 1);
        assert_eq!(parse_isis_up(""), 0);
    }

    #[test]
    fn parses_frr_json() {
        let ospf: Value = serde_json::from_str(
            r#"{"neighbors":{"10.255.0.2":[{"state":"Full\/-","nbrState":"Full\/-","converged":"Full"}],
                "10.255.0.3":[{"state":"Init\/-","nbrState":"Init\/-","converged":"Init"}]}}"#,
        )
        .unwrap();
        assert_eq!(parse_ospf_full(&ospf).unwrap(), 1);
        assert_eq!(parse_ospf_full(&serde_json::json!({})).unwrap(), 0);
        let ldp: Value = serde_json::from_str(
            r#"{"neighbors":[{"addressFamily":"ipv4","neighborId":"10.255.0.2","state":"OPERATIONAL",
                "transportAddress":"10.255.0.2","upTime":"00:01:44"}]}"#,
        )
        .unwrap();
        assert_eq!(parse_ldp_operational(&ldp).unwrap(), 1);
        let bindings: Value = serde_json::from_str(
            r#"{"bindings":[{"addressFamily":"ipv4","prefix":"10.77.0.0/24","neighborId":"10.255.0.2",
                "localLabel":"-","remoteLabel":"17","inUse":0},
               {"addressFamily":"ipv4","prefix":"10.255.0.2/32","neighborId":"10.255.0.2",
                "localLabel":"16","remoteLabel":"imp-null","inUse":1}]}"#,
        )
        .unwrap();
        let b = parse_ldp_bindings(&bindings).unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].local_label, b[0].remote_label, b[0].in_use), (None, Some(17), false));
        assert_eq!((b[1].local_label, b[1].remote_label, b[1].in_use), (Some(16), Some(3), true));
        let mpls: Value = serde_json::from_str(
            r#"{"16":{"inLabel":16,"installed":true,"nexthops":[{"type":"LDP","outLabel":3,
                "outLabelStack":[3],"distance":150,"installed":true,"nexthop":"198.18.20.2",
                "interface":"p-pe2"}]},
               "17":{"inLabel":17,"nexthops":[{"type":"Static","outLabel":20,"distance":150,
                "nexthop":"198.18.10.1"}]}}"#,
        )
        .unwrap();
        let t = parse_mpls_table(&mpls).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(
            t[&16].nexthops[0],
            MplsNexthop {
                kind: "LDP".into(),
                out_labels: vec![3],
                via: Some("198.18.20.2".parse().unwrap()),
                interface: Some("p-pe2".into()),
                installed: true,
            }
        );
        assert!(t[&16].installed && !t[&17].installed);
        assert_eq!(t[&17].nexthops[0].out_labels, [20]);
        assert!(parse_mpls_table(&serde_json::json!({})).unwrap().is_empty());
        let routes: Value = serde_json::from_str(
            r#"{"10.255.0.2/32":[{"prefix":"10.255.0.2/32","protocol":"ospf","selected":true,
                "installed":true,"nexthops":[{"ip":"10.9.0.2","interfaceName":"xa-xb","active":true,
                "labels":[16]}]}]}"#,
        )
        .unwrap();
        let r = parse_ip_routes(&routes).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].protocol, "ospf");
        assert!(r[0].selected && r[0].installed);
        assert_eq!(r[0].nexthops[0].labels, [16]);
        assert_eq!(r[0].nexthops[0].via, Some("10.9.0.2".parse().unwrap()));
    }

    /// FRR 8.4's output for a VPN route imported into VRF red: the BGP next hop with the
    /// VPN label, resolved over the LDP route to the other PE's loopback.
    #[test]
    fn parses_vpn_routes_and_sessions() {
        let routes: Value = serde_json::from_str(
            r#"{"198.18.2.0/24":[{"prefix":"198.18.2.0/24","protocol":"bgp","vrfName":"red","selected":true,
                "installed":true,"nexthops":[{"ip":"198.18.255.3","afi":"ipv4","vrf":"default","active":true,
                "recursive":true,"labels":[80]},{"fib":true,"ip":"198.18.10.2","afi":"ipv4",
                "interfaceName":"pe1-p","resolver":true,"active":true,"labels":[17]}]}]}"#,
        )
        .unwrap();
        let r = parse_ip_routes(&routes).unwrap();
        let hops = &r[0].nexthops;
        assert!(hops[0].recursive && !hops[0].resolver && hops[0].labels == [80]);
        assert!(hops[1].resolver && hops[1].interface.as_deref() == Some("pe1-p") && hops[1].labels == [17]);
        let summary: Value = serde_json::from_str(
            r#"{"routerId":"198.18.255.1","as":65000,"peers":{"198.18.255.3":{"remoteAs":65000,
                "state":"Established","pfxRcd":4},"198.18.255.9":{"state":"Active"}}}"#,
        )
        .unwrap();
        assert_eq!(parse_bgp_established(&summary).unwrap(), 1);
        assert_eq!(parse_bgp_established(&serde_json::json!({})).unwrap(), 0);
        let vpn: Value = serde_json::from_str(
            r#"{"vrfId":0,"routerId":"198.18.255.1","routes":{"routeDistinguishers":{
                "198.18.255.1:1":{"198.18.1.0/24":[{"valid":true}],"198.18.201.1/32":[{"valid":true}]},
                "198.18.255.3:2":{"198.18.2.0/24":[{"valid":true}]}}}}"#,
        )
        .unwrap();
        let t = parse_bgp_vpn(&vpn).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t["198.18.255.1:1"].len(), 2);
        assert!(parse_bgp_vpn(&serde_json::json!({})).unwrap().is_empty());
    }
}
