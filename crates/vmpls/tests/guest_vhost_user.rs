//! Two customer guests on vhost-user ports of two vmpls PEs, with a vmpls P between the
//! PEs on veth links:
//!
//! ```text
//!  guest ce1 ==vhost-user== pe1 (netns) --veth-- p (netns) --veth-- pe2 (netns) ==vhost-user== guest ce2
//!  198.18.1.2     198.18.1.1 | 198.18.10.1   .10.2 | .20.1   198.18.20.2 | 198.18.2.1      198.18.2.2
//!  2001:db8:1::2                                                                          2001:db8:2::2
//! ```
//!
//! One `vmpls run` process per router; the guests' virtio-net devices are the PEs'
//! vhost-user ports (QEMU connects to the sockets the PEs listen on). pe1 pushes 1002, p
//! swaps it to 2002, pe2 pops; back 1001 -> 2001 -> pop. Checked from inside the guests:
//! ping both ways over IPv4 and IPv6, and a TCP transfer of a random file both ways over
//! IPv4 and IPv6 (busybox `nc`), each received file's SHA-256 compared with the sent
//! one's; from the routers' counters: the labels were pushed, swapped and popped.
//! Needs root and QEMU (TCG is enough) and the guest image (`vmpls-guest`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vmpls_guest::{Guest, GuestCache, GuestConfig, GuestError, GuestImage, Nic};
use vmpls_lab::stats::RouterStats;
use vmpls_lab::topology::{HostOptions, Topology};

/// Size of the file each guest sends over each address family.
const FILE_BLOCKS: u32 = 64; // of 64 KiB: 4 MiB

/// One customer's side: its addresses, its PE's, and the other customer's.
struct Customer {
    name: &'static str,
    v4: &'static str,
    v6: &'static str,
    gw4: &'static str,
    gw6: &'static str,
    peer4: &'static str,
    peer6: &'static str,
}

const CE1: Customer = Customer {
    name: "ce1",
    v4: "198.18.1.2/24",
    v6: "2001:db8:1::2/64",
    gw4: "198.18.1.1",
    gw6: "2001:db8:1::1",
    peer4: "198.18.2.2",
    peer6: "2001:db8:2::2",
};

const CE2: Customer = Customer {
    name: "ce2",
    v4: "198.18.2.2/24",
    v6: "2001:db8:2::2/64",
    gw4: "198.18.2.1",
    gw6: "2001:db8:2::1",
    peer4: "198.18.1.2",
    peer6: "2001:db8:1::2",
};

fn pe1_config(socket: &Path) -> String {
    format!(
        r#"
[router]
fast-path = "off"
name = "pe1"
addresses = ["198.18.255.1", "2001:db8:ff::1"]

[[port]]
name = "ce1"
kind = "vhost-user"
socket = "{}"
addresses = ["198.18.1.1/24", "2001:db8:1::1/64"]

[[port]]
name = "core"
interface = "pe1-p"
addresses = ["198.18.10.1/24", "2001:db8:10::1/64"]

[[route]]
prefix = "198.18.2.0/24"
push = [1002]
via = "198.18.10.2"

[[route]]
prefix = "2001:db8:2::/64"
push = [1002]
via = "2001:db8:10::2"

[[label]]
in = 2001
action = "pop"
"#,
        socket.display()
    )
}

const P_CONFIG: &str = r#"
[router]
fast-path = "off"
name = "p"
addresses = ["198.18.255.2", "2001:db8:ff::2"]

[[port]]
name = "west"
interface = "p-pe1"
addresses = ["198.18.10.2/24", "2001:db8:10::2/64"]

[[port]]
name = "east"
interface = "p-pe2"
addresses = ["198.18.20.1/24", "2001:db8:20::1/64"]

[[label]]
in = 1002
action = "swap"
out = [2002]
via = "198.18.20.2"

[[label]]
in = 1001
action = "swap"
out = [2001]
via = "198.18.10.1"
"#;

fn pe2_config(socket: &Path) -> String {
    format!(
        r#"
[router]
fast-path = "off"
name = "pe2"
addresses = ["198.18.255.3", "2001:db8:ff::3"]

[[port]]
name = "core"
interface = "pe2-p"
addresses = ["198.18.20.2/24", "2001:db8:20::2/64"]

[[port]]
name = "ce2"
kind = "vhost-user"
socket = "{}"
addresses = ["198.18.2.1/24", "2001:db8:2::1/64"]

[[label]]
in = 2002
action = "pop"

[[route]]
prefix = "198.18.1.0/24"
push = [1001]
via = "198.18.20.1"

[[route]]
prefix = "2001:db8:1::/64"
push = [1001]
via = "2001:db8:20::1"
"#,
        socket.display()
    )
}

/// The guest's script: addresses and default routes, listeners for the peer's files
/// (port 5004 over IPv4, 5006 over IPv6), pings to the peer, the same random file sent
/// to the peer over both families, then the received files' digests on the result
/// channel. The listeners' standard input is a FIFO held open, so busybox `nc` does not
/// quit on end of input; it ends when the sender closes.
fn script(c: &Customer) -> String {
    let Customer { v4, v6, gw4, gw6, peer4, peer6, .. } = c;
    format!(
        r#"
ip link set eth0 up || fail link
ip addr add {v4} dev eth0 || fail addr4
ip -6 addr add {v6} dev eth0 nodad || fail addr6
ip route add default via {gw4} || fail route4
ip -6 route add default via {gw6} || fail route6
dd if=/dev/urandom of=/tmp/out bs=65536 count={FILE_BLOCKS} 2>/dev/null || fail dd
result "SENT $(sha256sum < /tmp/out | cut -d' ' -f1) $(wc -c < /tmp/out)"
mkfifo /tmp/hold && exec 3<>/tmp/hold || fail fifo
nc -l -p 5004 <&3 > /tmp/in4 &
l4=$!
nc -l -p 5006 <&3 > /tmp/in6 &
l6=$!
retry 60 ping -c 1 -W 1 {peer4} || fail "no echo reply from {peer4} in 60 s"
ping -c 3 -W 3 {peer4} > /tmp/ping 2>&1 || fail "ping {peer4}: $(cat /tmp/ping)"
result PING4-OK
retry 30 ping6 -c 1 -W 1 {peer6} || fail "no echo reply from {peer6} in 30 s"
ping6 -c 3 -W 3 {peer6} > /tmp/ping 2>&1 || fail "ping6 {peer6}: $(cat /tmp/ping)"
result PING6-OK
retry 30 sh -c 'nc {peer4} 5004 < /tmp/out' || fail "sending to {peer4}:5004"
result SENT4
retry 30 sh -c 'nc {peer6} 5006 < /tmp/out' || fail "sending to [{peer6}]:5006"
result SENT6
wait $l4
result "RECV4 $(sha256sum < /tmp/in4 | cut -d' ' -f1) $(wc -c < /tmp/in4)"
wait $l6
result "RECV6 $(sha256sum < /tmp/in6 | cut -d' ' -f1) $(wc -c < /tmp/in6)"
"#
    )
}

/// The value after `key ` on the guest's result channel.
fn field(guest: &Guest, key: &str) -> Option<String> {
    guest.results().lines().find_map(|l| l.strip_prefix(&format!("{key} ")).map(|v| v.trim().to_string()))
}

fn start_router(topo: &mut Topology, work: &Path, name: &str, config: &str) -> (PathBuf, PathBuf) {
    let path = work.join(format!("{name}.toml"));
    std::fs::write(&path, config).unwrap();
    let log = work.join(format!("{name}.log"));
    let stats = work.join(format!("{name}.stats.json"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vmpls"));
    cmd.arg("run")
        .arg("--config")
        .arg(&path)
        .arg("--socket")
        .arg(work.join(format!("{name}.ctl")))
        .arg("--stats-file")
        .arg(&stats)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    topo.spawn(name, name, cmd, Some(log.clone())).unwrap();
    (log, stats)
}

/// Removes the work directory on drop (after the topology and guests are gone).
struct WorkDir(PathBuf);

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn guests_on_vhost_user_talk_through_the_lsp_both_ways_over_ipv4_and_ipv6() {
    let started = Instant::now();
    let image = GuestImage::build(&GuestCache::default_location()).expect("guest image");
    let work = WorkDir(std::env::temp_dir().join(format!("vmpls-vhu-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&work.0);
    std::fs::create_dir_all(&work.0).unwrap();

    let mut topo = Topology::new();
    for h in ["pe1", "p", "pe2"] {
        topo.add_host_with(h, HostOptions { ipv6: false }).unwrap();
    }
    topo.add_link("pe1", "pe1-p", "p", "p-pe1", 65535).unwrap();
    topo.add_link("p", "p-pe2", "pe2", "pe2-p", 65535).unwrap();
    let sockets = [work.0.join("pe1-ce1.sock"), work.0.join("pe2-ce2.sock")];
    let routers =
        [("pe1", pe1_config(&sockets[0])), ("p", P_CONFIG.to_string()), ("pe2", pe2_config(&sockets[1]))];
    let mut logs = Vec::new();
    let mut stats = BTreeMap::new();
    for (name, config) in &routers {
        let (log, s) = start_router(&mut topo, &work.0, name, config);
        logs.push(log);
        stats.insert(*name, s);
    }
    let logs_text = || {
        logs.iter()
            .map(|l| format!("--- {}:\n{}", l.display(), Topology::log_tail(l, 20)))
            .collect::<Vec<_>>()
            .join("\n")
    };
    // QEMU's chardev connects once at start: the PEs must be listening first.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sockets.iter().all(|s| s.exists()) {
        assert!(Instant::now() < deadline, "the PEs' vhost-user sockets did not appear\n{}", logs_text());
        assert!(topo.exited_child().is_none(), "a router exited\n{}", logs_text());
        std::thread::sleep(Duration::from_millis(50));
    }

    let mut guests: Vec<Guest> = [(&CE1, &sockets[0]), (&CE2, &sockets[1])]
        .into_iter()
        .map(|(c, socket)| {
            Guest::boot(
                &image,
                GuestConfig {
                    name: c.name.into(),
                    nics: vec![Nic::vhost_user(socket)],
                    script: script(c),
                    script_timeout: Duration::from_secs(150),
                    ..GuestConfig::default()
                },
            )
            .unwrap_or_else(|e| panic!("booting {}: {e}", c.name))
        })
        .collect();
    let booted = Instant::now();

    // Both scripts end (or one fails); poll both so a failure in either shows at once.
    let deadline = Instant::now() + Duration::from_secs(170);
    let mut done = [false, false];
    while !done.iter().all(|d| *d) {
        for (i, g) in guests.iter_mut().enumerate() {
            if done[i] {
                continue;
            }
            match g.wait_done(Duration::from_millis(100)) {
                Ok(0) => done[i] = true,
                Ok(rc) => panic!("{}: script exited with {rc}\n{}\n{}", g.name(), g.results(), logs_text()),
                Err(GuestError::Timeout(_)) => {}
                Err(e) => panic!("{e}\n{}", logs_text()),
            }
        }
        assert!(
            Instant::now() < deadline,
            "guests did not finish:\n{}\n{}\n{}",
            guests[0].results(),
            guests[1].results(),
            logs_text()
        );
        assert!(topo.exited_child().is_none(), "a router exited\n{}", logs_text());
    }
    let guest_time = booted.elapsed();

    for (from, to) in [(0, 1), (1, 0)] {
        let sent = field(&guests[from], "SENT").expect("SENT line");
        let expected_len = format!("{}", u64::from(FILE_BLOCKS) * 65536);
        assert!(sent.ends_with(&expected_len), "{}: sent {sent}", guests[from].name());
        for family in ["RECV4", "RECV6"] {
            let got = field(&guests[to], family)
                .unwrap_or_else(|| panic!("{family} line:\n{}", guests[to].results()));
            assert_eq!(
                got,
                sent,
                "{} -> {} ({family}): received digest and length differ from the sent file's",
                guests[from].name(),
                guests[to].name()
            );
        }
        for ok in ["PING4-OK", "PING6-OK"] {
            assert!(
                guests[from].results().lines().any(|l| l == ok),
                "{}: {}",
                guests[from].name(),
                guests[from].results()
            );
        }
    }

    // The traffic took the LSP: labels pushed at both PEs, swapped at p, popped at both
    // PEs. The routers write their counters every second and at exit.
    topo.stop_all(Duration::from_secs(3)).unwrap();
    let read = |name: &str| RouterStats::read(&stats[name]).unwrap_or_else(|e| panic!("{name} stats: {e:#}"));
    let (pe1, p, pe2) = (read("pe1"), read("p"), read("pe2"));
    // Two files each way, each at least one frame per 64 KiB.
    let min = 2 * u64::from(FILE_BLOCKS);
    for (name, s, event) in [
        ("pe1", &pe1, "label_push"),
        ("pe2", &pe2, "label_push"),
        ("p", &p, "label_swap"),
        ("pe1", &pe1, "label_pop"),
        ("pe2", &pe2, "label_pop"),
    ] {
        assert!(
            s.event(event) >= min,
            "{name}: {event} = {} (< {min}); events {:?}",
            s.event(event),
            s.events
        );
    }
    eprintln!(
        "vhost-user guests: pings and 4 x {} MiB content-checked; guests ran {:?}, {:?} in all",
        FILE_BLOCKS / 16,
        guest_time,
        started.elapsed()
    );
    drop(guests);
    topo.cleanup().unwrap();
}
