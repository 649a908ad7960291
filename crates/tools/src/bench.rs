//! `vmpls bench seed`: every mode of the seed lab in one run (same namespaces, same TCP
//! flow), as a table, JSON, and optionally a bar chart in SVG.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use vmpls_lab::seed::{Mode, SeedOptions, SeedReport, run_seed};

/// Runs the benchmark and prints the table (or JSON); writes the chart to `plot` if given.
pub fn seed(duration: Duration, json: bool, plot: Option<&Path>) -> anyhow::Result<()> {
    vmpls_lab::install_interrupt_handler()?;
    let mut opts = SeedOptions::new(crate::router_binary()?, duration);
    opts.modes = Mode::bench();
    opts.json = json;
    opts.keep_going = true;
    // Three routers verifying their eBPF programs at once take seconds on a busy machine.
    opts.reach_timeout = opts.reach_timeout.max(Duration::from_secs(30));
    let report = run_seed(&opts, &mut |line| eprintln!("{line}"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        print!("{}", report.to_markdown());
        println!();
        println!(
            "Ratios: offloads-off modes against kernel-ip-offloads-off, the others against kernel-ip; \
             {} s per mode.",
            duration.as_secs()
        );
    }
    if let Some(path) = plot {
        std::fs::write(path, svg(&report)).map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
        eprintln!("chart written to {}", path.display());
    }
    if !report.ok() {
        anyhow::bail!("some modes failed (see above)");
    }
    Ok(())
}

/// A horizontal bar chart of Gbit/s per mode, with the ratio at the end of each bar.
pub fn svg(report: &SeedReport) -> String {
    let rows = report.modes.len().max(1);
    let (label_w, bar_w, row_h, top) = (200.0, 460.0, 28.0, 40.0);
    let width = label_w + bar_w + 120.0;
    let height = top + rows as f64 * row_h + 30.0;
    let max = report.modes.iter().filter_map(|m| m.gbps()).fold(0.0f64, f64::max).max(0.001);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="13">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="10" y="22" font-size="15" font-weight="bold">vmpls seed lab: TCP ce1 -> ce2, Gbit/s</text>"#
    );
    for (i, m) in report.modes.iter().enumerate() {
        let y = top + i as f64 * row_h;
        let _ = writeln!(s, r#"<text x="10" y="{:.1}">{}</text>"#, y + 18.0, m.name);
        match m.gbps() {
            Some(g) => {
                let w = (g / max * bar_w).max(1.0);
                let fill = if m.name.starts_with("kernel") { "#9aa5b1" } else { "#2f7ed8" };
                let _ = writeln!(
                    s,
                    r#"<rect x="{label_w}" y="{:.1}" width="{w:.1}" height="{:.1}" fill="{fill}"/>"#,
                    y + 4.0,
                    row_h - 8.0
                );
                let ratio = m.ratio.map_or(String::new(), |r| format!(" ({r:.2}x)"));
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}">{g:.2}{ratio}</text>"#,
                    label_w + w + 6.0,
                    y + 18.0
                );
            }
            None => {
                let _ = writeln!(s, r#"<text x="{label_w}" y="{:.1}" fill="red">failed</text>"#, y + 18.0);
            }
        }
    }
    s.push_str("</svg>\n");
    s
}
