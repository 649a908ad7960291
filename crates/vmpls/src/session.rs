//! What every CLI command shares: the options before the object, the error it prints,
//! and the connection to the router with its line-at-a-time requests and replies.

use std::io::{self, BufRead, Write};
use std::path::PathBuf;
use std::time::Duration;

use vmpls_control::api::{Family, Reply};
use vmpls_router::client::{ClientError, Connection};

/// Options before the object, as in `ip -j -p -6 route ...`.
#[derive(Debug, Clone, Default)]
pub struct Globals {
    /// `-r ROUTER`.
    pub router: Option<String>,
    /// `--socket PATH`.
    pub socket: Option<PathBuf>,
    /// `-j`.
    pub json: bool,
    /// `-p`.
    pub pretty: bool,
    /// `-4`, `-6`, `-f FAMILY`.
    pub family: Option<Family>,
    /// `-s`.
    pub stats: bool,
}

/// A CLI failure; printed as `Error: MESSAGE`.
#[derive(Debug)]
pub enum CliError {
    /// The command line or the connection (exit 1).
    Usage(String),
    /// The router refused the request (exit 2).
    Router(String),
}

impl CliError {
    /// The message.
    pub fn message(&self) -> &str {
        match self {
            CliError::Usage(m) | CliError::Router(m) => m,
        }
    }

    /// The exit code.
    pub fn code(&self) -> u8 {
        match self {
            CliError::Usage(_) => 1,
            CliError::Router(_) => 2,
        }
    }
}

/// A command-line or connection failure.
pub fn usage(m: impl Into<String>) -> CliError {
    CliError::Usage(m.into())
}

impl From<ClientError> for CliError {
    fn from(e: ClientError) -> CliError {
        match e {
            ClientError::Connection(m) => CliError::Usage(m),
            ClientError::Refused(e) => CliError::Router(e.message),
        }
    }
}

/// Connects to the router `g` names.
///
/// # Errors
/// No router chosen or reachable.
pub fn connect(g: &Globals) -> Result<Connection, CliError> {
    Ok(Connection::to_router(g.router.as_deref(), g.socket.as_deref())?)
}

/// A failure talking to the router, naming its socket.
pub fn io_error(conn: &Connection, e: &io::Error) -> CliError {
    usage(format!("talking to {}: {e}", conn.path.display()))
}

/// Sends one request line.
pub fn send_line(conn: &mut Connection, req: &impl serde::Serialize) -> Result<(), CliError> {
    let mut line = serde_json::to_vec(req).map_err(|e| usage(e.to_string()))?;
    line.push(b'\n');
    conn.stream.set_read_timeout(Some(Duration::from_secs(20))).map_err(|e| io_error(conn, &e))?;
    conn.stream.write_all(&line).map_err(|e| io_error(conn, &e))
}

/// Reads one reply line.
pub fn read_reply(conn: &mut Connection) -> Result<Reply, CliError> {
    let mut answer = String::new();
    let n = conn.reader.read_line(&mut answer).map_err(|e| io_error(conn, &e))?;
    if n == 0 {
        return Err(usage(format!("the router at {} closed the connection", conn.path.display())));
    }
    serde_json::from_str(&answer).map_err(|e| usage(format!("bad reply from the router: {e}")))
}
