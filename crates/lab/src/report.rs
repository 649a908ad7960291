//! The report every lab prints: one row per mode (Gbit/s, retransmits, ratio to the
//! kernel's routing), as a Markdown table or JSON (`--json`), with the failures under
//! it. The seed, FRR and QEMU labs build their [`ModeRow`]s and add what is theirs
//! (routers, convergence, guests) around the same table.

use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::traffic::FlowResult;

/// What a mode's TCP flow measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// Throughput at the receiver, Gbit/s.
    pub gbps: f64,
    /// TCP retransmits at the sender.
    pub retransmits: u64,
    /// Bytes the receiver got.
    pub bytes: u64,
    /// Seconds the flow ran.
    pub seconds: f64,
}

impl From<&FlowResult> for Measured {
    fn from(f: &FlowResult) -> Self {
        Self { gbps: f.gbps, retransmits: f.retransmits.into(), bytes: f.bytes_received, seconds: f.seconds }
    }
}

/// One mode of a lab run.
#[derive(Debug, Clone, PartialEq)]
pub struct ModeRow<'a> {
    /// The mode's name.
    pub name: &'a str,
    /// The flow's measurement; `None` if the mode failed before or during the flow.
    pub measured: Option<Measured>,
    /// Throughput relative to the baseline (kernel) mode of the same run.
    pub ratio: Option<f64>,
    /// Why the mode failed, if it did.
    pub error: Option<&'a str>,
}

/// Which keys a mode has in a lab's JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonDetail {
    /// `name`, `gbps`, `retransmits`, `ratio`.
    Summary,
    /// Also `bytes`, `seconds` and `error`.
    Full,
}

/// The modes table: mode, Gbit/s, retransmits, ratio to kernel-ip.
pub fn modes_table(rows: &[ModeRow<'_>]) -> String {
    let mut s = String::new();
    s.push_str("| mode | Gbit/s | retransmits | ratio to kernel-ip |\n");
    s.push_str("|------|-------:|------------:|-------------------:|\n");
    for m in rows {
        let (gbps, retrans) = match &m.measured {
            Some(f) => (format!("{:.2}", f.gbps), f.retransmits.to_string()),
            None => ("failed".to_string(), "-".to_string()),
        };
        let ratio = m.ratio.map_or("-".to_string(), |r| format!("{r:.2}"));
        let _ = writeln!(s, "| {} | {gbps} | {retrans} | {ratio} |", m.name);
    }
    s
}

/// The failures as a list under a table (an empty line, then `- WHAT`, continuation
/// lines indented); empty if there are none.
pub fn failure_list(failures: impl IntoIterator<Item = String>) -> String {
    let mut s = String::new();
    for f in failures {
        if s.is_empty() {
            s.push('\n');
        }
        let _ = writeln!(s, "- {}", f.replace('\n', "\n  "));
    }
    s
}

/// The failed modes, as `NAME: ERROR`.
pub fn mode_failures<'a>(rows: &'a [ModeRow<'a>]) -> impl Iterator<Item = String> + 'a {
    rows.iter().filter_map(|m| Some(format!("{}: {}", m.name, m.error?)))
}

/// The modes table with the failed modes listed under it.
pub fn to_markdown(rows: &[ModeRow<'_>]) -> String {
    modes_table(rows) + &failure_list(mode_failures(rows))
}

/// One mode as a JSON object with the keys of `detail`.
pub fn mode_json(m: &ModeRow<'_>, detail: JsonDetail) -> Map<String, Value> {
    let mut o = Map::new();
    o.insert("name".into(), m.name.into());
    o.insert("gbps".into(), m.measured.map(|f| f.gbps).into());
    o.insert("retransmits".into(), m.measured.map(|f| f.retransmits).into());
    o.insert("ratio".into(), m.ratio.into());
    if detail == JsonDetail::Full {
        o.insert("bytes".into(), m.measured.map(|f| f.bytes).into());
        o.insert("seconds".into(), m.measured.map(|f| f.seconds).into());
        o.insert("error".into(), m.error.into());
    }
    o
}

/// Each mode's throughput relative to its baseline: `baseline(i)` is the index of the
/// mode mode `i` is compared with (`None`: no ratio). A failed or zero baseline gives
/// no ratio.
pub fn ratios(gbps: &[Option<f64>], baseline: impl Fn(usize) -> Option<usize>) -> Vec<Option<f64>> {
    (0..gbps.len())
        .map(|i| {
            let base = gbps.get(baseline(i)?).copied().flatten().filter(|g| *g > 0.0)?;
            Some(gbps[i]? / base)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row<'a>(name: &'a str, gbps: Option<f64>, ratio: Option<f64>, error: Option<&'a str>) -> ModeRow<'a> {
        let measured = gbps.map(|gbps| Measured { gbps, retransmits: 3, bytes: 1000, seconds: 2.0 });
        ModeRow { name, measured, ratio, error }
    }

    #[test]
    fn the_table_lists_modes_then_failures() {
        let rows =
            [row("kernel-ip", Some(10.0), Some(1.0), None), row("vmpls-mpls", None, None, Some("a\nb"))];
        assert_eq!(
            to_markdown(&rows),
            "| mode | Gbit/s | retransmits | ratio to kernel-ip |\n\
             |------|-------:|------------:|-------------------:|\n\
             | kernel-ip | 10.00 | 3 | 1.00 |\n\
             | vmpls-mpls | failed | - | - |\n\
             \n\
             - vmpls-mpls: a\n  b\n"
        );
    }

    #[test]
    fn json_has_the_keys_of_its_detail() {
        let r = row("kernel-ip", Some(10.0), None, None);
        let keys = |d| mode_json(&r, d).keys().cloned().collect::<Vec<_>>().join(",");
        assert_eq!(keys(JsonDetail::Summary), "gbps,name,ratio,retransmits");
        assert_eq!(keys(JsonDetail::Full), "bytes,error,gbps,name,ratio,retransmits,seconds");
    }

    #[test]
    fn ratios_need_a_measured_baseline() {
        let gbps = [Some(10.0), Some(5.0), None, Some(0.0), Some(2.0)];
        let r = ratios(&gbps, |i| if i == 4 { Some(3) } else { Some(0) });
        assert_eq!(r, vec![Some(1.0), Some(0.5), None, Some(0.0), None]);
    }
}
