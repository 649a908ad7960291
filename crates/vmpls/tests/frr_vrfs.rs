//! FRR mode learns its VRFs from the kernel, as zebra `-n` sees them: a router whose
//! network namespace R is entered first, in a private mount namespace with a `/run/netns`
//! of its own (a tmpfs), where VRF `red` is a network namespace holding an interface
//! `red` whose peer in R has the same ifindex (the table id, as the zebra module makes
//! it). Two CE-facing veth ends are in `red`, not in R; vmpls opens them there, reads
//! their addresses there (connected routes of VRF red), and forwards between them with
//! the kernel's forwarding off. `vrf show` lists red with its table and ports, and drops
//! it once its namespace is deleted; a VRF created at runtime is listed and routed in. No
//! FRR daemon is needed for this. Needs root.
//!
//! ```text
//!   ce1 (198.18.61.2) -- r-ce1 [ red: namespace of R's mount namespace ] r-ce2 -- ce2 (198.18.62.2)
//!                       198.18.61.1        vmpls in R (red: ifindex 1001)   198.18.62.1
//! ```

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use vmpls_testkit::{Netns, TempDir};

const BIN: &str = env!("CARGO_BIN_EXE_vmpls");
/// The VRF interface's ifindex in both namespaces: red's table id.
const TABLE: u32 = 1001;

/// The router's mount namespace: a process entered into R, then into a private mount
/// namespace with a tmpfs on `/run/netns`; everything in it (VRF namespaces, vmpls) goes
/// when it does.
struct RouterMounts {
    holder: Child,
}

impl RouterMounts {
    fn start(r: &Netns) -> RouterMounts {
        let holder = Command::new("ip")
            .args(["netns", "exec", r.name(), "unshare", "--mount", "--propagation", "private", "sh", "-c"])
            .arg("mount -t tmpfs -o size=1m,mode=755 tmpfs /run/netns && exec sleep 120")
            .stdin(Stdio::null())
            .spawn()
            .expect("start the router's mount namespace");
        let m = RouterMounts { holder };
        let deadline = Instant::now() + Duration::from_secs(5);
        // The tmpfs is up once /run/netns there is empty (R's own file is not in it).
        while m.run("ls", &["/run/netns/"]).status.success()
            && !String::from_utf8_lossy(&m.run("ls", &["/run/netns/"]).stdout).is_empty()
        {
            assert!(Instant::now() < deadline, "the tmpfs on /run/netns never came up");
            std::thread::sleep(Duration::from_millis(50));
        }
        m
    }

    fn pid(&self) -> String {
        self.holder.id().to_string()
    }

    /// A command in the router's mount and network namespaces.
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.args(["-t", &self.pid(), "-m", "-n", "--", program]);
        c
    }

    fn run(&self, program: &str, args: &[&str]) -> Output {
        self.command(program).args(args).output().expect("run in the router's namespaces")
    }

    /// `ip ARGS` in the router's namespaces; panics if it fails.
    fn ip(&self, args: &[&str]) -> String {
        let out = self.run("ip", args);
        assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The path of VRF namespace `name` as seen from outside.
    fn netns_path(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root/run/netns/{name}", self.pid()))
    }
}

impl Drop for RouterMounts {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// The running router, stopped on drop.
struct Router {
    child: Child,
    log: PathBuf,
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn cli(socket: &Path, args: &[&str]) -> Output {
    Command::new(BIN).arg("--socket").arg(socket).args(args).output().expect("run the vmpls CLI")
}

fn vrfs(socket: &Path) -> Vec<Value> {
    let out = cli(socket, &["-j", "vrf", "show"]);
    assert!(out.status.success(), "vrf show: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Value>(&out.stdout).unwrap().as_array().cloned().unwrap()
}

fn ping(ce: &Netns, to: &str) -> bool {
    let out = Command::new("ip")
        .args(["netns", "exec", ce.name(), "ping", "-c", "1", "-W", "1", to])
        .output()
        .expect("run ping");
    out.status.success()
}

#[test]
fn ports_in_a_vrf_namespace_forward_in_that_vrf_and_the_vrf_follows_its_namespace() {
    if !vmpls_testkit::is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let dir = TempDir::new("frr-vrfs");
    // No IPv6 in R: no address event of its own (link-local addresses) hides whether
    // red's are heard.
    let (r, ce1, ce2) = (Netns::without_ipv6("r"), Netns::new("ce1"), Netns::new("ce2"));
    let mounts = RouterMounts::start(&r);
    // VRF red as the zebra module makes it: a namespace holding `red`, peer of R's `red`,
    // both of ifindex TABLE.
    mounts.ip(&["netns", "add", "red"]);
    let t = TABLE.to_string();
    mounts.ip(&[
        "link", "add", "red", "index", &t, "type", "veth", "peer", "name", "red", "netns", "red", "index", &t,
    ]);
    mounts.ip(&["link", "set", "red", "up"]);
    mounts.ip(&["-n", "red", "link", "set", "red", "up"]);
    mounts.ip(&["-n", "red", "link", "set", "lo", "up"]);
    // The CE-facing ends, in red (its path from outside).
    let red = mounts.netns_path("red");
    let red = red.to_str().unwrap();
    for (ce, n) in [(&ce1, 1), (&ce2, 2)] {
        let (theirs, ours) = (format!("ce{n}-r"), format!("r-ce{n}"));
        ce.ip(&["link", "add", &theirs, "type", "veth", "peer", "name", &ours, "netns", red]);
        ce.ip(&["link", "set", &theirs, "up"]);
        ce.ip(&["addr", "add", &format!("198.18.6{n}.2/24"), "dev", &theirs]);
        ce.ip(&["route", "add", "default", "via", &format!("198.18.6{n}.1")]);
        mounts.ip(&["-n", "red", "addr", "add", &format!("198.18.6{n}.1/24"), "dev", &ours]);
        mounts.ip(&["-n", "red", "link", "set", &ours, "up"]);
    }
    // A new namespace may inherit forwarding from the host's (devconf_inherit_init_net).
    let red_forwarding = |on: &str| {
        let v4 = format!("net.ipv4.conf.all.forwarding={on}");
        let v6 = format!("net.ipv6.conf.all.forwarding={on}");
        let out = mounts.run("ip", &["netns", "exec", "red", "sysctl", "-qw", &v4, &v6]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    red_forwarding("1");

    let socket = dir.path().join("r.sock");
    let config = dir.path().join("r.toml");
    std::fs::write(
        &config,
        format!(
            "[router]\nname = \"vrfs-r\"\ncontrol-socket = \"{}\"\n\n[frr]\nfpm = \"127.0.0.1:2620\"\n\n\
             [[port]]\nname = \"ce1\"\ninterface = \"r-ce1\"\n\n[[port]]\nname = \"ce2\"\ninterface = \"r-ce2\"\n",
            socket.display()
        ),
    )
    .unwrap();
    // The kernel of red forwards: vmpls refuses to start, naming the port's interface there.
    let refused = mounts.command(BIN).args(["run", "--config"]).arg(&config).output().unwrap();
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && why.contains("r-ce1 (netns red)"), "{why}");
    red_forwarding("0");

    let log = dir.path().join("r.log");
    let child = mounts
        .command(BIN)
        .args(["run", "--config"])
        .arg(&config)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start vmpls");
    let mut router = Router { child, log };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cli(&socket, &["vrf", "show"]).status.success() {
        if let Ok(Some(status)) = router.child.try_wait() {
            panic!("vmpls stopped ({status}):\n{}", std::fs::read_to_string(&router.log).unwrap_or_default());
        }
        assert!(Instant::now() < deadline, "vmpls never answered");
        std::thread::sleep(Duration::from_millis(100));
    }

    // red, its table and its ports, learned from the kernel alone.
    let list = vrfs(&socket);
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["name"], "red");
    assert_eq!(list[0]["table"], TABLE);
    assert_eq!(list[0]["origin"], "netns");
    assert_eq!(list[0]["interfaces"], serde_json::json!(["ce1", "ce2"]));
    let routes = String::from_utf8_lossy(&cli(&socket, &["route", "show", "vrf", "red"]).stdout).into_owned();
    assert!(routes.contains("198.18.61.0/24") && routes.contains("dev ce1"), "{routes}");
    assert!(routes.contains("198.18.62.0/24") && routes.contains("dev ce2"), "{routes}");
    let default = String::from_utf8_lossy(&cli(&socket, &["route", "show"]).stdout).into_owned();
    assert!(!default.contains("198.18.61.0/24"), "red's subnet is not in the default VRF: {default}");
    let log_text = std::fs::read_to_string(&router.log).unwrap();
    assert!(
        log_text.contains("VRF's network namespace"),
        "the start-up log says where each port is:\n{log_text}"
    );

    // An address added in red at runtime: its subnet becomes a connected route of red.
    mounts.ip(&["-n", "red", "addr", "add", "198.18.63.1/24", "dev", "r-ce2"]);
    // Well before the 5 s reread: the address event from red's namespace is heard.
    let deadline = Instant::now() + Duration::from_secs(2);
    while !String::from_utf8_lossy(&cli(&socket, &["route", "show", "vrf", "red"]).stdout)
        .contains("198.18.63.0/24")
    {
        assert!(Instant::now() < deadline, "the new address in red was not followed");
        std::thread::sleep(Duration::from_millis(200));
    }

    // ce1 reaches ce2 through vmpls, inside VRF red (the kernel there does not forward).
    let deadline = Instant::now() + Duration::from_secs(8);
    while !ping(&ce1, "198.18.62.2") {
        assert!(
            Instant::now() < deadline,
            "ce1 cannot reach ce2 through VRF red:\n{}",
            std::fs::read_to_string(&router.log).unwrap_or_default()
        );
    }
    let stats: Value = serde_json::from_slice(&cli(&socket, &["-j", "link", "show", "ce2"]).stdout).unwrap();
    assert!(stats[0]["stats"]["tx_packets"].as_u64().unwrap() > 0, "vmpls sent on ce2: {stats}");

    // VRF blue created at runtime: listed within a few seconds, and a VRF of the tables.
    mounts.ip(&["netns", "add", "blue"]);
    let b = (TABLE + 1).to_string();
    mounts.ip(&[
        "link", "add", "blue", "index", &b, "type", "veth", "peer", "name", "blue", "netns", "blue", "index",
        &b,
    ]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !vrfs(&socket).iter().any(|v| v["name"] == "blue" && v["table"] == TABLE + 1) {
        assert!(Instant::now() < deadline, "blue is not listed: {:?}", vrfs(&socket));
        std::thread::sleep(Duration::from_millis(200));
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    while !cli(&socket, &["route", "add", "blackhole", "198.18.70.0/24", "vrf", "blue"]).status.success() {
        assert!(Instant::now() < deadline, "the tables never took VRF blue");
        std::thread::sleep(Duration::from_millis(200));
    }
    let routes =
        String::from_utf8_lossy(&cli(&socket, &["route", "show", "vrf", "blue"]).stdout).into_owned();
    assert!(routes.contains("198.18.70.0/24"), "{routes}");
    assert!(cli(&socket, &["route", "del", "blackhole", "198.18.70.0/24", "vrf", "blue"]).status.success());
    mounts.ip(&["netns", "del", "blue"]);

    // red's namespace deleted: the VRF goes from `vrf show` within a few seconds.
    mounts.ip(&["netns", "del", "red"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !vrfs(&socket).is_empty() {
        assert!(Instant::now() < deadline, "red is still listed: {:?}", vrfs(&socket));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(matches!(router.child.try_wait(), Ok(None)), "vmpls runs on");
    drop(router);
    drop(mounts);
}
