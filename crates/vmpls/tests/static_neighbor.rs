//! Static neighbours on a running router: one from the config (`[[neighbor]]`) and one
//! from the CLI (`vmpls neigh add ADDR lladdr MAC dev PORT`), each a next hop whose MAC no
//! host answers ARP for. The frames toward them leave with that MAC and no ARP request is
//! sent (checked on the wire with dumpcap and tshark); `neigh show` says PERMANENT;
//! `neigh del` makes the router ask again. Needs root, dumpcap and tshark.
//!
//! ```text
//! s (198.18.31.2) -- west [ r ] east -- h (198.18.30.2, a bystander on the link)
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vmpls_lab::capture::{Capture, tshark_fields};
use vmpls_lab::ping::{PingOptions, ping};
use vmpls_lab::topology::{HostOptions, Topology};

const FILE_MAC: &str = "02:00:00:00:77:01";
const CLI_MAC: &str = "02:00:00:00:77:02";

fn config(socket: &Path) -> String {
    format!(
        r#"[router]
name = "r"
control-socket = "{}"
addresses = ["198.18.255.9"]

[[port]]
name = "west"
interface = "r-s"
addresses = ["198.18.31.1/24"]

[[port]]
name = "east"
interface = "r-h"
addresses = ["198.18.30.1/24"]

[[route]]
prefix = "198.18.77.0/24"
push = [1077]
via = "198.18.30.99"
port = "east"

[[neighbor]]
address = "198.18.30.99"
lladdr = "{FILE_MAC}"
port = "east"
"#,
        socket.display()
    )
}

/// Removes the work directory on drop (after the topology).
struct WorkDir(PathBuf);

impl Drop for WorkDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn cli(socket: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vmpls"))
        .arg("--socket")
        .arg(socket)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running the vmpls CLI")
}

fn ok(socket: &Path, args: &[&str]) -> String {
    let out = cli(socket, args);
    assert!(out.status.success(), "vmpls {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Pings `dst` from s a few times (no answer expected: nothing owns it) while capturing
/// on h's side of the east link; returns (destination MAC, label, ARP target) per frame.
fn send_and_capture(topo: &Topology, work: &Path, dst: &str, tag: &str) -> Vec<Vec<String>> {
    let pcap = work.join(format!("{tag}.pcap"));
    let cap = Capture::start(topo.ns("h").unwrap(), "h-r", &pcap, None).expect("dumpcap");
    let opts = PingOptions {
        count: 3,
        interval: Duration::from_millis(100),
        timeout: Duration::from_millis(300),
        ..PingOptions::default()
    };
    let r = ping(topo.ns("s").unwrap(), dst.parse().unwrap(), &opts).expect("ping");
    assert_eq!(r.sent, 3, "{r:?}");
    let pcap = cap.stop().expect("stopping dumpcap");
    tshark_fields(
        &pcap,
        "mpls or arp",
        &["eth.dst", "mpls.label", "arp.dst.proto_ipv4"],
        Duration::from_secs(20),
    )
    .expect("tshark")
}

#[test]
fn static_neighbors_get_frames_without_arp_from_the_config_and_the_cli() {
    vmpls_lab::require_root().expect("needs root");
    let work = WorkDir(std::env::temp_dir().join(format!("vmpls-neigh-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&work.0);
    std::fs::create_dir_all(&work.0).unwrap();
    let mut topo = Topology::new();
    for h in ["s", "r", "h"] {
        topo.add_host_with(h, HostOptions { ipv6: false }).unwrap();
    }
    topo.add_link("s", "s-r", "r", "r-s", 1500).unwrap();
    topo.add_link("r", "r-h", "h", "h-r", 1500).unwrap();
    topo.add_address("s", "s-r", "198.18.31.2/24".parse().unwrap()).unwrap();
    topo.add_default_route("s", "198.18.31.1".parse().unwrap()).unwrap();
    topo.add_address("h", "h-r", "198.18.30.2/24".parse().unwrap()).unwrap();

    let socket = work.0.join("r.ctl");
    let cfg = work.0.join("r.toml");
    std::fs::write(&cfg, config(&socket)).unwrap();
    let log = work.0.join("r.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vmpls"));
    cmd.arg("run")
        .arg("--config")
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    topo.spawn("r", "vmpls", cmd, Some(log.clone())).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cli(&socket, &["link", "show"]).status.success() {
        assert!(topo.exited_child().is_none(), "vmpls exited:\n{}", Topology::log_tail(&log, 30));
        assert!(Instant::now() < deadline, "vmpls did not answer:\n{}", Topology::log_tail(&log, 30));
        std::thread::sleep(Duration::from_millis(50));
    }

    // From the config: shown as PERMANENT, frames leave with its MAC, no ARP for it.
    let shown = ok(&socket, &["neigh", "show", "dev", "east"]);
    assert!(shown.contains(&format!("198.18.30.99 dev east lladdr {FILE_MAC} PERMANENT")), "{shown}");
    let frames = send_and_capture(&topo, &work.0, "198.18.77.1", "file");
    let labelled: Vec<_> = frames.iter().filter(|f| f[1] == "1077").collect();
    assert!(labelled.len() >= 3, "{frames:?}");
    assert!(labelled.iter().all(|f| f[0] == FILE_MAC), "{frames:?}");
    assert!(
        !frames.iter().any(|f| f[2] == "198.18.30.99"),
        "an ARP request for a static neighbour: {frames:?}"
    );

    // From the CLI, for a route added at runtime.
    ok(&socket, &["neigh", "add", "198.18.30.98", "lladdr", CLI_MAC, "dev", "east"]);
    ok(
        &socket,
        &["route", "add", "198.18.78.0/24", "encap", "mpls", "1078", "via", "198.18.30.98", "dev", "east"],
    );
    let json: serde_json::Value = serde_json::from_str(&ok(&socket, &["-j", "neigh", "show"])).unwrap();
    let entry = json.as_array().unwrap().iter().find(|n| n["dst"] == "198.18.30.98").cloned();
    assert_eq!(
        entry,
        Some(
            serde_json::json!({"dst": "198.18.30.98", "dev": "east", "lladdr": CLI_MAC, "state": "PERMANENT"})
        )
    );
    let frames = send_and_capture(&topo, &work.0, "198.18.78.1", "cli");
    let labelled: Vec<_> = frames.iter().filter(|f| f[1] == "1078").collect();
    assert!(labelled.len() >= 3 && labelled.iter().all(|f| f[0] == CLI_MAC), "{frames:?}");
    assert!(!frames.iter().any(|f| f[2] == "198.18.30.98"), "{frames:?}");

    // Mistakes are refused with the reason; the table stays.
    let out = cli(&socket, &["neigh", "add", "198.18.30.98", "lladdr", "02:00:00:00:77:03", "dev", "east"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("use replace"), "{out:?}");
    let out = cli(&socket, &["neigh", "add", "198.18.30.97", "lladdr", CLI_MAC, "dev", "nosuch"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no port named \"nosuch\""), "{out:?}");
    let out = cli(&socket, &["neigh", "add", "198.18.30.97", "lladdr", "ff:ff:ff:ff:ff:ff", "dev", "east"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");

    // Deleted, the address is asked for again.
    ok(&socket, &["neigh", "del", "198.18.30.98", "dev", "east"]);
    let frames = send_and_capture(&topo, &work.0, "198.18.78.1", "deleted");
    assert!(frames.iter().any(|f| f[2] == "198.18.30.98"), "no ARP request after neigh del: {frames:?}");
    assert!(!frames.iter().any(|f| f[1] == "1078"), "nobody answers: nothing is sent: {frames:?}");
    let out = cli(&socket, &["neigh", "del", "198.18.30.96", "dev", "east"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no neighbour 198.18.30.96"), "{out:?}");
    assert!(topo.exited_child().is_none(), "vmpls exited:\n{}", Topology::log_tail(&log, 30));
}
