//! `vmpls`: a userspace MPLS label-switching router for virtual networks.
//!
//! A thin dispatcher: `run` and `check` are the router library's (`vmpls-router`); the
//! commands against a running router are the iproute2-style client (`cli`, `batch`,
//! `capture`); `lab` and `bench` run `vmpls-tools`, installed beside this binary, so
//! the router links no lab, benchmark or QEMU code.

mod batch;
mod capture;
mod cli;
mod session;
mod stream;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use vmpls_control::api::Family;

/// Exit code for a config that cannot work (sysexits' EX_CONFIG): systemd units can
/// stop restarting on it (`RestartPreventExitStatus=78`).
const EXIT_CONFIG: u8 = 78;

#[derive(Parser)]
#[command(
    name = "vmpls",
    version,
    about = "A userspace MPLS router for virtual networks",
    after_help = "Against a running router, iproute2-style:\n  vmpls [-r ROUTER | --socket PATH] [-j] [-p] [-4|-6] [-f mpls] route add|del|replace|show|get|flush ...\n  vmpls [-r ROUTER | --socket PATH] [-force] -batch FILE|-\n  vmpls link show | vrf show | neigh show|add|del | stats [-s] | reload | capture PORT [-w FILE.pcap]"
)]
struct Cli {
    /// More log output (repeat for more).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// The router to talk to (its socket is /run/vmpls/ROUTER.sock).
    #[arg(short = 'r', long = "router", global = true, value_name = "ROUTER")]
    router: Option<String>,
    /// The control socket to use (for `run`: where to listen, over the config's).
    #[arg(long, global = true, value_name = "PATH", conflicts_with = "router")]
    socket: Option<PathBuf>,
    /// JSON output.
    #[arg(short = 'j', long = "json", global = true)]
    json: bool,
    /// Pretty (indented) JSON.
    #[arg(short = 'p', long = "pretty", global = true)]
    pretty: bool,
    /// IPv4 routes.
    #[arg(short = '4', global = true, conflicts_with_all = ["inet6", "family"])]
    inet: bool,
    /// IPv6 routes.
    #[arg(short = '6', global = true, conflicts_with = "family")]
    inet6: bool,
    /// Address family: inet, inet6 or mpls.
    #[arg(short = 'f', long = "family", global = true, value_name = "FAMILY")]
    family: Option<String>,
    /// More detail (counters).
    #[arg(short = 's', long = "stats", global = true)]
    stats: bool,
    /// Read commands from FILE ("-": standard input), one a line, as `ip -batch`; the
    /// route changes go to the router as one table change.
    #[arg(short = 'b', long = "batch", value_name = "FILE")]
    batch: Option<String>,
    /// With -batch: go on past commands that fail.
    #[arg(long = "force", requires = "batch")]
    force: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run one router in the foreground until SIGINT/SIGTERM; SIGHUP reloads the config.
    Run {
        /// The router's TOML config.
        #[arg(short, long)]
        config: PathBuf,
        /// Write the counters as JSON to this file every second and at exit.
        #[arg(long)]
        stats_file: Option<PathBuf>,
        /// The stats file's permissions, in octal (0640 lets the file's group read it).
        #[arg(long, value_name = "MODE", default_value = "0600", value_parser = parse_mode, requires = "stats_file")]
        stats_file_mode: u32,
        /// Serve Prometheus metrics at http://ADDR:PORT/metrics (PORT alone: loopback).
        #[arg(long, value_name = "ADDR:PORT", value_parser = vmpls_router::metrics::parse_addr)]
        metrics: Option<std::net::SocketAddr>,
    },
    /// Validate a config (syntax, values, and that its interfaces exist) and exit.
    Check {
        /// The router's TOML config.
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Build a lab topology in network namespaces and measure it (`vmpls-tools lab`,
    /// installed beside `vmpls`).
    #[command(disable_help_flag = true)]
    Lab {
        /// seed | frr | vpn | l2vpn, then their options (`vmpls lab --help`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<std::ffi::OsString>,
    },
    /// Benchmarks: every mode of a lab measured in one run, as ratios to kernel routing
    /// (`vmpls-tools bench`, installed beside `vmpls`).
    #[command(disable_help_flag = true)]
    Bench {
        /// seed | fib | fpm | soak, then their options (`vmpls bench --help`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<std::ffi::OsString>,
    },
    /// Routes of a running router: add, del, replace, show (iproute2 grammar;
    /// `vmpls route help`).
    #[command(alias = "ro", alias = "r")]
    Route {
        /// add|del|replace|show, then the route.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// Ports of a running router.
    #[command(alias = "l")]
    Link {
        /// show [[dev] PORT]
        #[arg(trailing_var_arg = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// VRFs of a running router: in FRR mode the kernel's (name, table, ports, routes,
    /// where each came from).
    Vrf {
        /// show [NAME]
        #[arg(trailing_var_arg = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// The neighbour table (ARP, neighbour discovery) of a running router; static
    /// neighbours.
    #[command(alias = "neighbor", alias = "neighbour", alias = "n")]
    Neigh {
        /// show [dev PORT] | add|replace ADDR lladdr MAC dev PORT | del ADDR dev PORT
        #[arg(trailing_var_arg = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// Ethernet pseudowires (VPWS) of a running router: state, labels, counters.
    Pw {
        /// show [NAME] | add NAME attachment PORT local-label L remote-label R peer ADDR
        /// [control-word on|off] | del NAME
        #[arg(trailing_var_arg = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// VPLS instances of a running router: attachment circuits, pseudowires, limits.
    Vpls {
        /// show [NAME]
        #[arg(trailing_var_arg = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// The VPLS instances' MAC tables, as iproute2's `bridge fdb show` lists a bridge's.
    Bridge {
        /// fdb show [vpls NAME]
        #[arg(trailing_var_arg = true, num_args = 0..)]
        args: Vec<String>,
    },
    /// Counters of a running router: per port, drops by reason, events (-s: all).
    Stats,
    /// Make a running router read its config again and apply the difference.
    Reload,
    /// Capture what a running router receives and sends on a port.
    Capture {
        /// The port (its name in the config).
        port: String,
        /// Write a pcap file ("-": standard output) instead of one line per frame.
        #[arg(short = 'w', value_name = "FILE")]
        write: Option<PathBuf>,
        /// Stop after this many frames.
        #[arg(short = 'c', value_name = "COUNT")]
        count: Option<u64>,
        /// Only frames with this label in their stack: label=N.
        #[arg(long, value_name = "label=N")]
        filter: Option<String>,
    },
}

impl Cli {
    fn globals(&self) -> Result<session::Globals, session::CliError> {
        let family = match (&self.family, self.inet, self.inet6) {
            (Some(f), _, _) => Some(vmpls_control::cli::parse_family(f).map_err(session::CliError::Usage)?),
            (None, true, _) => Some(Family::Inet),
            (None, _, true) => Some(Family::Inet6),
            (None, false, false) => None,
        };
        Ok(session::Globals {
            router: self.router.clone(),
            socket: self.socket.clone(),
            json: self.json,
            pretty: self.pretty,
            family,
            stats: self.stats,
        })
    }
}

/// `--stats-file-mode`: octal permissions that let no one but the router write the file.
fn parse_mode(s: &str) -> Result<u32, String> {
    let mode =
        u32::from_str_radix(s, 8).map_err(|_| format!("\"{s}\" is not an octal mode like 0600 or 0640"))?;
    if mode & !0o644 != 0 {
        return Err(format!(
            "{s}: the stats file may be readable by its group or others (0640, 0644), writable or executable by none but its owner"
        ));
    }
    Ok(mode)
}

fn main() -> ExitCode {
    // iproute2's single-dash long options.
    let args = std::env::args_os().map(|a| match a.to_str() {
        Some("-batch") => "--batch".into(),
        Some("-force") => "--force".into(),
        _ => a,
    });
    let cli = Cli::parse_from(args);
    let level = match cli.verbose {
        0 => tracing::Level::INFO,
        1 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    };
    // Plain lines (no colour codes) when stderr is not a terminal: journald, log files.
    tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    if cli.batch.is_some() && cli.command.is_some() {
        eprintln!("Error: -batch takes its commands from the file; give none after it");
        return ExitCode::from(1);
    }
    let Some(command) = &cli.command else {
        return match (&cli.batch, cli.globals()) {
            (Some(file), Ok(g)) => batch::run(&g, file, cli.force),
            (Some(_), Err(e)) => {
                eprintln!("Error: {}", e.message());
                ExitCode::from(e.code())
            }
            (None, _) => {
                let _ = <Cli as clap::CommandFactory>::command().print_help();
                ExitCode::from(2)
            }
        };
    };
    let result = match command {
        Command::Run { config, stats_file, stats_file_mode, metrics } => {
            vmpls_router::run(vmpls_router::RunOptions {
                config: config.clone(),
                stats_file: stats_file.clone(),
                stats_file_mode: *stats_file_mode,
                metrics: *metrics,
                socket: cli.socket.clone(),
            })
        }
        Command::Check { config } => vmpls_router::load_config_to_start(config).and_then(|cfg| {
            cfg.build_fib()?;
            println!("{}: ok ({} ports)", config.display(), cfg.ports.len());
            Ok(())
        }),
        Command::Lab { args } => tools("lab", args, cli.verbose),
        Command::Bench { args } => tools("bench", args, cli.verbose),
        other => return run_client(&cli, other),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vmpls: {e:#}");
            if e.downcast_ref::<vmpls_control::ConfigError>().is_some() {
                ExitCode::from(EXIT_CONFIG)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// The commands against a running router; errors print as `Error: ...`.
fn run_client(cli: &Cli, command: &Command) -> ExitCode {
    let result = cli.globals().and_then(|g| match command {
        Command::Route { args } => cli::route(&g, args),
        Command::Link { args } => cli::link(&g, args),
        Command::Neigh { args } => cli::neigh(&g, args),
        Command::Vrf { args } => cli::vrf(&g, args),
        Command::Pw { args } => cli::pw(&g, args),
        Command::Vpls { args } => cli::vpls(&g, args),
        Command::Bridge { args } => cli::bridge(&g, args),
        Command::Stats => cli::stats(&g),
        Command::Reload => cli::reload(&g),
        Command::Capture { port, write, count, filter } => capture::run(
            &g,
            &capture::CaptureArgs {
                port: port.clone(),
                write: write.clone(),
                count: *count,
                filter: filter.clone(),
            },
        ),
        Command::Run { .. } | Command::Check { .. } | Command::Lab { .. } | Command::Bench { .. } => Ok(()),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {}", e.message());
            ExitCode::from(e.code())
        }
    }
}

/// Runs `vmpls-tools SUBCOMMAND ARGS...` in this process's place: the labs and
/// benchmarks are a binary of their own beside `vmpls` (they need tokio, rtnetlink and
/// the QEMU harness, which the router does not link).
fn tools(subcommand: &str, args: &[std::ffi::OsString], verbose: u8) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe()?;
    let tools = exe.with_file_name("vmpls-tools");
    anyhow::ensure!(
        tools.is_file(),
        "`vmpls {subcommand}` runs vmpls-tools, which is not beside {} (build it: cargo build --release -p vmpls-tools)",
        exe.display()
    );
    let mut cmd = std::process::Command::new(&tools);
    cmd.args(std::iter::repeat_n("-v", usize::from(verbose))).arg(subcommand).args(args);
    Err(anyhow::Error::from(cmd.exec()).context(format!("running {}", tools.display())))
}
