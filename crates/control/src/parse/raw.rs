//! The file's shape: one `Raw*` struct a TOML table, as serde reads it, with unknown
//! keys refused and every value that a message may point at kept [`Spanned`](toml::Spanned). Nothing is
//! checked here beyond TOML types; the sections' modules turn these into the config.

use serde::Deserialize;

use super::S;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    pub(super) router: Option<RawRouter>,
    #[serde(default)]
    pub(super) port: Vec<RawPort>,
    #[serde(default)]
    pub(super) vrf: Vec<RawVrf>,
    #[serde(default)]
    pub(super) route: Vec<RawRoute>,
    #[serde(default)]
    pub(super) label: Vec<RawLabel>,
    pub(super) limits: Option<RawLimits>,
    pub(super) frr: Option<RawFrr>,
    #[serde(default)]
    pub(super) neighbor: Vec<RawNeighbor>,
    #[serde(default)]
    pub(super) pseudowire: Vec<RawPseudowire>,
    #[serde(default)]
    pub(super) vpls: Vec<RawVpls>,
}

/// `[[vpls]]`: a VPLS instance.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawVpls {
    pub(super) name: S<String>,
    #[serde(default)]
    pub(super) attachments: Vec<S<String>>,
    pub(super) mac_limit: Option<S<i64>>,
    pub(super) flood_rate: Option<S<i64>>,
    pub(super) mac_aging: Option<S<i64>>,
    #[serde(default)]
    pub(super) pseudowire: Vec<RawVplsPseudowire>,
}

/// `[[vpls.pseudowire]]`: a pseudowire of a VPLS instance, static or (with `[frr]`,
/// without labels and peer) signalled by ldpd.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawVplsPseudowire {
    pub(super) name: S<String>,
    pub(super) local_label: Option<S<i64>>,
    pub(super) remote_label: Option<S<i64>>,
    pub(super) peer: Option<S<String>>,
    pub(super) control_word: Option<S<bool>>,
}

/// `[[pseudowire]]`: a VPWS.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawPseudowire {
    pub(super) name: S<String>,
    pub(super) attachment: S<String>,
    pub(super) local_label: Option<S<i64>>,
    pub(super) remote_label: Option<S<i64>>,
    pub(super) peer: Option<S<String>>,
    pub(super) control_word: Option<S<bool>>,
}

/// `[[neighbor]]`: a static neighbour.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawNeighbor {
    pub(super) address: S<String>,
    pub(super) lladdr: S<String>,
    pub(super) port: S<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawFrr {
    pub(super) fpm: Option<S<String>>,
    pub(super) hold_time: Option<S<i64>>,
    pub(super) stale_time: Option<S<i64>>,
    pub(super) fpm_users: Option<S<Vec<String>>>,
    pub(super) pw_channel: Option<S<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawLimits {
    pub(super) icmp_rate: Option<S<i64>>,
    pub(super) icmp_burst: Option<S<i64>>,
    pub(super) neighbor_request_rate: Option<S<i64>>,
    pub(super) neighbor_request_burst: Option<S<i64>>,
    pub(super) neighbor_entries: Option<S<i64>>,
    pub(super) neighbor_entries_per_port: Option<S<i64>>,
    pub(super) neighbor_held_per_address: Option<S<i64>>,
    pub(super) neighbor_held_total: Option<S<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawRouter {
    pub(super) name: S<String>,
    pub(super) addresses: Option<Vec<S<String>>>,
    pub(super) control_socket: Option<S<String>>,
    pub(super) fast_path: Option<S<String>>,
    pub(super) poll: Option<S<String>>,
    pub(super) cpus: Option<S<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawPort {
    pub(super) name: S<String>,
    pub(super) interface: Option<S<String>>,
    pub(super) socket: Option<S<String>>,
    pub(super) socket_group: Option<S<String>>,
    pub(super) mac: Option<S<String>>,
    pub(super) addresses: Option<Vec<S<String>>>,
    pub(super) mtu: Option<S<i64>>,
    pub(super) vrf: Option<S<String>>,
    pub(super) mpls: Option<S<bool>>,
    pub(super) kind: Option<S<String>>,
    pub(super) offloads: Option<RawOffloads>,
    pub(super) local: Option<S<String>>,
    pub(super) remote: Option<S<String>>,
    pub(super) udp_port: Option<S<i64>>,
    pub(super) netns: Option<S<String>>,
    pub(super) role: Option<S<String>>,
    pub(super) id: Option<S<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawOffloads {
    pub(super) tso: Option<bool>,
    pub(super) tso4: Option<bool>,
    pub(super) tso6: Option<bool>,
    pub(super) uso: Option<bool>,
    pub(super) csum: Option<bool>,
    pub(super) mpls_gso: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawVrf {
    pub(super) name: S<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawRouteNexthop {
    pub(super) via: Option<S<String>>,
    pub(super) port: Option<S<String>>,
    pub(super) push: Option<S<Vec<S<i64>>>>,
    pub(super) weight: Option<S<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawRoute {
    pub(super) prefix: S<String>,
    pub(super) vrf: Option<S<String>>,
    pub(super) via: Option<S<String>>,
    pub(super) port: Option<S<String>>,
    pub(super) push: Option<S<Vec<S<i64>>>>,
    pub(super) weight: Option<S<i64>>,
    pub(super) nexthops: Option<S<Vec<RawRouteNexthop>>>,
    pub(super) blackhole: Option<S<bool>>,
    pub(super) reject: Option<S<String>>,
    pub(super) ttl_model: Option<S<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawLabelNexthop {
    pub(super) via: Option<S<String>>,
    pub(super) port: Option<S<String>>,
    pub(super) out: Option<S<Vec<S<i64>>>>,
    pub(super) weight: Option<S<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RawLabel {
    #[serde(rename = "in")]
    pub(super) label: S<i64>,
    pub(super) action: S<String>,
    pub(super) out: Option<S<Vec<S<i64>>>>,
    pub(super) via: Option<S<String>>,
    pub(super) port: Option<S<String>>,
    pub(super) weight: Option<S<i64>>,
    pub(super) nexthops: Option<S<Vec<RawLabelNexthop>>>,
    pub(super) vrf: Option<S<String>>,
    pub(super) ttl_model: Option<S<String>>,
}
