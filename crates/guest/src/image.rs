//! The guest image: a Debian kernel and a busybox initramfs, built once into a cache
//! directory and reused.
//!
//! Steps (each needs only Debian tools, no network but the package mirror):
//! 1. the kernel package: the one the `linux-image-amd64` metapackage depends on
//!    (`apt-cache depends`), or `$VMPLS_GUEST_KERNEL_PACKAGE`; fetched with
//!    `apt-get download` into `CACHE/debs/` and kept there;
//! 2. unpacked with `dpkg -x` into a scratch directory, `depmod -b`, and the modules the
//!    guest needs (with their dependencies, from `modprobe --show-depends`) picked out;
//! 3. an initramfs (`newc` cpio, written here) with static busybox, the `/init` script,
//!    those modules, and host programs (`ip`, `iperf3`, `ethtool`) with the shared
//!    libraries `ldd` lists for them;
//! 4. `vmlinux` (unpacked from the `bzImage`, see [`GuestImage::kernel`]) and
//!    `initramfs.cpio` go into `CACHE/images/<package>-<hash>/`, where the
//!    hash covers every input (package, module list, init script, and the path, size and
//!    modification time of busybox, the programs and their libraries). The scratch directory is removed.
//!
//! A lock file (`CACHE/lock`, `flock`) serialises builds of concurrent test processes.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cpio::Archive;
use crate::{GuestError, Result};

/// Modules loaded at boot, in this order (dependencies are added before each).
pub const DEFAULT_MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_net",
    "veth",
    "dummy",
    "mpls_router",
    "mpls_iptunnel",
    // TC's clsact qdisc and BPF classifier: vmpls's fast path attaches through them on
    // kernels before tcx (6.6), such as the guest's.
    "sch_ingress",
    "cls_bpf",
    // vmpls's push chain (TCP super-frames pushed whole, cut by the kernel's MPLS GSO):
    // the fw classifier, the MPLS action, MPLS GSO.
    "cls_fw",
    "act_mpls",
    "mpls_gso",
];

/// Host programs copied into the guest with their libraries.
pub const DEFAULT_PROGRAMS: &[&str] = &["ip", "iperf3", "ethtool"];

/// The metapackage whose dependency names the kernel package.
const KERNEL_METAPACKAGE: &str = "linux-image-amd64";

/// Bumped whenever the layout of the image changes, so old cache entries are not reused.
const FORMAT: &str = "vmpls-guest-image-2";

/// Where the guest's helper files live inside the initramfs.
pub(crate) const GUEST_LIB: &str = "/etc/vmpls-guest/lib.sh";

/// The guest's `/init`. Kernel parameters it reads: `vmpls.timeout=SECONDS` (how long the
/// test script may run). It loads the modules, runs `/vmpls-run/script.sh` (added per boot)
/// with the helpers of [`GUEST_LIB`] and reports on the second serial port (`ttyS1`).
const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox mkdir -p /bin /sbin /usr/bin /usr/sbin /proc /sys /dev /tmp /run /var/run
/bin/busybox --install -s /bin
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
stty -F /dev/ttyS1 raw -echo 2>/dev/null
echo "VMPLS-GUEST-BOOTED $(uname -r)" > /dev/ttyS1
while read -r m; do
    insmod "/lib/modules/vmpls/$m" || echo "vmpls-guest: insmod $m failed"
done < /etc/vmpls-guest/modules
ip link set lo up
timeout=600
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        vmpls.timeout=*) timeout="${arg#vmpls.timeout=}" ;;
    esac
done
rc=0
if [ -f /vmpls-run/script.sh ]; then
    echo "VMPLS-GUEST-SCRIPT-START" > /dev/ttyS1
    timeout -s KILL "$timeout" sh -c ". /etc/vmpls-guest/lib.sh; . /vmpls-run/script.sh" < /dev/null
    rc=$?
fi
echo "VMPLS-GUEST-DONE rc=$rc" > /dev/ttyS1
sync
poweroff -f
"#;

/// Helpers a guest script can call (it is sourced before the script).
const LIB: &str = r#"# vmpls-guest helpers, sourced before the test script.
# result TEXT...: one line on the result channel (ttyS1).
result() { echo "$*" > /dev/ttyS1; }
# fail TEXT...: report and stop the script with status 1.
fail() { result "VMPLS-GUEST-FAIL $*"; exit 1; }
# retry SECONDS CMD...: run CMD every 0.2 s until it succeeds or SECONDS pass.
retry() {
    _t="$1"; shift
    _end=$(( $(date +%s) + _t ))
    while ! "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -ge "$_end" ] && return 1
        usleep 200000
    done
    return 0
}
"#;

/// The guest's `lib.sh`: [`LIB`] plus a function per host program, so that busybox's
/// shell (built with `FEATURE_SH_STANDALONE`: it runs its own applets before anything in
/// `PATH`) runs the host's `ip`, not busybox's, which cannot configure MPLS.
fn lib_sh(programs: &[PathBuf]) -> String {
    let mut s = LIB.to_string();
    for p in programs {
        if let Some(name) = p.file_name().and_then(|n| n.to_str()) {
            s.push_str(&format!("{name}() {{ {} \"$@\"; }}\n", p.display()));
        }
    }
    s
}

/// The uncompressed kernel (an ELF `vmlinux`) inside a `bzImage`, found by the magic of
/// its compressor and unpacked with the host's tool. QEMU boots it directly through its
/// PVH entry point, which under TCG saves the 10 to 15 s the kernel takes to unpack
/// itself. `None` when no known payload unpacks to an ELF file.
fn extract_vmlinux(bzimage: &[u8]) -> Option<Vec<u8>> {
    const MAGICS: &[(&[u8], &str, &[&str])] = &[
        (b"\xfd7zXZ\x00", "xz", &["-dc", "--single-stream"]),
        (b"\x28\xb5\x2f\xfd", "zstd", &["-dc"]),
        (b"\x1f\x8b\x08", "gzip", &["-dc"]),
    ];
    for (magic, tool, args) in MAGICS {
        let mut from = 0;
        while let Some(i) = bzimage[from..].windows(magic.len()).position(|w| w == *magic) {
            let at = from + i;
            from = at + 1;
            let Ok(mut child) = Command::new(tool)
                .args(*args)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
            else {
                break;
            };
            let mut stdin = child.stdin.take()?;
            let payload = bzimage[at..].to_vec();
            let writer = std::thread::spawn(move || {
                use std::io::Write;
                // The tool may stop reading at the end of the stream: ignore EPIPE.
                let _ = stdin.write_all(&payload);
            });
            let out = child.wait_with_output().ok()?;
            let _ = writer.join();
            if out.stdout.starts_with(b"\x7fELF") {
                return Some(out.stdout);
            }
        }
    }
    None
}

/// The cache directory that guest images are built into.
#[derive(Debug, Clone)]
pub struct GuestCache {
    dir: PathBuf,
}

impl GuestCache {
    /// The default cache directory: `$VMPLS_GUEST_CACHE`, else `target/guest-cache/` in
    /// the workspace this crate was built from.
    pub fn default_dir() -> PathBuf {
        if let Some(dir) = std::env::var_os("VMPLS_GUEST_CACHE") {
            return PathBuf::from(dir);
        }
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/guest-cache").components().collect()
    }

    /// The cache in [`GuestCache::default_dir`].
    pub fn default_location() -> GuestCache {
        GuestCache::new(GuestCache::default_dir())
    }

    /// A cache in `dir` (created when needed).
    pub fn new(dir: impl Into<PathBuf>) -> GuestCache {
        GuestCache { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn create(&self) -> Result<()> {
        fs::create_dir_all(&self.dir)
            .map_err(|e| GuestError::io(format!("creating {}", self.dir.display()), e))
    }
}

/// A host file to copy into the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraFile {
    /// The file on the host.
    pub host: PathBuf,
    /// Its absolute path in the guest.
    pub guest: String,
    /// Also copy the shared libraries `ldd` lists for it (for a dynamically linked
    /// program).
    pub with_libs: bool,
}

impl ExtraFile {
    /// A program at `host`, placed at `guest`, with its libraries.
    pub fn program(host: impl Into<PathBuf>, guest: &str) -> ExtraFile {
        ExtraFile { host: host.into(), guest: guest.to_string(), with_libs: true }
    }

    /// [`ExtraFile::program`] of a copy of `host` without debug info, written into
    /// `scratch` (a release build of vmpls shrinks to a tenth, and the initramfs with it);
    /// the original if `strip` is missing or fails.
    pub fn stripped_program(host: &Path, scratch: &Path, guest: &str) -> ExtraFile {
        let name = host.file_name().unwrap_or(std::ffi::OsStr::new("program"));
        let out = scratch.join(name);
        let ok = Command::new("strip")
            .arg("--strip-debug")
            .arg("-o")
            .arg(&out)
            .arg(host)
            .status()
            .is_ok_and(|s| s.success());
        ExtraFile::program(if ok { out } else { host.to_path_buf() }, guest)
    }
}

/// What goes into an image besides the kernel and busybox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSpec {
    /// Kernel modules to load at boot (dependencies are resolved and added).
    pub modules: Vec<String>,
    /// Host programs (found in `PATH`, `/usr/sbin` and `/sbin`), copied to the same path
    /// with their libraries.
    pub programs: Vec<String>,
}

impl Default for ImageSpec {
    fn default() -> Self {
        ImageSpec {
            modules: DEFAULT_MODULES.iter().map(|s| s.to_string()).collect(),
            programs: DEFAULT_PROGRAMS.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// A built guest: kernel and initramfs in the cache.
#[derive(Debug, Clone)]
pub struct GuestImage {
    /// The kernel: the uncompressed ELF `vmlinux` (booted through PVH), or the `bzImage`
    /// where it could not be unpacked.
    pub kernel: PathBuf,
    /// The initramfs (uncompressed `newc` cpio).
    pub initramfs: PathBuf,
    /// The kernel release (`uname -r` in the guest), e.g. `6.1.0-57-amd64`.
    pub kernel_version: String,
    /// The cache it lives in.
    pub cache_dir: PathBuf,
}

/// 64-bit FNV-1a, for the cache key: stable across Rust versions, unlike `std`'s hasher.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fnv(u64);

impl Fnv {
    pub(crate) fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    pub(crate) fn add(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // A separator, so ("ab", "c") and ("a", "bc") differ.
        self.0 ^= 0xff;
        self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
    }

    pub(crate) fn finish(&self) -> u64 {
        self.0
    }
}

/// Adds a host file to the cache key by path, size and modification time (as `make`
/// does), which is enough to notice a package upgrade without reading every byte.
fn key_file(key: &mut Fnv, path: &Path) -> Result<()> {
    let meta = fs::metadata(path).map_err(|e| GuestError::io(format!("reading {}", path.display()), e))?;
    key.add(path.as_os_str().as_encoded_bytes());
    key.add(&meta.len().to_le_bytes());
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    key.add(&mtime.to_le_bytes());
    Ok(())
}

/// An exclusive `flock` on a file, released on drop.
struct Lock(File);

impl Lock {
    fn take(path: &Path) -> Result<Lock> {
        let f = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| GuestError::io(format!("opening {}", path.display()), e))?;
        vmpls_sys::process::lock_exclusive(&f)
            .map_err(|e| GuestError::io(format!("locking {}", path.display()), e))?;
        Ok(Lock(f))
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        // Closing would release it too.
        let _ = vmpls_sys::process::unlock(&self.0);
    }
}

/// Runs `cmd`, returning its stdout; a missing program names the Debian package to
/// install.
pub(crate) fn run(cmd: &mut Command, package: &'static str) -> Result<String> {
    let what = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            GuestError::MissingTool { tool: format!("{:?}", cmd.get_program()), package }
        } else {
            GuestError::io(format!("running {what}"), e)
        }
    })?;
    if !out.status.success() {
        return Err(GuestError::CommandFailed {
            command: what,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The kernel package the metapackage depends on, from `apt-cache depends`.
fn kernel_package() -> Result<String> {
    if let Ok(p) = std::env::var("VMPLS_GUEST_KERNEL_PACKAGE") {
        return Ok(p);
    }
    let out = run(Command::new("apt-cache").args(["depends", KERNEL_METAPACKAGE]), "apt")?;
    parse_depends(&out).ok_or(GuestError::NoKernelPackage)
}

/// The first `Depends: linux-image-...` of `apt-cache depends` output.
fn parse_depends(out: &str) -> Option<String> {
    out.lines()
        .filter_map(|l| l.trim().strip_prefix("Depends:"))
        .map(|p| p.trim().trim_start_matches('<').trim_end_matches('>'))
        .find(|p| p.starts_with("linux-image-"))
        .map(str::to_string)
}

/// The downloaded `.deb` of `package` in `debs`, if there is one.
fn find_deb(debs: &Path, package: &str) -> Option<PathBuf> {
    let prefix = format!("{package}_");
    let mut found: Vec<PathBuf> = fs::read_dir(debs)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".deb"))
        })
        .collect();
    found.sort();
    found.pop()
}

/// The `.deb` of the kernel package, downloaded if not in the cache yet.
fn kernel_deb(cache: &GuestCache) -> Result<PathBuf> {
    let debs = cache.dir.join("debs");
    fs::create_dir_all(&debs).map_err(|e| GuestError::io(format!("creating {}", debs.display()), e))?;
    let package = match kernel_package() {
        Ok(p) => p,
        Err(e) => {
            // No package lists (no `apt-get update`) but a kernel downloaded before: use it.
            if let Some(deb) = newest_deb(&debs) {
                tracing::warn!(error = %e, deb = %deb.display(), "using the cached kernel package");
                return Ok(deb);
            }
            return Err(e);
        }
    };
    if let Some(deb) = find_deb(&debs, &package) {
        return Ok(deb);
    }
    tracing::info!(package, "downloading the guest kernel");
    run(Command::new("apt-get").args(["download", "-q", &package]).current_dir(&debs), "apt")?;
    find_deb(&debs, &package).ok_or(GuestError::NoKernelPackage)
}

fn newest_deb(debs: &Path) -> Option<PathBuf> {
    let mut all: Vec<PathBuf> = fs::read_dir(debs)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("linux-image-") && n.ends_with(".deb"))
        })
        .collect();
    all.sort();
    all.pop()
}

/// Finds a program in `PATH`, `/usr/sbin` and `/sbin`.
pub(crate) fn find_program(name: &str) -> Result<PathBuf> {
    if name.contains('/') {
        return Ok(PathBuf::from(name));
    }
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| GuestError::MissingTool {
            tool: name.to_string(),
            package: match name {
                "ip" => "iproute2",
                "iperf3" => "iperf3",
                "ethtool" => "ethtool",
                _ => "(the package that provides it)",
            },
        })
}

/// The shared libraries `ldd` lists for `program` (the dynamic loader included); none
/// for a static program.
pub(crate) fn libraries(program: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(program)
        .output()
        .map_err(|e| GuestError::io("running ldd (package libc-bin)".to_string(), e))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || text.contains("not a dynamic executable") {
        return Ok(Vec::new());
    }
    parse_ldd(&text)
        .map_err(|lib| GuestError::MissingLibrary { program: program.to_path_buf(), library: lib })
}

/// Library paths from `ldd` output; `Err(name)` for a library ldd could not find.
fn parse_ldd(text: &str) -> std::result::Result<Vec<PathBuf>, String> {
    let mut libs = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with("linux-vdso") || line.starts_with("statically") {
            continue;
        }
        let path = match line.split_once("=>") {
            Some((name, rest)) => {
                let rest = rest.trim();
                if rest.starts_with("not found") {
                    return Err(name.trim().to_string());
                }
                rest.split_whitespace().next().unwrap_or("")
            }
            None => line.split_whitespace().next().unwrap_or(""),
        };
        if path.starts_with('/') {
            libs.push(PathBuf::from(path));
        }
    }
    Ok(libs)
}

pub(crate) fn read(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).map_err(|e| GuestError::io(format!("reading {}", path.display()), e))
}

/// Adds `file` (and, if asked, its libraries) to `archive`, skipping paths already in
/// `seen`. Feeds the bytes to `hash` when given.
pub(crate) fn add_host_file(
    archive: &mut Archive,
    seen: &mut std::collections::BTreeSet<String>,
    file: &ExtraFile,
    mut hash: Option<&mut Fnv>,
) -> Result<()> {
    let mut entries = vec![(file.host.clone(), file.guest.clone())];
    if file.with_libs {
        for lib in libraries(&file.host)? {
            let guest = lib.to_string_lossy().into_owned();
            entries.push((lib, guest));
        }
    }
    for (host, guest) in entries {
        if !seen.insert(guest.clone()) {
            continue;
        }
        let data = read(&host)?;
        if let Some(h) = hash.as_deref_mut() {
            h.add(guest.as_bytes());
            h.add(&data);
        }
        archive.file(&guest, 0o755, &data);
    }
    Ok(())
}

/// The `insmod` paths of `module` and its dependencies, in load order; built-in modules
/// give none.
fn module_paths(root: &Path, version: &str, module: &str) -> Result<Vec<PathBuf>> {
    let out = run(
        Command::new("modprobe").arg("--show-depends").arg("-d").arg(root).args(["-S", version, module]),
        "kmod",
    )?;
    Ok(out
        .lines()
        .filter_map(|l| l.strip_prefix("insmod "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(PathBuf::from)
        .collect())
}

/// A module file's contents, decompressed if the package ships it compressed.
fn module_bytes(path: &Path) -> Result<Vec<u8>> {
    let name = path.to_string_lossy();
    let tool = if name.ends_with(".ko.xz") {
        Some(("xz", "xz-utils"))
    } else if name.ends_with(".ko.zst") {
        Some(("zstd", "zstd"))
    } else if name.ends_with(".ko.gz") {
        Some(("gzip", "gzip"))
    } else {
        None
    };
    match tool {
        None => read(path),
        Some((tool, package)) => {
            let out = Command::new(tool)
                .arg("-dc")
                .arg(path)
                .output()
                .map_err(|_| GuestError::MissingTool { tool: tool.to_string(), package })?;
            if !out.status.success() {
                return Err(GuestError::CommandFailed {
                    command: format!("{tool} -dc {name}"),
                    status: out.status.to_string(),
                    stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                });
            }
            Ok(out.stdout)
        }
    }
}

/// Removes a directory tree, logging instead of failing.
fn remove_tree(dir: &Path) {
    if let Err(e) = fs::remove_dir_all(dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot remove");
    }
}

impl GuestImage {
    /// Builds (or finds in `cache`) the default image: [`DEFAULT_MODULES`] and
    /// [`DEFAULT_PROGRAMS`].
    pub fn build(cache: &GuestCache) -> Result<GuestImage> {
        GuestImage::build_with(cache, &ImageSpec::default())
    }

    /// Builds (or finds in `cache`) an image with `spec`. Idempotent: a second call with
    /// the same inputs returns the cached image without touching the network.
    pub fn build_with(cache: &GuestCache, spec: &ImageSpec) -> Result<GuestImage> {
        cache.create()?;
        let _lock = Lock::take(&cache.dir.join("lock"))?;
        let deb = kernel_deb(cache)?;
        let busybox = find_program("busybox")?;
        let programs: Vec<PathBuf> = spec.programs.iter().map(|p| find_program(p)).collect::<Result<_>>()?;

        // The key: every input, hashed before any expensive step.
        let mut key = Fnv::new();
        key.add(FORMAT.as_bytes());
        key.add(INIT.as_bytes());
        key.add(lib_sh(&programs).as_bytes());
        key.add(deb.file_name().unwrap_or_default().as_encoded_bytes());
        for m in &spec.modules {
            key.add(m.as_bytes());
        }
        key_file(&mut key, &busybox)?;
        for p in &programs {
            key_file(&mut key, p)?;
            for lib in libraries(p)? {
                key_file(&mut key, &lib)?;
            }
        }
        let package = deb
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.split('_').next())
            .unwrap_or("linux-image")
            .to_string();
        let name = format!("{package}-{:016x}", key.finish());
        let dir = cache.dir.join("images").join(&name);
        let image = GuestImage {
            kernel: dir.join("vmlinux"),
            initramfs: dir.join("initramfs.cpio"),
            kernel_version: String::new(),
            cache_dir: cache.dir.clone(),
        };
        if let Ok(version) = fs::read_to_string(dir.join("kernel-version"))
            && image.kernel.is_file()
            && image.initramfs.is_file()
        {
            return Ok(GuestImage { kernel_version: version.trim().to_string(), ..image });
        }

        tracing::info!(image = %dir.display(), "building the guest image");
        let scratch = cache.dir.join(format!("build-{}", std::process::id()));
        remove_tree(&scratch);
        let result = build_into(&deb, &scratch, &dir, spec, &busybox, &programs);
        remove_tree(&scratch);
        let version = result?;
        Ok(GuestImage { kernel_version: version, ..image })
    }
}

/// Unpacks `deb` into `scratch`, builds the image into `dir` (through a temporary
/// directory renamed at the end) and returns the kernel version.
fn build_into(
    deb: &Path,
    scratch: &Path,
    dir: &Path,
    spec: &ImageSpec,
    busybox: &Path,
    programs: &[PathBuf],
) -> Result<String> {
    let root = scratch.join("root");
    fs::create_dir_all(&root).map_err(|e| GuestError::io(format!("creating {}", root.display()), e))?;
    run(Command::new("dpkg").arg("-x").arg(deb).arg(&root), "dpkg")?;
    let modules_dir = root.join("lib/modules");
    let version = fs::read_dir(&modules_dir)
        .map_err(|e| GuestError::io(format!("reading {}", modules_dir.display()), e))?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .next()
        .ok_or_else(|| GuestError::BadKernelPackage {
            deb: deb.to_path_buf(),
            reason: "no lib/modules/<version> directory".into(),
        })?;
    let vmlinuz = root.join("boot").join(format!("vmlinuz-{version}"));
    if !vmlinuz.is_file() {
        return Err(GuestError::BadKernelPackage {
            deb: deb.to_path_buf(),
            reason: format!("no boot/vmlinuz-{version}"),
        });
    }
    run(Command::new("depmod").arg("-b").arg(&root).arg(&version), "kmod")?;

    let mut archive = Archive::new();
    let mut seen = std::collections::BTreeSet::new();
    for d in ["proc", "sys", "dev", "tmp", "run", "root", "vmpls-run"] {
        archive.dir(d);
    }
    archive.file("init", 0o755, INIT.as_bytes());
    archive.file(GUEST_LIB, 0o644, lib_sh(programs).as_bytes());
    archive.file("bin/busybox", 0o755, &read(busybox)?);

    let mut order = Vec::new();
    for m in &spec.modules {
        for path in module_paths(&root, &version, m)? {
            let file = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
            let ko = match file.find(".ko") {
                Some(i) => format!("{}.ko", &file[..i]),
                None => file,
            };
            if order.contains(&ko) {
                continue;
            }
            archive.file(&format!("lib/modules/vmpls/{ko}"), 0o644, &module_bytes(&path)?);
            order.push(ko);
        }
    }
    let mut list = order.join("\n");
    list.push('\n');
    archive.file("etc/vmpls-guest/modules", 0o644, list.as_bytes());

    for p in programs {
        let guest = p.to_string_lossy().into_owned();
        add_host_file(&mut archive, &mut seen, &ExtraFile::program(p, &guest), None)?;
    }

    let tmp = dir.with_extension("tmp");
    remove_tree(&tmp);
    fs::create_dir_all(&tmp).map_err(|e| GuestError::io(format!("creating {}", tmp.display()), e))?;
    let write = |name: &str, data: &[u8]| {
        let p = tmp.join(name);
        fs::write(&p, data).map_err(|e| GuestError::io(format!("writing {}", p.display()), e))
    };
    let bzimage = read(&vmlinuz)?;
    match extract_vmlinux(&bzimage) {
        Some(elf) => write("vmlinux", &elf)?,
        None => {
            tracing::warn!("cannot unpack vmlinux from the bzImage; booting it compressed");
            write("vmlinux", &bzimage)?
        }
    }
    write("initramfs.cpio", &archive.finish())?;
    write("kernel-version", version.as_bytes())?;
    remove_tree(dir);
    fs::rename(&tmp, dir).map_err(|e| GuestError::io(format!("renaming {}", tmp.display()), e))?;
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apt_cache_depends_names_the_kernel_package() {
        let out = "linux-image-amd64\n  Depends: linux-image-6.1.0-57-amd64\n";
        assert_eq!(parse_depends(out).as_deref(), Some("linux-image-6.1.0-57-amd64"));
        let virtual_dep = "linux-image-amd64\n  Depends: <linux-image-6.1.0-58-amd64>\n";
        assert_eq!(parse_depends(virtual_dep).as_deref(), Some("linux-image-6.1.0-58-amd64"));
        assert_eq!(parse_depends("linux-image-amd64\n"), None);
    }

    #[test]
    fn ldd_output_gives_library_paths_or_the_missing_one() {
        let out = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                   \tlibmnl.so.0 => /lib/x86_64-linux-gnu/libmnl.so.0 (0x00007f28)\n\
                   \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f27)\n\
                   \t/lib64/ld-linux-x86-64.so.2 (0x00007f29)\n";
        assert_eq!(
            parse_ldd(out).unwrap(),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libmnl.so.0"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
        assert_eq!(parse_ldd("\tlibfoo.so.1 => not found\n").unwrap_err(), "libfoo.so.1");
    }

    #[test]
    fn lib_sh_wraps_host_programs_so_busybox_applets_do_not_shadow_them() {
        let s = lib_sh(&[PathBuf::from("/usr/sbin/ip")]);
        assert!(s.contains("ip() { /usr/sbin/ip \"$@\"; }\n"), "{s}");
        assert!(s.contains("result() {"));
    }

    #[test]
    fn vmlinux_is_found_behind_its_compression_magic() {
        let elf = b"\x7fELF\x02\x01\x01 a kernel".to_vec();
        let Ok(mut gz) = Command::new("gzip")
            .arg("-c")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
        else {
            return; // no gzip on this host: nothing to check with
        };
        {
            use std::io::Write;
            gz.stdin.take().unwrap().write_all(&elf).unwrap();
        }
        let packed = gz.wait_with_output().unwrap().stdout;
        let mut bzimage = b"MZ setup code \x1f\x8b not a stream".to_vec();
        bzimage.extend_from_slice(&packed);
        bzimage.extend_from_slice(b"trailing bytes");
        assert_eq!(extract_vmlinux(&bzimage), Some(elf));
        assert_eq!(extract_vmlinux(b"MZ nothing packed here"), None);
    }

    #[test]
    fn fnv_key_depends_on_every_input_and_its_boundaries() {
        let key = |parts: &[&[u8]]| {
            let mut h = Fnv::new();
            for p in parts {
                h.add(p);
            }
            h.finish()
        };
        assert_eq!(key(&[b"a", b"bc"]), key(&[b"a", b"bc"]));
        assert_ne!(key(&[b"ab", b"c"]), key(&[b"a", b"bc"]));
        assert_ne!(key(&[b"a"]), key(&[b"b"]));
    }
}
