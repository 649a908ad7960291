//! `vmpls-tools`: the labs and benchmarks around the vmpls router, a binary of their own
//! so that the router links none of their code (tokio, rtnetlink, the QEMU harness).
//! `vmpls lab ...` and `vmpls bench ...` run this binary, which sits beside `vmpls`; it
//! runs that `vmpls` as the routers of its labs.

mod bench;
mod bench_fib;
mod bench_fpm;
mod bench_vhost_user;
mod seed_vm;
mod seed_vm_routers;
mod soak;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "vmpls-tools", version, about = "Labs and benchmarks of the vmpls router")]
struct Cli {
    /// More log output (repeat for more).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build a lab topology in network namespaces and measure it.
    Lab {
        #[command(subcommand)]
        lab: LabCommand,
    },
    /// Benchmarks: every mode of a lab measured in one run, as ratios to kernel routing.
    Bench {
        #[command(subcommand)]
        bench: BenchCommand,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// The router's tables at N routes (IPv4 prefixes, a tenth as many IPv6 prefixes and
    /// label routes): load time, memory per entry, one change, lookup rate; the kernel's
    /// FIB taking the same IPv4 routes (`ip -batch`) beside it.
    Fib {
        /// Sizes, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000,262141")]
        sizes: Vec<u32>,
        /// Print JSON instead of a Markdown table.
        #[arg(long)]
        json: bool,
    },
    /// Routes from zebra: a full table (label routes and labelled prefixes) and single
    /// updates sent over FPM by a generator, each timed until in force; the kernel's own
    /// FIB (`ip -batch`) in the same run as the baseline.
    Fpm {
        /// Label routes in the full table (and as many labelled prefixes).
        #[arg(long, default_value_t = 10_000)]
        routes: u32,
        /// Single updates timed after the full table.
        #[arg(long, default_value_t = 100)]
        updates: u32,
        /// Run the router with the in-kernel fast path (`fast-path = "tc"`).
        #[arg(long)]
        fast_path: bool,
        /// VPN routes instead: this many VRFs (network namespaces, as `zebra -n` has
        /// them), each with `--routes-per-vrf` labelled routes (VPN label under a
        /// transport label) and its VPN label; `--updates` then counts changed routes.
        #[arg(long, default_value_t = 0)]
        vrfs: u32,
        /// Labelled VPN routes per VRF (with `--vrfs`).
        #[arg(long, default_value_t = 1000)]
        routes_per_vrf: u32,
        /// Print JSON instead of a Markdown table.
        #[arg(long)]
        json: bool,
    },
    /// The vhost-user path without QEMU: DPDK's testpmd (virtio-user) as both guests of
    /// a switch (one vmpls router, a chain of three, or Open vSwitch with DPDK); 64-byte
    /// frames and TSO super-frames, per CPU-second of the switch, against this machine's
    /// memory copy bandwidth. Root; needs dpdk-testpmd (Debian: dpdk-dev) and hugepages
    /// (reserves 320 on top of those reserved and gives them back).
    VhostUser {
        /// Seconds measured per case.
        #[arg(long, default_value_t = 10)]
        duration: u64,
        /// Print JSON (`{"cases": [...]}`) instead of a Markdown table.
        #[arg(long)]
        json: bool,
        /// one: a -> push -> b in one router; chain: pe1 push -> p swap -> pe2 pop over veth
        /// pairs; chain-memif: the chain joined by memif ports.
        #[arg(long, value_enum, default_value = "one")]
        topology: bench_vhost_user::Topo,
        /// The switches, comma-separated (vmpls, ovs-dpdk); default vmpls, and ovs-dpdk
        /// where it is installed (topology one only).
        #[arg(long, value_enum, value_delimiter = ',')]
        backends: Vec<bench_vhost_user::Backend>,
        /// The cases, comma-separated (64, tso).
        #[arg(long, value_enum, value_delimiter = ',', default_value = "64,tso")]
        cases: Vec<bench_vhost_user::Case>,
        /// The vmpls routers' poll modes, comma-separated, each measured (adaptive,
        /// interrupt); the table gives the CPU each costs.
        #[arg(long, value_enum, value_delimiter = ',', default_value = "adaptive,interrupt")]
        poll: Vec<bench_vhost_user::Poll>,
    },
    /// The seed lab in every mode: kernel-ip, kernel-ip-offloads-off, vmpls-ip, vmpls-mpls,
    /// vmpls-mpls-offloads-off, vmpls-mpls-1500, the fast-path (-tc), ECMP and memif modes.
    Seed {
        /// Seconds each mode's TCP flow runs.
        #[arg(long, default_value_t = 10)]
        duration: u64,
        /// Print JSON instead of a Markdown table.
        #[arg(long)]
        json: bool,
        /// Also draw the bars into this SVG file.
        #[arg(long, value_name = "FILE.svg")]
        plot: Option<PathBuf>,
    },
    /// The seed lab's vmpls routers under paced TCP and UDP traffic both ways for a long
    /// time, the LSP changing every few seconds (make-before-break): bytes and datagrams
    /// sent and received, drops by reason, memory at start and end. Not for CI.
    Soak {
        /// How long the traffic runs: 90s, 10m, 1h, 1h30m.
        #[arg(long, default_value = "10m", value_parser = soak::parse_duration)]
        duration: Duration,
        /// Print JSON instead of tables.
        #[arg(long)]
        json: bool,
        /// Each TCP flow's rate, Mbit/s.
        #[arg(long, value_name = "MBIT", default_value_t = 200.0, value_parser = parse_mbit)]
        rate: f64,
        /// Each UDP flow's rate, Mbit/s.
        #[arg(long, value_name = "MBIT", default_value_t = 50.0, value_parser = parse_mbit)]
        udp_rate: f64,
        /// How often the path changes: 3s, 500ms.
        #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = soak::parse_duration)]
        change_every: Duration,
        /// Run the routers with the in-kernel fast path (`fast-path = "tc"`).
        #[arg(long)]
        fast_path: bool,
    },
}

/// A rate in Mbit/s: a positive number.
fn parse_mbit(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1e6 => Ok(v),
        _ => Err(format!("\"{text}\" is not a rate in Mbit/s (a number above 0, like 200 or 0.5)")),
    }
}

#[derive(Subcommand)]
enum LabCommand {
    /// The seed topology: ce1 -- pe1 -- p -- pe2 -- ce2, a TCP flow ce1 -> ce2 through
    /// kernel IP routing and through the vmpls LSP, one table.
    Seed {
        /// Seconds each mode's TCP flow runs.
        #[arg(long, default_value_t = 10)]
        duration: u64,
        /// Print JSON instead of a Markdown table.
        #[arg(long)]
        json: bool,
        /// ce1 and ce2 as QEMU guests: on vhost-user ports of pe1 and pe2 (vmpls), and as
        /// the baseline on TAPs with the host kernel routing between them; iperf3 inside
        /// the guests. The guest image is cached in $VMPLS_GUEST_CACHE (default
        /// target/guest-cache of the source tree).
        #[arg(long)]
        vm: bool,
        /// The seed experiment as it was run: the routers inside QEMU guests (a P guest, a
        /// PE guest with pe1 and pe2 in two namespaces) on virtio-net, ce1 and ce2 as host
        /// namespaces; kernel IP, kernel MPLS and vmpls in the guests, iperf3 ce1 -> ce2.
        #[arg(long, conflicts_with = "vm")]
        vm_routers: bool,
        /// The modes to run, separated by commas. The namespace lab: any of `vmpls bench
        /// seed`'s (kernel-ip, vmpls-mpls, vmpls-mpls-tc, vmpls-mpls-memif, ...); default
        /// kernel-ip, vmpls-mpls, vmpls-mpls-tc. With --vm-routers: kernel-ip, kernel-mpls,
        /// kernel-mpls-64k, vmpls-mpls, vmpls-mpls-64k, vmpls-mpls-tc, vmpls-mpls-64k-tc;
        /// default all but kernel-mpls-64k.
        #[arg(long, conflicts_with_all = ["vm", "hosts"])]
        modes: Option<String>,
        /// 2: the LSP split over two hosts (namespaces joined only by an IP underlay):
        /// kernel IP over a VXLAN link (containerlab's way, the baseline), vmpls over
        /// that link, vmpls over MPLS-in-UDP.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
        hosts: u8,
    },
    /// The seed topology with FRRouting as control plane: pe1, p and pe2 each run FRR
    /// (zebra with vmpls's module and FPM, ospfd, ldpd) and vmpls; waits for OSPF and LDP,
    /// checks ping and traceroute, and runs the TCP flow ce1 -> ce2 through kernel IP
    /// routing and through the LDP LSP (pipeline and in-kernel fast path), one table.
    Frr {
        /// Seconds each mode's TCP flow runs.
        #[arg(long, default_value_t = 10)]
        duration: u64,
        /// Print JSON instead of Markdown tables.
        #[arg(long)]
        json: bool,
        /// The zebra module (`scripts/build-zebra-module` builds it and prints its path).
        /// Default: $VMPLS_ZEBRA_MODULE, else the one built next to this binary.
        #[arg(long, value_name = "PATH")]
        zebra_module: Option<PathBuf>,
    },
    /// BGP/MPLS VPNs (RFC 4364) over the FRR seed core: customers red (eBGP, IPv4 and
    /// IPv6) and blue (static) on both PEs with the same addresses, a common-services
    /// VRF on pe2; waits for FRR and vmpls to converge, checks reachability, isolation
    /// and traceroute, and runs a TCP flow per customer through the VPN beside kernel IP
    /// routing of the same path.
    Vpn {
        /// Seconds each TCP flow runs.
        #[arg(long, default_value_t = 5)]
        duration: u64,
        /// Print JSON instead of Markdown tables.
        #[arg(long)]
        json: bool,
        /// The zebra module. Default: $VMPLS_ZEBRA_MODULE, else the one built next to
        /// this binary.
        #[arg(long, value_name = "PATH")]
        zebra_module: Option<PathBuf>,
    },
    /// Ethernet pseudowires signalled by FRR's ldpd over the FRR seed core with a third
    /// PE: a VPWS ce1 <-> ce2 and a VPLS of three sites, the CEs of each in one subnet;
    /// waits for every pseudowire up in FRR and vmpls with the same labels, checks ARP,
    /// ping and the FDB, and runs a TCP flow through each beside kernel IP routing.
    L2vpn {
        /// Seconds each TCP flow runs.
        #[arg(long, default_value_t = 5)]
        duration: u64,
        /// Print JSON instead of Markdown tables.
        #[arg(long)]
        json: bool,
        /// The zebra module. Default: $VMPLS_ZEBRA_MODULE, else the one built next to
        /// this binary.
        #[arg(long, value_name = "PATH")]
        zebra_module: Option<PathBuf>,
    },
}

/// The `vmpls` binary the labs run as their routers: the one beside this binary.
fn router_binary() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let vmpls = exe.with_file_name("vmpls");
    anyhow::ensure!(
        vmpls.is_file(),
        "the labs run the vmpls router, which is not beside {} (build it: cargo build --release -p vmpls)",
        exe.display()
    );
    Ok(vmpls)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = match cli.verbose {
        0 => tracing::Level::INFO,
        1 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    };
    tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let result = match &cli.command {
        Command::Bench { bench: BenchCommand::Seed { duration, json, plot } } => {
            bench::seed(Duration::from_secs(*duration), *json, plot.as_deref())
        }
        Command::Bench {
            bench: BenchCommand::VhostUser { duration, json, topology, backends, cases, poll },
        } => bench_vhost_user(Duration::from_secs(*duration), *json, *topology, backends, cases, poll),
        Command::Bench { bench: BenchCommand::Fib { sizes, json } } => bench_fib::run(sizes, *json),
        Command::Bench {
            bench: BenchCommand::Fpm { updates, fast_path, vrfs: vrfs @ 1.., routes_per_vrf, json, .. },
        } => bench_fpm::run_vpn(&bench_fpm::VpnBenchOptions {
            vrfs: *vrfs,
            routes_per_vrf: *routes_per_vrf,
            changes: *updates,
            fast_path: *fast_path,
            json: *json,
        }),
        Command::Bench { bench: BenchCommand::Fpm { routes, updates, fast_path, json, .. } } => {
            bench_fpm::run(&bench_fpm::FpmBenchOptions {
                routes: *routes,
                updates: *updates,
                fast_path: *fast_path,
                json: *json,
            })
        }
        Command::Bench {
            bench: BenchCommand::Soak { duration, json, rate, udp_rate, change_every, fast_path },
        } => bench_soak(*duration, *json, *rate, *udp_rate, *change_every, *fast_path),
        Command::Lab { lab: LabCommand::Seed { vm_routers: true, hosts: 2.., .. } } => {
            Err(anyhow::anyhow!("--vm-routers and --hosts 2 do not go together"))
        }
        Command::Lab { lab: LabCommand::Seed { duration, json, vm_routers: true, modes, .. } } => {
            lab_seed_vm_routers(Duration::from_secs(*duration), *json, modes.as_deref())
        }
        Command::Lab { lab: LabCommand::Seed { duration, json, vm: false, hosts, modes, .. } } => {
            lab_seed(Duration::from_secs(*duration), *json, *hosts, modes.as_deref())
        }
        Command::Lab { lab: LabCommand::Seed { vm: true, hosts: 2.., .. } } => {
            Err(anyhow::anyhow!("--vm and --hosts 2 do not go together"))
        }
        Command::Lab { lab: LabCommand::Seed { duration, json, vm: true, .. } } => {
            lab_seed_vm(Duration::from_secs(*duration), *json)
        }
        Command::Lab { lab: LabCommand::Frr { duration, json, zebra_module } } => {
            lab_frr(Duration::from_secs(*duration), *json, zebra_module.clone())
        }
        Command::Lab { lab: LabCommand::Vpn { duration, json, zebra_module } } => {
            lab_vpn(Duration::from_secs(*duration), *json, zebra_module.clone())
        }
        Command::Lab { lab: LabCommand::L2vpn { duration, json, zebra_module } } => {
            lab_l2vpn(Duration::from_secs(*duration), *json, zebra_module.clone())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vmpls: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn lab_seed(duration: Duration, json: bool, hosts: u8, modes: Option<&str>) -> anyhow::Result<()> {
    let mut opts = vmpls_lab::seed::SeedOptions::new(router_binary()?, duration);
    opts.json = json;
    if hosts == 2 {
        opts.hosts = 2;
        opts.modes = vmpls_lab::seed::Mode::two_hosts();
    }
    if let Some(m) = modes {
        opts.modes = vmpls_lab::seed::Mode::parse_list(m)?;
    }
    vmpls_lab::install_interrupt_handler()?;
    // A failing mode still leaves the others' rows in the table.
    opts.keep_going = true;
    let report = vmpls_lab::seed::run_seed(&opts, &mut |line| eprintln!("{line}"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        print!("{}", report.to_markdown());
    }
    if !report.ok() {
        anyhow::bail!("some modes failed (see above)");
    }
    Ok(())
}

/// The zebra module to load: given, from the environment, or built by
/// `scripts/build-zebra-module` next to this binary (`target/frr-module/VERSION/`).
fn zebra_module(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(p) = given.or_else(|| std::env::var_os("VMPLS_ZEBRA_MODULE").map(PathBuf::from)) {
        anyhow::ensure!(p.is_file(), "no zebra module at {}", p.display());
        return Ok(p);
    }
    let exe = std::env::current_exe()?;
    let built = exe.parent().and_then(|d| d.parent()).map(|t| t.join("frr-module"));
    let newest = built
        .and_then(|d| std::fs::read_dir(d).ok())
        .into_iter()
        .flatten()
        .filter_map(|e| Some(e.ok()?.path().join("vmpls_zebra.so")))
        .filter(|p| p.is_file())
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
    newest.ok_or_else(|| {
        anyhow::anyhow!(
            "vmpls lab frr needs the zebra module: build it with ./scripts/build-zebra-module (or run \
             ./scripts/lab-frr), then pass --zebra-module PATH or set VMPLS_ZEBRA_MODULE"
        )
    })
}

fn lab_vpn(duration: Duration, json: bool, module: Option<PathBuf>) -> anyhow::Result<()> {
    vmpls_lab::install_interrupt_handler()?;
    let opts = vmpls_lab::vpn_lab::VpnLabOptions {
        vmpls: router_binary()?,
        duration,
        zebra_module: zebra_module(module)?,
    };
    let report = vmpls_lab::vpn_lab::run_vpn_lab(&opts, &mut |line| eprintln!("{line}"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        print!("{}", report.to_markdown());
    }
    if !report.ok() {
        anyhow::bail!("some checks or flows failed (see above)");
    }
    Ok(())
}

fn lab_l2vpn(duration: Duration, json: bool, module: Option<PathBuf>) -> anyhow::Result<()> {
    vmpls_lab::install_interrupt_handler()?;
    let opts = vmpls_lab::l2vpn_lab::L2vpnLabOptions {
        vmpls: router_binary()?,
        duration,
        zebra_module: zebra_module(module)?,
    };
    let report = vmpls_lab::l2vpn_lab::run_l2vpn_lab(&opts, &mut |line| eprintln!("{line}"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        print!("{}", report.to_markdown());
    }
    if !report.ok() {
        anyhow::bail!("some pseudowires, checks or flows failed (see above)");
    }
    Ok(())
}

fn lab_frr(duration: Duration, json: bool, module: Option<PathBuf>) -> anyhow::Result<()> {
    vmpls_lab::install_interrupt_handler()?;
    let opts = vmpls_lab::frr_lab::FrrLabOptions {
        vmpls: router_binary()?,
        duration,
        zebra_module: zebra_module(module)?,
        json,
    };
    let report = vmpls_lab::frr_lab::run_frr_lab(&opts, &mut |line| eprintln!("{line}"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        print!("{}", report.to_markdown());
    }
    if !report.ok() {
        anyhow::bail!("some checks or modes failed (see above)");
    }
    Ok(())
}

fn bench_vhost_user(
    duration: Duration,
    json: bool,
    topology: bench_vhost_user::Topo,
    backends: &[bench_vhost_user::Backend],
    cases: &[bench_vhost_user::Case],
    polls: &[bench_vhost_user::Poll],
) -> anyhow::Result<()> {
    vmpls_lab::install_interrupt_handler()?;
    let opts = bench_vhost_user::VhostUserBenchOptions {
        vmpls: router_binary()?,
        duration,
        topology,
        backends: if backends.is_empty() {
            bench_vhost_user::default_backends(topology)
        } else {
            backends.to_vec()
        },
        cases: cases.to_vec(),
        polls: polls.to_vec(),
    };
    let report = bench_vhost_user::run(&opts, &mut |line| eprintln!("{line}"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        print!("{}", report.to_markdown());
    }
    if !report.ok() {
        anyhow::bail!("some frames are not accounted for (see above)");
    }
    Ok(())
}

fn bench_soak(
    duration: Duration,
    json: bool,
    rate: f64,
    udp_rate: f64,
    change_every: Duration,
    fast_path: bool,
) -> anyhow::Result<()> {
    vmpls_lab::install_interrupt_handler()?;
    let mut opts = soak::SoakOptions::new(router_binary()?, duration);
    opts.fast_path = fast_path;
    opts.tcp_rate = (rate * 1e6) as u64;
    opts.udp_rate = (udp_rate * 1e6) as u64;
    opts.change_every = change_every;
    let report = soak::run_soak(&opts, &mut |line| eprintln!("{line}"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        print!("{}", report.to_text());
    }
    if !report.ok() {
        anyhow::bail!("the soak failed: {}", report.failures.join("; "));
    }
    Ok(())
}

fn lab_seed_vm_routers(duration: Duration, json: bool, modes: Option<&str>) -> anyhow::Result<()> {
    vmpls_lab::install_interrupt_handler()?;
    let mut opts = seed_vm_routers::VmRoutersOptions::new(router_binary()?, duration);
    if let Some(m) = modes {
        opts.modes = seed_vm_routers::RouterMode::parse_list(m)?;
    }
    opts.keep_going = true;
    let report = seed_vm_routers::run_seed_vm_routers(&opts, &mut |line| eprintln!("{line}"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        print!("{}", report.to_markdown());
        eprintln!("(routers in guests on {}; iperf3 ce1 -> ce2 from host namespaces)", report.accel);
    }
    if let Some(dir) = &report.work_dir {
        eprintln!("files kept in {}", dir.display());
    }
    if !report.ok() {
        anyhow::bail!("some modes failed (see above)");
    }
    Ok(())
}

fn lab_seed_vm(duration: Duration, json: bool) -> anyhow::Result<()> {
    vmpls_lab::install_interrupt_handler()?;
    let mut opts = seed_vm::VmSeedOptions::new(router_binary()?, duration);
    // A failing mode still leaves the others' rows in the table.
    opts.keep_going = true;
    let report = seed_vm::run_seed_vm(&opts, &mut |line| eprintln!("{line}"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        print!("{}", report.to_markdown());
        eprintln!("(guests on {}; iperf3 inside the guests, ce1 -> ce2)", report.accel);
    }
    if let Some(dir) = &report.work_dir {
        eprintln!("configs and logs kept in {}", dir.display());
    }
    if !report.ok() {
        anyhow::bail!("some modes failed (see above)");
    }
    Ok(())
}
