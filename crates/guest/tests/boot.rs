//! The guest image boots under QEMU and runs its script: modules, programs and the result
//! channel work. Needs root, QEMU and the Debian packages listed in the crate docs; the
//! first run downloads the kernel package into the cache.

use std::time::{Duration, Instant};

use vmpls_guest::{DONE_MARKER, Guest, GuestCache, GuestConfig, GuestImage};

#[test]
fn guest_boots_loads_mpls_modules_and_runs_host_programs() {
    let t0 = Instant::now();
    let image = GuestImage::build(&GuestCache::default_location()).expect("build the image");
    let built = t0.elapsed();
    // A second build finds the cached image and leaves it alone.
    let mtime = |p: &std::path::Path| std::fs::metadata(p).unwrap().modified().unwrap();
    let before = mtime(&image.initramfs);
    let again = GuestImage::build(&GuestCache::default_location()).unwrap();
    assert_eq!(again.initramfs, image.initramfs);
    assert_eq!(again.kernel_version, image.kernel_version);
    assert_eq!(mtime(&again.initramfs), before);

    let script = r#"
result "kernel $(uname -r)"
grep -q '^mpls_router ' /proc/modules && result "module mpls_router"
grep -q '^mpls_iptunnel ' /proc/modules && result "module mpls_iptunnel"
sysctl -w net.mpls.platform_labels=1000 >/dev/null && result "sysctl platform_labels $(cat /proc/sys/net/mpls/platform_labels)"
ip link add d0 type dummy && ip link set d0 up && ip -f mpls route add 100 dev lo && result "iproute2 $(ip -f mpls route show | head -1)"
iperf3 --version | head -1 | sed 's/^/iperf3: /' > /dev/ttyS1
ethtool --version > /dev/ttyS1
"#;
    let t2 = Instant::now();
    let mut g = Guest::boot(
        &image,
        GuestConfig { name: "boot".into(), script: script.into(), ..GuestConfig::default() },
    )
    .unwrap();
    let rc = g.wait_done(Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
    let booted = t2.elapsed();
    let r = g.results();
    eprintln!("image {built:?}, boot+script {booted:?} on {:?}\n{r}", g.accel());
    assert_eq!(rc, 0, "{r}");
    assert!(r.contains(&format!("kernel {}", image.kernel_version)), "{r}");
    assert!(r.contains("module mpls_router"), "{r}");
    assert!(r.contains("module mpls_iptunnel"), "{r}");
    assert!(r.contains("sysctl platform_labels 1000"), "{r}");
    assert!(r.contains("iproute2 100 dev lo"), "{r}");
    assert!(r.contains("iperf3: iperf 3"), "{r}");
    assert!(r.contains("ethtool version"), "{r}");
    assert!(r.contains(DONE_MARKER));
}

#[test]
fn a_failing_script_is_reported_with_its_message() {
    let image = GuestImage::build(&GuestCache::default_location()).expect("build the image");
    let mut g = Guest::boot(
        &image,
        GuestConfig {
            name: "fail".into(),
            script: "result step-one\nfail no route to the moon\nresult never".into(),
            ..GuestConfig::default()
        },
    )
    .unwrap();
    assert_eq!(g.wait_for("step-one", Duration::from_secs(120)).unwrap(), "step-one");
    let err = g.wait_for("never", Duration::from_secs(60)).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("VMPLS-GUEST-FAIL no route to the moon"), "{msg}");
}

#[test]
fn a_vhost_user_nic_without_a_backend_fails_with_qemus_reason() {
    let image = GuestImage::build(&GuestCache::default_location()).expect("build the image");
    let socket = std::env::temp_dir().join(format!("vmpls-guest-nobackend-{}.sock", std::process::id()));
    let mut g = Guest::boot(
        &image,
        GuestConfig {
            name: "nobackend".into(),
            nics: vec![vmpls_guest::Nic::vhost_user(&socket)],
            script: "result up".into(),
            ..GuestConfig::default()
        },
    )
    .unwrap();
    let err = g.wait_for("up", Duration::from_secs(30)).unwrap_err();
    assert!(matches!(err, vmpls_guest::GuestError::Exited(_)), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("QEMU exited"), "{msg}");
    assert!(msg.contains(&socket.display().to_string()), "QEMU's reason is missing: {msg}");
}
