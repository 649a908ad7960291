//! Booting a guest image in QEMU and talking to it through its serial ports.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::cpio::Archive;
use crate::image::{self, ExtraFile, GuestImage};
use crate::{GuestError, Result, WaitFailure};

/// The line the guest writes on its result channel once it has booted (followed by the
/// kernel release).
pub const BOOTED_MARKER: &str = "VMPLS-GUEST-BOOTED";
/// The line the guest writes when its script ended (followed by ` rc=N`); it then powers
/// off.
pub const DONE_MARKER: &str = "VMPLS-GUEST-DONE";
/// What the script's `fail` helper writes.
pub const FAIL_MARKER: &str = "VMPLS-GUEST-FAIL";

/// How long a KVM boot may take before KVM is judged unusable.
const KVM_PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to wait for QEMU to create a TAP device.
const TAP_TIMEOUT: Duration = Duration::from_secs(10);

/// Which accelerator runs the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    /// KVM if a probe boot with it works quickly (checked once per cache and host
    /// kernel), else TCG. `$VMPLS_GUEST_ACCEL` (`tcg`, `kvm`, `auto`) overrides it.
    Auto,
    /// Software emulation: `-accel tcg,thread=multi -cpu max`. Always works, slowly.
    Tcg,
    /// `-accel kvm -cpu max`.
    Kvm,
}

/// A guest network card (virtio-net-pci), `eth0`, `eth1`, ... in the guest in the order
/// given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nic {
    /// A TAP device that QEMU creates in its network namespace
    /// (`-netdev tap,ifname=...,script=no,downscript=no,vhost=off`). [`Guest::boot`]
    /// waits for it to appear and brings it up; it goes away when QEMU exits.
    Tap {
        /// The TAP's name on the host.
        ifname: String,
        /// The guest's MAC; `None`: `52:54:00:xx:yy:zz` unique within this process.
        mac: Option<[u8; 6]>,
    },
    /// A vhost-user socket that a backend (vmpls) listens on
    /// (`-chardev socket,path=... -netdev vhost-user`). Guest memory is then shared
    /// (`memory-backend-memfd,share=on`).
    VhostUser {
        /// The Unix socket path.
        socket: PathBuf,
        /// The guest's MAC; see [`Nic::Tap`].
        mac: Option<[u8; 6]>,
    },
}

impl Nic {
    /// A TAP NIC with a generated MAC.
    pub fn tap(ifname: &str) -> Nic {
        Nic::Tap { ifname: ifname.to_string(), mac: None }
    }

    /// A vhost-user NIC with a generated MAC.
    pub fn vhost_user(socket: impl Into<PathBuf>) -> Nic {
        Nic::VhostUser { socket: socket.into(), mac: None }
    }

    fn mac(&self) -> Option<[u8; 6]> {
        match self {
            Nic::Tap { mac, .. } | Nic::VhostUser { mac, .. } => *mac,
        }
    }
}

/// How to boot a guest.
#[derive(Debug, Clone)]
pub struct GuestConfig {
    /// A name for logs and errors.
    pub name: String,
    /// The NICs, in guest order.
    pub nics: Vec<Nic>,
    /// A shell script (busybox `sh`) the guest runs after boot; see the crate
    /// documentation for its helpers.
    pub script: String,
    /// The network namespace QEMU runs in (its TAPs are created there); `None`: the
    /// caller's.
    pub netns: Option<String>,
    /// Guest RAM in MiB.
    pub memory_mib: u32,
    /// Virtual CPUs.
    pub cpus: u32,
    /// The accelerator.
    pub accel: Accel,
    /// How long the script may run inside the guest before it is killed there.
    pub script_timeout: Duration,
    /// Extra kernel command-line parameters.
    pub append: String,
    /// Host files to add to the guest (e.g. the `vmpls` binary and its libraries).
    pub files: Vec<ExtraFile>,
}

impl Default for GuestConfig {
    fn default() -> Self {
        GuestConfig {
            name: "guest".into(),
            nics: Vec::new(),
            script: String::new(),
            netns: None,
            memory_mib: 512,
            cpus: 1,
            accel: Accel::Auto,
            script_timeout: Duration::from_secs(300),
            append: String::new(),
            files: Vec::new(),
        }
    }
}

/// A running QEMU guest. Dropping it kills QEMU and removes its run directory.
#[derive(Debug)]
pub struct Guest {
    name: String,
    child: Option<Child>,
    exit: Option<ExitStatus>,
    run_dir: PathBuf,
    console: PathBuf,
    results: PathBuf,
    stderr: PathBuf,
    accel: Accel,
    macs: Vec<[u8; 6]>,
}

static BOOTS: AtomicU32 = AtomicU32::new(0);

fn mac_string(mac: [u8; 6]) -> String {
    vmpls_wire::ethernet::Address(mac).to_string()
}

/// Reads a file that may not exist yet as text.
fn read_lossy(path: &Path) -> String {
    fs::read(path).map(|b| String::from_utf8_lossy(&b).replace('\r', "")).unwrap_or_default()
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The `-device` argument of NIC `i`. `romfile=`: no iPXE option ROM, which costs
/// seconds of boot under TCG. vhost-user NICs get `vectors=0` (legacy interrupts, no
/// MSI-X): QEMU 7.2 under TCG crashes in `vhost_net_start` (`msix_set_vector_notifiers`)
/// starting a vhost-user device that uses MSI-X.
fn device_arg(i: usize, nic: &Nic, mac: [u8; 6]) -> String {
    let mut arg = format!("virtio-net-pci,netdev=n{i},mac={},romfile=", mac_string(mac));
    if matches!(nic, Nic::VhostUser { .. }) {
        arg.push_str(",vectors=0");
    }
    arg
}

fn qemu_binary() -> Result<PathBuf> {
    image::find_program("qemu-system-x86_64").map_err(|_| GuestError::MissingTool {
        tool: "qemu-system-x86_64".into(),
        package: "qemu-system-x86",
    })
}

/// Whether KVM boots this image quickly: probed once per cache directory, host kernel and
/// QEMU, and remembered in `CACHE/kvm-probe-*`.
pub fn kvm_usable(image: &GuestImage) -> bool {
    static VERDICT: OnceLock<Mutex<Option<bool>>> = OnceLock::new();
    let cell = VERDICT.get_or_init(|| Mutex::new(None));
    let mut v = cell.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(known) = *v {
        return known;
    }
    let known = probe_kvm(image);
    *v = Some(known);
    known
}

fn probe_kvm(image: &GuestImage) -> bool {
    if !Path::new("/dev/kvm").exists() {
        return false;
    }
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let qemu = qemu_binary().ok().and_then(|q| fs::metadata(q).ok()).map(|m| m.len()).unwrap_or(0);
    let stamp = image.cache_dir.join(format!("kvm-probe-{}-{}-{qemu}", release.trim(), image.kernel_version));
    if let Ok(s) = fs::read_to_string(&stamp) {
        return s.trim() == "kvm";
    }
    let config = GuestConfig {
        name: "kvm-probe".into(),
        accel: Accel::Kvm,
        memory_mib: 256,
        script: "result VMPLS-KVM-OK".into(),
        ..GuestConfig::default()
    };
    let ok = match Guest::boot(image, config) {
        Ok(mut g) => g.wait_for("VMPLS-KVM-OK", KVM_PROBE_TIMEOUT).is_ok(),
        Err(_) => false,
    };
    tracing::info!(kvm = ok, "probed KVM for guests");
    let _ = fs::write(&stamp, if ok { "kvm" } else { "tcg" });
    ok
}

fn resolve_accel(image: &GuestImage, accel: Accel) -> Accel {
    let accel = match std::env::var("VMPLS_GUEST_ACCEL").as_deref() {
        Ok("tcg") => Accel::Tcg,
        Ok("kvm") => Accel::Kvm,
        Ok("auto") => Accel::Auto,
        _ => accel,
    };
    match accel {
        Accel::Auto if kvm_usable(image) => Accel::Kvm,
        Accel::Auto => Accel::Tcg,
        a => a,
    }
}

/// Runs `ip ARGS` in `netns` (or here).
fn ip_in(netns: Option<&str>, args: &[&str]) -> Result<String> {
    let mut cmd = Command::new("ip");
    if let Some(ns) = netns {
        cmd.args(["-n", ns]);
    }
    cmd.args(args);
    image::run(&mut cmd, "iproute2")
}

impl Guest {
    /// Boots `image` with `config`: writes the per-boot files (the script and any extra
    /// files, as a second cpio archive after the image's initramfs) into a run directory,
    /// starts QEMU (in `config.netns` if given), and for TAP NICs waits until QEMU has
    /// created them and brings them up. Returns without waiting for the guest to boot:
    /// use [`Guest::wait_for`].
    ///
    /// QEMU gets `PR_SET_PDEATHSIG`: it dies with the thread that called `boot`, so call
    /// it from a thread that lives as long as the guest is needed.
    pub fn boot(image: &GuestImage, config: GuestConfig) -> Result<Guest> {
        if config.memory_mib < 64 || config.cpus == 0 {
            return Err(GuestError::Config(format!(
                "{} MiB and {} CPUs is too little",
                config.memory_mib, config.cpus
            )));
        }
        let accel = resolve_accel(image, config.accel);
        let n = BOOTS.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let safe_name: String = config
            .name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
            .collect();
        let run_dir = image.cache_dir.join("runs").join(format!("{safe_name}-{pid}-{n}"));
        let _ = fs::remove_dir_all(&run_dir);
        fs::create_dir_all(&run_dir)
            .map_err(|e| GuestError::io(format!("creating {}", run_dir.display()), e))?;

        // The initramfs for this boot: the image's, then the script and extra files.
        let mut overlay = Archive::new();
        let mut seen = BTreeSet::new();
        overlay.file("vmpls-run/script.sh", 0o755, config.script.as_bytes());
        for f in &config.files {
            image::add_host_file(&mut overlay, &mut seen, f, None)?;
        }
        let mut initrd = image::read(&image.initramfs)?;
        initrd.extend_from_slice(&overlay.finish());
        let initrd_path = run_dir.join("initramfs.cpio");
        fs::write(&initrd_path, &initrd)
            .map_err(|e| GuestError::io(format!("writing {}", initrd_path.display()), e))?;
        drop(initrd);

        let console = run_dir.join("console.log");
        let results = run_dir.join("results.log");
        let stderr = run_dir.join("qemu.stderr");
        let mut cmd = Command::new(qemu_binary()?);
        match accel {
            Accel::Kvm => cmd.args(["-accel", "kvm", "-cpu", "max"]),
            _ => cmd.args(["-accel", "tcg,thread=multi", "-cpu", "max"]),
        };
        let mem = format!("{}M", config.memory_mib);
        cmd.args(["-m", &mem, "-smp", &config.cpus.to_string()])
            .args(["-nodefaults", "-no-user-config", "-nographic", "-no-reboot"])
            .arg("-kernel")
            .arg(&image.kernel)
            .arg("-initrd")
            .arg(&initrd_path)
            .arg("-serial")
            .arg(format!("file:{}", console.display()))
            .arg("-serial")
            .arg(format!("file:{}", results.display()));
        let append = format!(
            "console=ttyS0 panic=-1 quiet mitigations=off vmpls.timeout={} {}",
            config.script_timeout.as_secs().max(1),
            config.append
        );
        cmd.arg("-append").arg(append.trim());

        let mut macs = Vec::new();
        let needs_shared_memory = config.nics.iter().any(|n| matches!(n, Nic::VhostUser { .. }));
        if needs_shared_memory {
            cmd.arg("-object").arg(format!("memory-backend-memfd,id=mem,size={mem},share=on"));
            cmd.args(["-numa", "node,memdev=mem"]);
        }
        for (i, nic) in config.nics.iter().enumerate() {
            let mac = nic.mac().unwrap_or([0x52, 0x54, 0x00, (pid & 0xff) as u8, (n & 0xff) as u8, i as u8]);
            macs.push(mac);
            match nic {
                Nic::Tap { ifname, .. } => {
                    cmd.arg("-netdev")
                        .arg(format!("tap,id=n{i},ifname={ifname},script=no,downscript=no,vhost=off"));
                }
                Nic::VhostUser { socket, .. } => {
                    cmd.arg("-chardev").arg(format!("socket,id=c{i},path={}", socket.display()));
                    cmd.arg("-netdev").arg(format!("vhost-user,id=n{i},chardev=c{i}"));
                }
            }
            cmd.arg("-device").arg(device_arg(i, nic, mac));
        }

        if let Some(ns) = &config.netns {
            vmpls_lab::netns::command_in_netns(ns, &mut cmd)
                .map_err(|e| GuestError::Config(format!("network namespace {ns}: {e:#}")))?;
        }
        let stderr_file = fs::File::create(&stderr)
            .map_err(|e| GuestError::io(format!("creating {}", stderr.display()), e))?;
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(stderr_file);
        vmpls_sys::process::kill_with_parent(&mut cmd);
        tracing::debug!(guest = config.name, ?accel, "starting QEMU: {cmd:?}");
        let child =
            cmd.spawn().map_err(|e| GuestError::io(format!("starting {:?}", cmd.get_program()), e))?;
        let mut guest = Guest {
            name: config.name.clone(),
            child: Some(child),
            exit: None,
            run_dir,
            console,
            results,
            stderr,
            accel,
            macs,
        };
        for nic in &config.nics {
            if let Nic::Tap { ifname, .. } = nic {
                guest.bring_up_tap(config.netns.as_deref(), ifname)?;
            }
        }
        Ok(guest)
    }

    fn bring_up_tap(&mut self, netns: Option<&str>, ifname: &str) -> Result<()> {
        let start = Instant::now();
        loop {
            if ip_in(netns, &["link", "set", "dev", ifname, "up"]).is_ok() {
                return Ok(());
            }
            if start.elapsed() > TAP_TIMEOUT || self.poll_exit().is_some() {
                return Err(GuestError::TapMissing {
                    ifname: ifname.to_string(),
                    waited_ms: start.elapsed().as_millis(),
                    console: format!(
                        "{}\nQEMU stderr:\n{}",
                        tail(&self.output(), 20),
                        read_lossy(&self.stderr)
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The guest's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The accelerator it runs on.
    pub fn accel(&self) -> Accel {
        self.accel
    }

    /// The MACs of its NICs, in order.
    pub fn macs(&self) -> &[[u8; 6]] {
        &self.macs
    }

    /// QEMU's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// The console (`ttyS0`: kernel messages and the script's output) so far.
    pub fn output(&self) -> String {
        read_lossy(&self.console)
    }

    /// The result channel (`ttyS1`) so far.
    pub fn results(&self) -> String {
        read_lossy(&self.results)
    }

    /// QEMU's exit status, if it has exited.
    fn poll_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none()
            && let Some(c) = self.child.as_mut()
            && let Ok(Some(status)) = c.try_wait()
        {
            self.exit = Some(status);
            self.child = None;
        }
        self.exit
    }

    /// Waits until a line containing `marker` appears on the result channel and returns
    /// that line. Fails after `timeout`, when QEMU exits first, or when the script
    /// reports a failure ([`FAIL_MARKER`]) or ends without the marker.
    pub fn wait_for(&mut self, marker: &str, timeout: Duration) -> Result<String> {
        let start = Instant::now();
        loop {
            let results = self.results();
            if let Some(line) = results.lines().find(|l| l.contains(marker)) {
                return Ok(line.to_string());
            }
            let ended = results.lines().any(|l| l.starts_with(FAIL_MARKER) || l.starts_with(DONE_MARKER));
            let exited = self.poll_exit();
            if ended || exited.is_some() {
                // The file may have got the last line just now.
                let results = self.results();
                if let Some(line) = results.lines().find(|l| l.contains(marker)) {
                    return Ok(line.to_string());
                }
                let status = match exited {
                    Some(s) => format!("QEMU exited ({s})"),
                    None => "the script ended".to_string(),
                };
                return Err(GuestError::Exited(Box::new(WaitFailure {
                    guest: self.name.clone(),
                    marker: marker.to_string(),
                    waited: start.elapsed(),
                    status: Some(status),
                    results,
                    console: tail(&self.output(), 40),
                    stderr: read_lossy(&self.stderr),
                })));
            }
            if start.elapsed() >= timeout {
                return Err(GuestError::Timeout(Box::new(WaitFailure {
                    guest: self.name.clone(),
                    marker: marker.to_string(),
                    waited: start.elapsed(),
                    status: None,
                    results,
                    console: tail(&self.output(), 40),
                    stderr: read_lossy(&self.stderr),
                })));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the script has ended and returns its exit status (the `rc=N` of
    /// [`DONE_MARKER`]).
    pub fn wait_done(&mut self, timeout: Duration) -> Result<i32> {
        let line = self.wait_for(DONE_MARKER, timeout)?;
        line.split("rc=")
            .nth(1)
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| GuestError::Config(format!("malformed line {line:?}")))
    }

    /// Kills QEMU (if it still runs) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            if let Ok(status) = c.wait() {
                self.exit = Some(status);
            }
        }
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        self.kill();
        if std::env::var_os("VMPLS_GUEST_KEEP_RUNS").is_none() {
            let _ = fs::remove_dir_all(&self.run_dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
        assert_eq!(tail("", 5), "");
    }

    #[test]
    fn vhost_user_nics_use_legacy_interrupts() {
        let mac = [0x52, 0x54, 0, 1, 2, 3];
        assert_eq!(
            device_arg(1, &Nic::vhost_user("/tmp/g.sock"), mac),
            "virtio-net-pci,netdev=n1,mac=52:54:00:01:02:03,romfile=,vectors=0"
        );
        assert_eq!(
            device_arg(0, &Nic::tap("t0"), mac),
            "virtio-net-pci,netdev=n0,mac=52:54:00:01:02:03,romfile="
        );
    }

    #[test]
    fn macs_print_like_qemu_wants_them() {
        assert_eq!(mac_string([0x52, 0x54, 0, 0xab, 1, 2]), "52:54:00:ab:01:02");
    }
}
