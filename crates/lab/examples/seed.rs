//! Runs the seed lab from the library, without the `vmpls` CLI.
//!
//! `cargo run -p vmpls-lab --example seed -- ROUTER_BINARY [SECONDS] [--kernel-only] [--json]`
//! (as root). With `--kernel-only` the router binary is not needed (pass any path).

use std::time::Duration;

use vmpls_lab::seed::{Mode, SeedOptions, run_seed};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flags: Vec<&str> = args.iter().filter(|a| a.starts_with("--")).map(String::as_str).collect();
    let positional: Vec<&str> = args.iter().filter(|a| !a.starts_with("--")).map(String::as_str).collect();
    let Some(router) = positional.first() else {
        anyhow::bail!("usage: seed ROUTER_BINARY [SECONDS] [--kernel-only] [--keep-going] [--json]");
    };
    let seconds: u64 = positional.get(1).map(|s| s.parse()).transpose()?.unwrap_or(10);
    vmpls_lab::install_interrupt_handler()?;
    let mut opts = SeedOptions::new(router, Duration::from_secs(seconds));
    opts.json = flags.contains(&"--json");
    opts.keep_going = flags.contains(&"--keep-going");
    if flags.contains(&"--kernel-only") {
        opts.modes = vec![Mode::kernel_ip()];
    }
    let report = run_seed(&opts, &mut |line| eprintln!("{line}"))?;
    if opts.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_markdown());
    }
    if let Some(dir) = &report.work_dir {
        eprintln!("configs and logs: {}", dir.display());
    }
    Ok(())
}
