//! Compiles `bpf/fastpath.bpf.c` into `$OUT_DIR/fastpath.bpf.o` with clang.
//!
//! Without clang (or without libbpf's headers) the crate still builds: it sets
//! `cfg(vmpls_fastpath_unavailable)` and `FastPath::load()` reports that the fast path
//! is unavailable. A C source that clang rejects fails the build.

use std::env;
use std::io::ErrorKind;
use std::path::PathBuf;
use std::process::Command;

const SRC: &str = "bpf/fastpath.bpf.c";

fn main() {
    println!("cargo::rerun-if-changed={SRC}");
    println!("cargo::rerun-if-env-changed=CLANG");
    println!("cargo::rustc-check-cfg=cfg(vmpls_fastpath_unavailable)");

    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("fastpath.bpf.o");
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".to_owned());
    // The multiarch include directory holds <asm/types.h>, which <linux/bpf.h> needs.
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".to_owned());
    let multiarch = format!("-I/usr/include/{arch}-linux-gnu");

    let result = Command::new(&clang)
        .args(["-O2", "-g", "-Wall", "-target", "bpf", &multiarch, "-c", SRC, "-o"])
        .arg(&out)
        .output();
    match result {
        Err(e) if e.kind() == ErrorKind::NotFound => {
            unavailable(&format!("`{clang}` not found"));
        }
        Err(e) => panic!("running `{clang}` failed: {e}"),
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            let stderr = String::from_utf8_lossy(&o.stderr);
            if stderr.contains("bpf/bpf_helpers.h' file not found")
                || stderr.contains("asm/types.h' file not found")
            {
                unavailable("libbpf-dev / kernel headers not found");
            } else {
                panic!("clang failed to compile {SRC}:\n{stderr}");
            }
        }
    }
}

fn unavailable(why: &str) {
    println!(
        "cargo::warning=vmpls-fastpath: {why}; building without the TC fast path (install clang and libbpf-dev and rebuild)"
    );
    println!("cargo::rustc-cfg=vmpls_fastpath_unavailable");
    // Look again at every build until they are installed: a path that never exists makes
    // cargo rerun this script each time. Not /usr/bin/clang itself: packages install it
    // with the mtime it had when it was packaged, older than this build, so cargo would
    // never see it change and a build after `apt-get install clang` stayed without the
    // fast path.
    let never =
        PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("look-again-for-clang");
    println!("cargo::rerun-if-changed={}", never.display());
}
