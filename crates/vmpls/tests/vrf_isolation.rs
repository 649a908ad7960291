//! Customers cannot reach into another VRF with a label: a host on a port in VRF red
//! writes frames carrying the label that pops into VRF blue (blue's egress label), and
//! frames carrying a label swapped toward blue's host; nothing reaches blue and each
//! frame is counted as `mpls_not_accepted`. The same frames from the core port reach
//! blue (the labels work; the refusal is the port's). With the pipeline alone
//! (`fast-path = "off"`) and with the TC programs on every port (`fast-path = "tc"`:
//! they swap in the kernel, and would swap red's frames too; a pop of a frame an
//! AF_PACKET socket wrote is the pipeline's either way). Needs root (namespaces,
//! AF_PACKET).
//!
//! ```text
//!            core (198.18.40.2) -- core [    ] red  -- red (198.18.41.2, VRF red)
//!                                       [ r  ]
//!                                       [    ] blue -- blue (198.18.42.2, VRF blue)
//! ```

mod common;

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use vmpls_lab::inject::{
    ETHERTYPE_MPLS, SniffFilter, Sniffer, ethernet, interface_mac, ipv4_udp, mpls_entry, send_frames,
};
use vmpls_lab::topology::HostOptions;
use vmpls_lab::{IpPrefix, Topology};

use common::{WorkDir, output_text, router_binary};

const RED_HOST: Ipv4Addr = Ipv4Addr::new(198, 18, 41, 2);
const BLUE_HOST: Ipv4Addr = Ipv4Addr::new(198, 18, 42, 2);
const CORE_HOST: Ipv4Addr = Ipv4Addr::new(198, 18, 40, 2);
/// Blue's egress: pops into VRF blue.
const BLUE_POP: u32 = 2042;
/// A transit label: swapped to 3043 toward blue's host.
const BLUE_SWAP: u32 = 3042;
/// UDP destination ports that tell the senders apart at blue.
const FROM_CORE: u16 = 4040;
const FROM_RED: u16 = 4041;
const FRAMES: usize = 8;

/// The lab; dropping it stops the router and removes the namespaces (also when the
/// test panics), then the work directory (kept on failure).
struct VrfLab {
    topo: Topology,
    work: WorkDir,
    socket: PathBuf,
}

impl VrfLab {
    fn start(tag: &str, fast_path: &str) -> VrfLab {
        vmpls_lab::require_root().expect("this test needs root");
        let work = WorkDir::new(tag);
        let mut topo = Topology::new();
        for h in ["core", "red", "blue", "r"] {
            topo.add_host_with(h, HostOptions { ipv6: false }).unwrap();
        }
        let prefix = |s: &str| s.parse::<IpPrefix>().unwrap();
        for (host, net) in [("core", 40), ("red", 41), ("blue", 42)] {
            let (hif, rif) = (format!("{host}-r"), format!("r-{host}"));
            topo.add_link(host, &hif, "r", &rif, 1500).unwrap();
            topo.add_address(host, &hif, prefix(&format!("198.18.{net}.2/24"))).unwrap();
            topo.add_default_route(host, format!("198.18.{net}.1").parse().unwrap()).unwrap();
        }
        let socket = work.path().join("r.sock");
        let config = work.path().join("r.toml");
        let text = format!(
            "[router]\nname = \"r\"\nfast-path = \"{fast_path}\"\ncontrol-socket = \"{}\"\naddresses = [\"198.18.255.1\"]\n\n\
             [[vrf]]\nname = \"red\"\n\n[[vrf]]\nname = \"blue\"\n\n\
             [[port]]\nname = \"core\"\ninterface = \"r-core\"\naddresses = [\"198.18.40.1/24\"]\n\n\
             [[port]]\nname = \"red\"\ninterface = \"r-red\"\nvrf = \"red\"\naddresses = [\"198.18.41.1/24\"]\n\n\
             [[port]]\nname = \"blue\"\ninterface = \"r-blue\"\nvrf = \"blue\"\naddresses = [\"198.18.42.1/24\"]\n\n\
             [[label]]\nin = {BLUE_POP}\naction = \"pop\"\nvrf = \"blue\"\n\n\
             [[label]]\nin = {BLUE_SWAP}\naction = \"swap\"\nout = [3043]\nvia = \"{BLUE_HOST}\"\nport = \"blue\"\n",
            socket.display()
        );
        std::fs::write(&config, text).unwrap();
        let log = work.path().join("r.log");
        let out = std::fs::File::create(&log).unwrap();
        let mut cmd = Command::new(router_binary());
        cmd.arg("run")
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        topo.spawn("r", "vmpls", cmd, Some(log)).unwrap();
        let mut lab = VrfLab { topo, work, socket };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !lab.cli(&["link", "show"]).status.success() {
            if let Some(c) = lab.topo.exited_child() {
                panic!("vmpls exited ({}):\n{}", c.status, lab.log());
            }
            assert!(Instant::now() < deadline, "vmpls did not answer on its socket:\n{}", lab.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        lab
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.work.path().join("r.log")).unwrap_or_default()
    }

    fn ns(&self, host: &str) -> String {
        self.topo.ns(host).unwrap().to_string()
    }

    fn cli(&self, args: &[&str]) -> Output {
        Command::new(router_binary())
            .arg("--socket")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("running the vmpls CLI")
    }

    fn stats(&self) -> Value {
        let out = self.cli(&["-j", "stats"]);
        assert!(out.status.success(), "vmpls stats: {}", output_text(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// `FRAMES` frames under each of blue's labels written on `host`'s link toward r,
    /// over UDP packets from `src` to blue's host, to UDP port `dport`.
    fn send_blue_labelled(&self, host: &str, src: Ipv4Addr, dport: u16) {
        let r_mac = interface_mac(&self.ns("r"), &format!("r-{host}")).unwrap();
        let h_mac = interface_mac(&self.ns(host), &format!("{host}-r")).unwrap();
        let frames: Vec<Vec<u8>> = (0..2 * FRAMES)
            .map(|i| {
                let label = if i < FRAMES { BLUE_POP } else { BLUE_SWAP };
                let mut body = mpls_entry(label, 0, true, 64).to_vec();
                body.extend(ipv4_udp(src, BLUE_HOST, 64, 40000 + i as u16, dport, &[0x5a; 64]));
                ethernet(r_mac, h_mac, ETHERTYPE_MPLS, &body)
            })
            .collect();
        assert_eq!(send_frames(&self.ns(host), &format!("{host}-r"), &frames).unwrap(), 2 * FRAMES);
    }
}

/// A counter of `vmpls -j stats`: `table` is "drops", "events" or "fast_path".
fn counter(stats: &Value, table: &str, name: &str) -> u64 {
    stats[table]
        .as_array()
        .and_then(|l| l.iter().find(|c| c["name"] == name))
        .and_then(|c| c["value"].as_u64())
        .unwrap_or(0)
}

/// (label, UDP destination port) of the packets to blue's host among `frames`: label
/// None for a bare IPv4 packet (popped), else the one label it arrived under (swapped).
fn to_blue(frames: &[vmpls_lab::inject::Sniffed]) -> Vec<(Option<u32>, u16)> {
    frames
        .iter()
        .filter_map(|s| {
            let f = &s.frame;
            let (label, ip) = match f.get(12..14)? {
                [0x08, 0x00] => (None, f.get(14..)?),
                [0x88, 0x47] => {
                    (Some(u32::from_be_bytes(f.get(14..18)?.try_into().ok()?) >> 12), f.get(18..)?)
                }
                _ => return None,
            };
            (ip.len() >= 28 && ip[16..20] == BLUE_HOST.octets())
                .then(|| (label, u16::from_be_bytes([ip[22], ip[23]])))
        })
        .collect()
}

fn customer_label_goes_nowhere(tag: &str, fast_path: &str) {
    let lab = VrfLab::start(tag, fast_path);
    let sniffer = Sniffer::start(&lab.ns("blue"), "blue-r", SniffFilter::All).unwrap();

    // The label works from the core: blue's host gets the packets (the first burst
    // waits for ARP, and only a few are held meanwhile; the second goes through whole).
    // Then red's host sends the same.
    for _ in 0..2 {
        lab.send_blue_labelled("core", CORE_HOST, FROM_CORE);
        std::thread::sleep(Duration::from_millis(300));
    }
    lab.send_blue_labelled("red", RED_HOST, FROM_RED);
    std::thread::sleep(Duration::from_millis(500));
    let seen = to_blue(&sniffer.stop().unwrap());

    let stats = lab.stats();
    let from_core = |label| seen.iter().filter(|&&(l, p)| l == label && p == FROM_CORE).count();
    assert!(
        from_core(None) >= FRAMES && from_core(Some(3043)) >= FRAMES,
        "both labels reach blue from the core: {seen:?}\n{stats}\n{}",
        lab.log()
    );
    let from_red: Vec<_> = seen.iter().filter(|&&(_, p)| p == FROM_RED).collect();
    assert!(from_red.is_empty(), "a customer in red reached blue: {from_red:?}\n{stats}");
    assert_eq!(counter(&stats, "drops", "mpls_not_accepted"), 2 * FRAMES as u64, "{stats}");
    if fast_path == "tc" {
        // The programs serve the ports: they swapped the core's second burst themselves.
        assert!(counter(&stats, "fast_path", "swap") >= 1, "{stats}");
    }

    let links = lab.cli(&["link", "show"]);
    let links = String::from_utf8_lossy(&links.stdout);
    assert!(links.contains("interface r-red vrf red mpls off\n"), "{links}");
    assert!(links.contains("interface r-core vrf default mpls on\n"), "{links}");
    let json: Value = serde_json::from_slice(&lab.cli(&["-j", "link", "show"]).stdout).unwrap();
    let mpls: Vec<(&str, bool)> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["name"].as_str().unwrap(), l["mpls"].as_bool().unwrap()))
        .collect();
    assert_eq!(mpls, vec![("core", true), ("red", false), ("blue", false)]);
}

#[test]
fn a_customer_label_into_another_vrf_is_dropped_by_the_pipeline() {
    customer_label_goes_nowhere("vrf-off", "off");
}

#[test]
fn a_customer_label_into_another_vrf_is_dropped_with_the_fast_path() {
    customer_label_goes_nowhere("vrf-tc", "tc");
}
