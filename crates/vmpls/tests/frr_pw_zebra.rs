//! Pseudowires out of zebra, against real FRR daemons (issue 25, the module's part).
//!
//! - `ldpd_signals_the_pw_and_its_status_follows_vmpls`: `frr/zebra-module/tools/pw-two-pe.sh`
//!   builds two PEs with zebra + the module, staticd and ldpd (a VPWS: `l2vpn ENG type
//!   vpls`, one member interface, one member pseudowire), each module's channel going to
//!   `pw-recorder.py` playing vmpls. It checks that ldpd brings the PW up, the channel
//!   carries it with the labels ldpd signalled, the control word and the peer, a
//!   restarted listener gets it again (replay), `status down` makes FRR show it down at
//!   both ends (ldpd signals it), vmpls away makes it down, and removing the l2vpn sends
//!   uninstall.
//! - `the_router_channel_serves_zebra`: the router's own channel server
//!   (`vmpls_router::pw_channel`) in a namespace with zebra + the module and a static
//!   pseudowire of zebra's (`pseudowire mpw0` in zebra's config): the sink gets zebra's
//!   PW (labels, control word, peer), changes and removal; the sink's state reaches
//!   `show mpls pseudowires` (down with vmpls's reason, then up); a socket of another
//!   user is refused; zebra gone, its PWs are removed after the hold time.
//!
//! Needs root (skipped otherwise); installs Debian's frr if missing; the zebra module
//! comes from `VMPLS_ZEBRA_MODULE` or `scripts/build-zebra-module`.

mod frr_common;

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use frr_common::{is_root, run_check_script, zebra_module};
use serde_json::Value;
use vmpls_frr::pw::{PwSpec, PwType};
use vmpls_lab::frr;
use vmpls_lab::process::{SignalTarget, Supervised};
use vmpls_router::pw_channel::{self, PwSink, PwState};
use vmpls_router::pw_standin::StandIns;
use vmpls_testkit::Netns;

#[test]
fn ldpd_signals_the_pw_and_its_status_follows_vmpls() {
    if !is_root() {
        eprintln!("skipping frr_pw_zebra: needs root (network namespaces, FRR daemons)");
        return;
    }
    frr::ensure_frr_installed().unwrap();
    let module = zebra_module();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../frr/zebra-module/tools/pw-two-pe.sh");
    let mut cmd = Command::new(&script);
    cmd.env("VMPLS_ZEBRA_MODULE", &module);
    // Every wait in the script is bounded (about 250 s in all if each one times out).
    let (stdout, passed) = run_check_script(cmd, &script, Duration::from_secs(300));
    // A script that stopped early (e.g. at a `set -e` step) passes fewer checks and
    // never says it is done.
    assert!(
        passed >= 22 && stdout.contains("pw-two-pe.sh: all checks passed"),
        "only {passed} checks passed:\n{stdout}"
    );
}

/// What the channel did to the tables, and the state the test makes the tables report.
#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<String>>,
    pws: Mutex<Vec<PwSpec>>,
    state: Mutex<(bool, Option<String>)>,
}

impl PwSink for Recorder {
    fn pw_sync_frr(&self, pws: Vec<PwSpec>) -> Result<(), String> {
        self.calls.lock().unwrap().push(format!("sync {}", pws.len()));
        *self.pws.lock().unwrap() = pws;
        Ok(())
    }
    fn pw_replace_frr(&self, pw: PwSpec) -> Result<(), String> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("replace {} {} {}", pw.name, pw.local_label, pw.remote_label));
        let mut pws = self.pws.lock().unwrap();
        pws.retain(|p| p.name != pw.name);
        pws.push(pw);
        Ok(())
    }
    fn pw_del_frr(&self, name: &str) -> Result<(), String> {
        self.calls.lock().unwrap().push(format!("del {name}"));
        self.pws.lock().unwrap().retain(|p| p.name != name);
        Ok(())
    }
    fn pw_status(&self) -> Option<Vec<PwState>> {
        let (up, reason) = self.state.lock().unwrap().clone();
        let pws = self.pws.lock().unwrap();
        Some(pws.iter().map(|p| PwState { name: p.name.clone(), up, reason: reason.clone() }).collect())
    }
}

fn wait(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("{what} ({:.1} s)", t0.elapsed().as_secs_f64());
}

#[test]
fn the_router_channel_serves_zebra() {
    if !is_root() {
        eprintln!("skipping frr_pw_zebra: needs root (network namespaces, FRR daemons)");
        return;
    }
    frr::ensure_frr_installed().unwrap();
    let module = zebra_module();
    let ns = Netns::new("pwch");
    // the PW's stand-in interface, made as the router makes it, and a route to the peer
    let standins = ns.run(|| StandIns::create(&["mpw0".into()])).unwrap();
    assert_eq!(standins.names(), ["mpw0"]);
    ns.veth(("core0", "02:00:00:00:00:01"), ("core1", "02:00:00:00:00:02"), 1500);
    ns.ip(&["addr", "add", "198.18.40.1/24", "dev", "core0"]);

    let dir = tempdir();
    let conf = format!(
        "hostname pwch\nlog file {dir}/zebra.log\ndebug zebra pseudowires\n\
         pseudowire mpw0\n neighbor 198.18.255.2\n mpls label local 1000 remote 2000\n control-word include\nexit\n"
    );
    std::fs::write(format!("{dir}/zebra.conf"), conf).unwrap();
    Command::new("chown").args(["-R", "frr:frr", &dir]).status().unwrap();

    // the router's side, bound in the namespace (the socket stays there)
    let sink = Arc::new(Recorder::default());
    *sink.state.lock().unwrap() = (false, Some("attachment down".into()));
    let listener = ns.run(|| pw_channel::listen(pw_channel::DEFAULT_ADDR)).unwrap();
    let frr_uid = vmpls_sys::cred::user_id("frr").unwrap().expect("user frr");
    // the thread made in the namespace stays there (its peer checks ask that kernel)
    let s2: Arc<dyn PwSink> = sink.clone();
    let status = ns
        .run(move || {
            pw_channel::spawn(s2, listener, vec![0, frr_uid], Duration::from_secs(1), Duration::from_secs(1))
        })
        .unwrap();

    let mut zebra = Command::new("ip");
    zebra.args(["netns", "exec", ns.name(), "/usr/lib/frr/zebra", "-f"]).arg(format!("{dir}/zebra.conf"));
    zebra.args(["-i", &format!("{dir}/zebra.pid"), "--vty_socket", &dir, "-z", &format!("{dir}/zserv.api")]);
    zebra.args(["-P", "0", "-M", &format!("{}:pw=127.0.0.1:2621", module.display())]);
    let mut zebra = Supervised::spawn("zebra", zebra, SignalTarget::Process).unwrap();
    // staticd takes MPLS as on (the module turns it on in zebra) only from a zebra that
    // is up when it connects: started together, it keeps refusing labelled routes
    // ("MPLS not turned on in kernel")
    wait("zebra serves its clients", Duration::from_secs(10), || {
        Path::new(&format!("{dir}/zserv.api")).exists()
    });
    // zebra installs a PW only over a labelled route to its neighbor
    std::fs::write(format!("{dir}/staticd.conf"), "hostname pwch\n").unwrap();
    let mut staticd = Command::new("ip");
    staticd
        .args(["netns", "exec", ns.name(), "/usr/lib/frr/staticd", "-f"])
        .arg(format!("{dir}/staticd.conf"));
    staticd.args([
        "-i",
        &format!("{dir}/staticd.pid"),
        "--vty_socket",
        &dir,
        "-z",
        &format!("{dir}/zserv.api"),
    ]);
    staticd.args(["-P", "0"]);
    let _staticd = Supervised::spawn("staticd", staticd, SignalTarget::Process).unwrap();
    // a labelled route in staticd's file would be refused (staticd reads it before zebra
    // tells it MPLS is on): through vtysh once staticd is up, as vpn-two-pe.sh does
    wait("staticd takes the labelled route", Duration::from_secs(10), || {
        let out = Command::new("ip")
            .args(["netns", "exec", ns.name(), "vtysh", "--vty_socket", &dir, "-c", "configure terminal"])
            .args(["-c", "ip route 198.18.255.2/32 198.18.40.2 label 100"])
            .output()
            .unwrap();
        out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("failed")
    });
    let show = || -> Value {
        let out = Command::new("ip")
            .args(["netns", "exec", ns.name(), "vtysh", "--vty_socket", &dir])
            .args(["-c", "show mpls pseudowires detail json"])
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
    };
    let zebra_status = || -> String {
        show()["pw"]
            .as_array()
            .and_then(|a| a.iter().find(|p| p["interface"] == "mpw0"))
            .and_then(|p| p["Status"].as_str().map(str::to_owned))
            .unwrap_or_default()
    };
    let has = |s: &str| sink.calls.lock().unwrap().iter().any(|c| c == s);

    wait("zebra's static PW reaches the sink", Duration::from_secs(10), || has("replace mpw0 1000 2000"));
    let pw = sink.pws.lock().unwrap()[0].clone();
    assert_eq!(
        pw,
        PwSpec {
            name: "mpw0".into(),
            local_label: 1000,
            remote_label: 2000,
            peer: "198.18.255.2".parse().unwrap(),
            control_word: true,
            pw_type: PwType::Ethernet,
        }
    );
    assert_eq!(sink.calls.lock().unwrap()[0], "sync 0", "the module syncs first (nothing yet)");
    wait("vmpls says down -> zebra shows the PW down", Duration::from_secs(5), || zebra_status() == "Down");
    *sink.state.lock().unwrap() = (true, None);
    wait("vmpls says up -> zebra shows the PW up", Duration::from_secs(5), || zebra_status() == "Up");
    let log = std::fs::read_to_string(format!("{dir}/zebra.log")).unwrap();
    assert!(log.contains("PW mpw0: vmpls says down: attachment down"), "{log}");

    // someone not zebra's user: refused, nothing changes
    let calls_before = sink.calls.lock().unwrap().len();
    let other = Command::new("ip")
        .args(["netns", "exec", ns.name(), "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["/usr/bin/python3", "-c"])
        .arg("import socket,time; s=socket.create_connection(('127.0.0.1',2621)); s.sendall(b'{\"op\":\"sync\",\"pws\":[]}\\n'); time.sleep(0.5)")
        .status()
        .unwrap();
    assert!(other.success());
    wait("a socket of user nobody is refused", Duration::from_secs(5), || {
        status.refused_owner.load(std::sync::atomic::Ordering::Relaxed) == 1
    });
    assert_eq!(sink.calls.lock().unwrap().len(), calls_before, "the refused peer changed something");

    // zebra changes the PW, then removes it
    let vty = |cmds: &[&str]| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns.name(), "vtysh", "--vty_socket", &dir, "-c", "configure terminal"]);
        for x in cmds {
            c.args(["-c", x]);
        }
        assert!(c.status().unwrap().success());
    };
    vty(&["pseudowire mpw0", "mpls label local 1001 remote 2001"]);
    wait("a label change reaches the sink", Duration::from_secs(5), || has("replace mpw0 1001 2001"));
    vty(&["no pseudowire mpw0"]);
    wait("the PW removed in zebra -> removed in the sink", Duration::from_secs(5), || has("del mpw0"));
    // zebra 8.4 may still be freeing the old mpw0 when vtysh enters the new one's node
    // ("Current configuration object was deleted by another process": the rest of the
    // commands go nowhere); a second try then finds the node free.
    let t0 = Instant::now();
    for attempt in 1..=3 {
        vty(&["pseudowire mpw0", "neighbor 198.18.255.2", "mpls label local 1002 remote 2002"]);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !has("replace mpw0 1002 2002") && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        if has("replace mpw0 1002 2002") {
            println!("added again ({:.1} s, try {attempt})", t0.elapsed().as_secs_f64());
            break;
        }
        assert!(attempt < 3, "added again: not within 3 tries of 5 s");
    }

    // zebra gone: its PWs stay for the hold time (1 s here), then are removed
    zebra.stop(Duration::from_secs(5)).unwrap();
    wait("zebra gone -> the channel says so", Duration::from_secs(5), || {
        !status.connected.load(std::sync::atomic::Ordering::Relaxed)
    });
    wait("after the hold time zebra's PWs are removed", Duration::from_secs(5), || {
        sink.calls.lock().unwrap().last().map(String::as_str) == Some("sync 0")
            && sink.pws.lock().unwrap().is_empty()
    });
    assert_eq!(status.bad_lines.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert!(status.status_sent.load(std::sync::atomic::Ordering::Relaxed) >= 2);
    ns.run(|| drop(standins));
    assert!(!ns.ip_output(&["-o", "link", "show"]).contains("mpw0"), "the stand-in removed on drop");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stand_ins_are_made_up_and_only_ours_are_removed() {
    if !is_root() {
        eprintln!("skipping frr_pw_zebra: needs root (a network namespace)");
        return;
    }
    let ns = Netns::new("pwsi");
    ns.ip(&["link", "add", "taken0", "type", "ifb"]);
    let (shown, after) = ns.run(|| {
        let s = StandIns::create(&["mpw0".into(), "taken0".into()]).unwrap();
        assert_eq!(s.names(), ["mpw0"], "an existing interface is not made (nor removed)");
        let shown = Command::new("ip").args(["-o", "link", "show", "mpw0"]).output().unwrap();
        drop(s);
        (String::from_utf8_lossy(&shown.stdout).into_owned(), vmpls_sys::if_nametoindex("mpw0"))
    });
    assert!(shown.contains("mpw0: <") && shown.contains(",UP"), "{shown}");
    assert_eq!(after, None, "removed on drop");
    assert!(ns.ip_output(&["-o", "link", "show", "taken0"]).contains("taken0"));
    let err = ns.run(|| StandIns::create(&["a/b".into()]).unwrap_err());
    assert!(format!("{err:#}").contains("cannot make the interface \"a/b\""), "{err:#}");
}

fn tempdir() -> String {
    let out = Command::new("mktemp").args(["-d", "/tmp/vmpls-pwch.XXXXXX"]).output().unwrap();
    let d = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    Command::new("chmod").args(["755", &d]).status().unwrap();
    d
}
