//! The counters a router writes with `vmpls run --stats-file FILE`, rewritten every
//! second and at exit: the schema `vmpls -j stats` prints ([`vmpls_control::api::Stats`]),
//! read here into maps by name for the labs' checks.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;

/// Drop reasons that traffic a lab did not send causes on the routers' links: the hosts'
/// own IPv6 multicast (MLD reports, router solicitations) and frames for other stations.
/// Every other reason means a frame of the lab's traffic was lost or malformed.
pub const BACKGROUND_DROPS: &[&str] = &["other_host", "ip_multicast", "local_unhandled", "unknown_ethertype"];

/// One router's counters, as read from its stats file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RouterStats {
    /// Frames dropped, by reason (`unknown_label`, `bad_ipv4_header`, ...).
    pub drops: BTreeMap<String, u64>,
    /// Things counted, by name (`label_swap`, `icmp_time_exceeded_sent`, ...).
    pub events: BTreeMap<String, u64>,
    /// Per-port counters, as the router wrote them (objects with a `name`).
    pub ports: Vec<serde_json::Value>,
    /// What the in-kernel fast path did (`swap`, `push`, `pop`, `passed`, ...); empty
    /// when the router runs without it.
    pub fast_path: BTreeMap<String, u64>,
    /// Where the forwarding loop's time went (`busy_us`, `idle_us`, `slept_us`, `turns`,
    /// `busy_turns`).
    pub forwarding_loop: BTreeMap<String, u64>,
}

fn counter_map(counters: &[vmpls_control::api::Counter]) -> BTreeMap<String, u64> {
    counters.iter().map(|c| (c.name.clone(), c.value)).collect()
}

impl RouterStats {
    /// Parses the JSON text of a stats file.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let stats: vmpls_control::api::Stats =
            serde_json::from_str(text).context("not the router's stats")?;
        let ports = stats.ports.iter().map(serde_json::to_value).collect::<Result<_, _>>()?;
        Ok(Self {
            drops: counter_map(&stats.drops),
            events: counter_map(&stats.events),
            ports,
            fast_path: counter_map(&stats.fast_path),
            forwarding_loop: counter_map(&stats.forwarding_loop),
        })
    }

    /// Reads and parses a stats file.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading router stats {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    /// Drops counted under `reason` (0 if the router does not know the reason).
    pub fn drop_count(&self, reason: &str) -> u64 {
        self.drops.get(reason).copied().unwrap_or(0)
    }

    /// The fast path's counter `name` (0 if unknown or without a fast path).
    pub fn fast(&self, name: &str) -> u64 {
        self.fast_path.get(name).copied().unwrap_or(0)
    }

    /// Events counted under `name` (0 if unknown).
    pub fn event(&self, name: &str) -> u64 {
        self.events.get(name).copied().unwrap_or(0)
    }

    /// The drop reasons with a non-zero count.
    pub fn nonzero_drops(&self) -> BTreeMap<&str, u64> {
        self.drops.iter().filter(|(_, n)| **n > 0).map(|(k, n)| (k.as_str(), *n)).collect()
    }

    /// The non-zero drops whose reason is not in `allowed`.
    pub fn drops_except(&self, allowed: &[&str]) -> BTreeMap<&str, u64> {
        self.nonzero_drops().into_iter().filter(|(k, _)| !allowed.contains(k)).collect()
    }

    /// Counter by counter, `self - earlier` (saturating), for the drops and events.
    pub fn since(&self, earlier: &RouterStats) -> RouterStats {
        let diff = |now: &BTreeMap<String, u64>, then: &BTreeMap<String, u64>| {
            now.iter()
                .map(|(k, n)| (k.clone(), n.saturating_sub(then.get(k).copied().unwrap_or(0))))
                .collect()
        };
        RouterStats {
            drops: diff(&self.drops, &earlier.drops),
            events: diff(&self.events, &earlier.events),
            ports: self.ports.clone(),
            fast_path: diff(&self.fast_path, &earlier.fast_path),
            forwarding_loop: diff(&self.forwarding_loop, &earlier.forwarding_loop),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"{
      "drops": [{"name": "unknown_label", "value": 3}, {"name": "bad_ipv4_header", "value": 0},
                {"name": "other_host", "value": 7}],
      "events": [{"name": "label_swap", "value": 100}, {"name": "label_push", "value": 0}],
      "ports": [{"name": "west", "rx_packets": 5, "rx_bytes": 0, "rx_dropped": 0, "tx_packets": 0,
                 "tx_bytes": 0, "tx_dropped": 0, "tx_errors": 0, "pipeline_rx": 5, "pipeline_tx": 0}],
      "neighbors": 0, "neighbors_reachable": 0, "label_routes": 1, "prefix_routes": 2
    }"#;

    #[test]
    fn parses_counts_and_differences() {
        let s = RouterStats::parse(SAMPLE).unwrap();
        assert_eq!(s.drop_count("unknown_label"), 3);
        assert_eq!(s.drop_count("no_such_reason"), 0);
        assert_eq!(s.event("label_swap"), 100);
        assert_eq!(s.ports[0]["name"], "west");
        assert_eq!(
            s.nonzero_drops().into_iter().collect::<Vec<_>>(),
            vec![("other_host", 7), ("unknown_label", 3)]
        );
        assert_eq!(
            s.drops_except(&["other_host"]).into_iter().collect::<Vec<_>>(),
            vec![("unknown_label", 3)]
        );
        let mut later = s.clone();
        later.drops.insert("unknown_label".into(), 5);
        later.events.insert("label_swap".into(), 90);
        let d = later.since(&s);
        assert_eq!(d.drop_count("unknown_label"), 2);
        assert_eq!(d.event("label_swap"), 0);
    }

    #[test]
    fn rejects_malformed_stats() {
        assert!(RouterStats::parse("").is_err());
        assert!(RouterStats::parse("{}").is_err());
        assert!(RouterStats::parse(r#"{"drops": {"x": 1}, "events": {}}"#).is_err(), "the old schema");
        let negative = SAMPLE.replace(r#""value": 3"#, r#""value": -3"#);
        assert!(RouterStats::parse(&negative).is_err());
    }
}
