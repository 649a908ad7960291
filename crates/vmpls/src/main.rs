//! `vmpls`: a userspace MPLS label-switching router for virtual networks.

mod router;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "vmpls", version, about = "A userspace MPLS router for virtual networks")]
struct Cli {
    /// More log output (repeat for more).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one router in the foreground until SIGINT/SIGTERM.
    Run {
        /// The router's TOML config.
        #[arg(short, long)]
        config: PathBuf,
        /// Write the counters as JSON to this file every second and at exit.
        #[arg(long)]
        stats_file: Option<PathBuf>,
    },
    /// Validate a config (syntax, values, and that its interfaces exist) and exit.
    Check {
        /// The router's TOML config.
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Build a lab topology in network namespaces and measure it.
    Lab {
        #[command(subcommand)]
        lab: LabCommand,
    },
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
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = match cli.verbose {
        0 => tracing::Level::INFO,
        1 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    };
    tracing_subscriber::fmt().with_max_level(level).with_writer(std::io::stderr).init();
    let result = match cli.command {
        Command::Run { config, stats_file } => router::run(router::RunOptions { config, stats_file }),
        Command::Check { config } => router::load_config(&config).and_then(|cfg| {
            cfg.build_fib()?;
            println!("{}: ok ({} ports)", config.display(), cfg.ports.len());
            Ok(())
        }),
        Command::Lab { lab: LabCommand::Seed { duration, json } } => lab_seed(Duration::from_secs(duration), json),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vmpls: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn lab_seed(duration: Duration, json: bool) -> anyhow::Result<()> {
    vmpls_lab::install_interrupt_handler()?;
    let mut opts = vmpls_lab::seed::SeedOptions::new(std::env::current_exe()?, duration);
    opts.json = json;
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
