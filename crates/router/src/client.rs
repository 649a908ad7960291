//! The client side of the control protocol: a connection to a router's control socket,
//! one request line out, one reply line back. Used by the `vmpls` CLI and by the tools
//! (labs, benchmarks) that drive running routers.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use vmpls_control::api::{ControlError, PROTOCOL_VERSION, Reply, Request};

/// How long a reply may take before the client gives up.
const REPLY_TIMEOUT: Duration = Duration::from_secs(20);

/// Why a request did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientError {
    /// No router reachable, or the connection failed (in words, with the socket's path).
    Connection(String),
    /// The router refused the request.
    Refused(ControlError),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Connection(m) => f.write_str(m),
            ClientError::Refused(e) => f.write_str(&e.message),
        }
    }
}

impl std::error::Error for ClientError {}

/// A connection to a router's control socket.
pub struct Connection {
    /// For writing requests.
    pub stream: UnixStream,
    /// For reading replies.
    pub reader: BufReader<UnixStream>,
    /// The socket's path, for messages.
    pub path: PathBuf,
}

/// Why connecting failed, in words.
fn connect_error(path: &Path, e: &std::io::Error) -> String {
    let p = path.display();
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            format!("no router at {p} (is it running? choose one with -r ROUTER or --socket PATH)")
        }
        std::io::ErrorKind::PermissionDenied => {
            format!("permission denied on {p}: only the user running the router (and root) may use it")
        }
        std::io::ErrorKind::ConnectionRefused => {
            format!("no router is listening on {p} (left by a router that stopped?)")
        }
        _ => format!("cannot connect to {p}: {e}"),
    }
}

impl Connection {
    /// Connects to the router whose control socket is at `path`.
    ///
    /// # Errors
    /// No router reachable there.
    pub fn open(path: &Path) -> Result<Connection, ClientError> {
        let stream =
            UnixStream::connect(path).map_err(|e| ClientError::Connection(connect_error(path, &e)))?;
        let reader = stream
            .try_clone()
            .map_err(|e| ClientError::Connection(format!("cannot use {}: {e}", path.display())))?;
        Ok(Connection { stream, reader: BufReader::new(reader), path: path.to_path_buf() })
    }

    /// Connects to the router named `router` (its socket under the run directory) or
    /// at `socket`; neither: the one router running here, if there is one.
    ///
    /// # Errors
    /// No router chosen or reachable.
    pub fn to_router(router: Option<&str>, socket: Option<&Path>) -> Result<Connection, ClientError> {
        let path = crate::socket::client_path(router, socket).map_err(ClientError::Connection)?;
        Connection::open(&path)
    }

    /// Sends a request and reads its reply's data, as JSON (for `-j`, which prints it as
    /// the router wrote it).
    ///
    /// # Errors
    /// The router refused ([`ClientError::Refused`]) or the connection failed.
    pub fn request(&mut self, req: &Request) -> Result<Option<serde_json::Value>, ClientError> {
        self.call(req)
    }

    /// Sends a request and reads its reply, whose data is a `T` (each request's type is
    /// named in [`vmpls_control::api::Answer`]).
    ///
    /// # Errors
    /// The router refused ([`ClientError::Refused`]), the connection failed, or the reply
    /// is not of the protocol or type expected.
    pub fn call<T: DeserializeOwned>(&mut self, req: &Request) -> Result<Option<T>, ClientError> {
        let path = self.path.display().to_string();
        let io = |e: std::io::Error| ClientError::Connection(format!("talking to {path}: {e}"));
        let mut line = serde_json::to_vec(&Line { version: PROTOCOL_VERSION, request: req })
            .map_err(|e| ClientError::Connection(e.to_string()))?;
        line.push(b'\n');
        self.stream.set_read_timeout(Some(REPLY_TIMEOUT)).map_err(io)?;
        self.stream.write_all(&line).map_err(io)?;
        let mut answer = String::new();
        let n = self.reader.read_line(&mut answer).map_err(io)?;
        if n == 0 {
            return Err(ClientError::Connection(format!("the router at {path} closed the connection")));
        }
        let reply: Reply<T> = serde_json::from_str(&answer)
            .map_err(|e| ClientError::Connection(format!("bad reply from the router: {e}")))?;
        reply.into_result().map_err(ClientError::Refused)
    }
}

/// A request line as the client writes it (a borrowed [`vmpls_control::api::RequestLine`]).
#[derive(serde::Serialize)]
struct Line<'a> {
    version: u32,
    #[serde(flatten)]
    request: &'a Request,
}
