//! A network namespace of its own for the unit tests that need real interfaces
//! (`vmpls-ports-<pid>-<tag>`): IPv6 off, so the kernel's own chatter (router
//! solicitations, MLD) does not land in the sockets under test; deleted on drop, even on
//! panic. Needs root.

use std::io;
use std::os::fd::AsRawFd;
use std::process::Command;

pub(crate) struct Netns(pub(crate) String);

impl Netns {
    pub(crate) fn new(tag: &str) -> Netns {
        let ns = Netns(format!("vmpls-ports-{}-{tag}", std::process::id()));
        ns.ip(&["netns", "add", &ns.0]);
        let out = Command::new("ip")
            .args(["netns", "exec", &ns.0, "sysctl", "-qw"])
            .args(["net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"])
            .output()
            .expect("run sysctl");
        assert!(out.status.success(), "sysctl: {}", String::from_utf8_lossy(&out.stderr));
        ns
    }

    /// Runs `ip ARGS` (`ip -n NS ARGS` unless `args` starts with "netns").
    pub(crate) fn ip(&self, args: &[&str]) {
        let mut cmd = Command::new("ip");
        if args[0] != "netns" {
            cmd.args(["-n", &self.0]);
        }
        let out = cmd.args(args).output().expect("run ip");
        assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// A veth pair `fa` (MAC `a`) -- `fb` (MAC `b`) with `mtu`, both up.
    pub(crate) fn veth(&self, a: &str, b: &str, mtu: u32) {
        let mtu = mtu.to_string();
        self.ip(&["link", "add", "fa", "address", a, "mtu", &mtu, "type", "veth", "peer", "name", "fb"]);
        self.ip(&["link", "set", "fb", "address", b, "mtu", &mtu]);
        self.ip(&["link", "set", "fa", "up"]);
        self.ip(&["link", "set", "fb", "up"]);
    }

    /// Runs `f` on a thread inside the namespace (sockets opened there stay there).
    pub(crate) fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        std::thread::scope(|s| {
            s.spawn(|| {
                let file = std::fs::File::open(format!("/run/netns/{}", self.0)).expect("open netns");
                // SAFETY: setns(2) on a descriptor we own; it changes only this thread's
                // network namespace.
                let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(r, 0, "setns: {}", io::Error::last_os_error());
                f()
            })
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}
