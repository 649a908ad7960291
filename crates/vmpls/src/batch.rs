//! `vmpls -batch FILE` (as `ip -batch`: one command a line; the route changes between
//! other commands go to the router as one table change, the other commands run as the
//! CLI runs them).

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::time::Duration;

use vmpls_control::api::{BatchSummary, Family, Request, RequestLine, RouteSpec};
use vmpls_control::batch::{
    BatchCommand, BatchLine, BatchOp, BatchReader, MAX_BATCH, Object, parse_batch_line,
};
use vmpls_control::tables::Change;

use vmpls_router::client::Connection;

use crate::cli;
use crate::session::{CliError, Globals, connect, io_error, read_reply, send_line, usage};

/// How long the CLI waits for a router's answer to a batch (a million changes take
/// seconds).
const BATCH_TIMEOUT: Duration = Duration::from_secs(600);

/// A `route-batch` being sent: the changes go to the router as they are read, and only
/// their line numbers stay here (the router answers by index).
struct Open {
    conn: Connection,
    w: BufWriter<UnixStream>,
    lines: Vec<usize>,
    line: Vec<u8>,
}

impl Open {
    fn start(g: &Globals, force: bool) -> Result<Open, CliError> {
        let mut conn = connect(g)?;
        send_line(&mut conn, &RequestLine::new(Request::RouteBatch { force }))?;
        let w = conn.stream.try_clone().map_err(|e| io_error(&conn, &e))?;
        Ok(Open { conn, w: BufWriter::with_capacity(1 << 16, w), lines: Vec::new(), line: Vec::new() })
    }

    fn push(&mut self, op: &BatchOp) -> io::Result<()> {
        self.line.clear();
        serde_json::to_writer(&mut self.line, op)?;
        self.line.push(b'\n');
        self.w.write_all(&self.line)
    }

    /// Commits and returns the router's summary.
    fn commit(mut self) -> Result<(Vec<usize>, BatchSummary), CliError> {
        let sent = self.push(&BatchOp::Commit).and_then(|()| self.w.flush());
        self.conn.stream.set_read_timeout(Some(BATCH_TIMEOUT)).map_err(|e| io_error(&self.conn, &e))?;
        // A router that stopped reading (a line it refused) has said why.
        let reply = match (read_reply(&mut self.conn), sent) {
            (Ok(r), _) => r,
            (Err(_), Err(e)) => return Err(io_error(&self.conn, &e)),
            (Err(e), Ok(())) => return Err(e),
        };
        if !reply.ok {
            return Err(CliError::Router(
                reply.error.map_or_else(|| "the router refused".into(), |e| e.message),
            ));
        }
        let sum = serde_json::from_value(reply.data.unwrap_or_default())
            .map_err(|e| usage(format!("bad reply from the router: {e}")))?;
        Ok((self.lines, sum))
    }
}

/// A batch being run: where it comes from, whether to go on past failures, how it went.
struct Batch<'a> {
    g: &'a Globals,
    name: &'a str,
    force: bool,
    failed: bool,
    /// The route changes sent and not yet committed.
    open: Option<Open>,
}

impl Batch<'_> {
    /// As `ip -batch`: the command's error, then which line it was.
    fn fail(&mut self, line: impl std::fmt::Display, message: &str) {
        eprintln!("Error: {message}");
        eprintln!("Command failed {}:{line}", self.name);
        self.failed = true;
    }

    /// Sends a route change; `false` if the batch must stop.
    fn change(&mut self, line: usize, change: Change, route: RouteSpec) -> bool {
        if self.open.is_none() {
            match Open::start(self.g, self.force) {
                Ok(o) => self.open = Some(o),
                Err(e) => {
                    self.fail(line, e.message());
                    return self.force;
                }
            }
        }
        let Some(open) = &mut self.open else { return false };
        open.lines.push(line);
        // A failed write is reported by the commit, with the router's reason if it gave one.
        if open.push(&BatchOp::new(change, route)).is_err() || open.lines.len() >= MAX_BATCH {
            return self.commit();
        }
        true
    }

    /// Commits the changes sent as one table change; `false` if the batch must stop.
    fn commit(&mut self) -> bool {
        let Some(open) = self.open.take() else { return true };
        let (first, last) = (open.lines.first().copied(), open.lines.last().copied());
        match open.commit() {
            Ok((lines, sum)) => {
                for f in &sum.failed {
                    let line = usize::try_from(f.index).ok().and_then(|i| lines.get(i)).copied().unwrap_or(0);
                    self.fail(line, &f.error);
                }
                sum.failed.is_empty() || self.force
            }
            Err(e) => {
                // The router refused the whole group (or could not be reached): none of
                // it applied.
                match (first, last) {
                    (Some(a), Some(b)) if a != b => self.fail(format!("{a}-{b}"), e.message()),
                    (Some(a), _) => self.fail(a, e.message()),
                    _ => self.fail("", e.message()),
                }
                self.force
            }
        }
    }

    /// Runs a command that is not a route change, once the changes before it are in force.
    fn other(&mut self, line: usize, family: Option<Family>, object: Object, args: &[String]) {
        let g = Globals { family, ..self.g.clone() };
        let r = match object {
            Object::Route => cli::route(&g, args),
            Object::Link => cli::link(&g, args),
            Object::Neigh => cli::neigh(&g, args),
            Object::Stats | Object::Reload if !args.is_empty() => {
                Err(usage(format!("either \"{}\" is duplicate, or it is garbage", args[0])))
            }
            Object::Stats => cli::stats(&g),
            Object::Reload => cli::reload(&g),
        };
        if let Err(e) = r {
            self.fail(line, e.message());
        }
    }
}

/// `vmpls -batch FILE` (`-` for standard input) with `-force` to go on past failures.
/// Exits 1 if any command failed, as `ip -batch`.
pub fn run(g: &Globals, name: &str, force: bool) -> ExitCode {
    let input: Box<dyn BufRead> = if name == "-" {
        Box::new(io::stdin().lock())
    } else {
        match File::open(name) {
            Ok(f) => Box::new(BufReader::with_capacity(1 << 16, f)),
            Err(e) => {
                eprintln!("Error: cannot open \"{name}\" for reading: {e}");
                return ExitCode::FAILURE;
            }
        }
    };
    let mut reader = BatchReader::new(input);
    let mut b = Batch { g, name, force, failed: false, open: None };
    let mut go_on = true;
    while go_on {
        let BatchLine { line, words } = match reader.next_command() {
            Ok(Some(l)) => l,
            Ok(None) => break,
            Err(e) => {
                b.commit();
                eprintln!("Error: reading {name}: {e}");
                return ExitCode::FAILURE;
            }
        };
        match words.and_then(|w| parse_batch_line(&w, g.family)) {
            Ok(BatchCommand::Change(change, route)) => go_on = b.change(line, change, route),
            Ok(BatchCommand::Other { family, object, args }) => {
                go_on = b.commit();
                if go_on {
                    b.other(line, family, object, &args);
                    go_on = !b.failed || force;
                }
            }
            Err(message) => {
                // The lines before it go first, as they would have with `ip -batch`.
                go_on = b.commit();
                if go_on {
                    b.fail(line, &message);
                    go_on = force;
                }
            }
        }
    }
    if go_on {
        b.commit();
    }
    if b.failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}
