//! The vmpls router as a library: one router's forwarding loop, where the sans-I/O
//! pipeline meets the ports (poll, receive a batch, process, send), and what runs around
//! it: the control server, the FPM server FRR's zebra talks to, the metrics endpoint,
//! captures, the in-kernel fast path's runtime. The `vmpls` binary is this library plus
//! the iproute2-style client; labs and benchmarks live in `vmpls-tools`, outside the
//! router's dependency tree.
//!
//! Threads and who owns what:
//!
//! - The forwarding loop (`forward`) owns the pipeline, the ports and the captures. It
//!   hands `--stats-file` a snapshot each second; a writer thread of its own
//!   ([`stats`]) writes it, so the loop never waits on the disk.
//! - The control thread ([`server`]: the control socket, route changes, reloads), the
//!   FPM server ([`fpm`]) and the metrics endpoint ([`metrics`]) never take a lock the
//!   forwarding loop needs.
//! - Route changes: the control side builds the new `Fib` (in place, copy-on-write) and
//!   stores it in the `FibHandle`; the pipeline loads it once per batch (wait-free).
//! - Counters, neighbours, captures: requests on a channel, with an eventfd in the
//!   loop's poll set to wake it ([`protocol::LoopHandle`]). Chosen over publishing a
//!   snapshot every tick because the answer is exact (`vmpls stats` right after a
//!   transfer shows all of it, and a metrics scrape and `vmpls stats` agree), it costs
//!   nothing while nobody asks, and capture subscriptions land in state the loop owns:
//!   with no capture running the per-batch check is one `Vec::is_empty` on a local.
//!
//! Modules depend downwards only: `run` starts everything; `server` talks to the loop
//! through [`protocol`]; [`fpm`], [`kernel`] and [`metrics`] reach the server through
//! traits it implements ([`fpm::RouteSink`], [`kernel::KernelSink`],
//! [`metrics::StatsSource`]), so none of them imports it; `forward` uses `links`,
//! [`capture`] and [`stats`] (the one [`vmpls_control::api::Stats`] schema).

pub mod capture;
pub mod claim;
pub mod client;
mod config;
pub mod fastpath;
mod forward;
pub mod fpm;
pub mod kernel;
mod links;
pub mod loop_time;
pub mod metrics;
mod offloads;
mod open;
pub mod protocol;
pub mod pw_channel;
pub mod pw_standin;
mod run;
pub mod server;
pub mod signals;
pub mod socket;
pub mod stats;
#[cfg(test)]
mod testing;
pub mod vrf_lookup;
pub mod vrfs;

pub use config::{load_config, load_config_to_start};
pub use run::{RunOptions, return_freed_memory, run};
