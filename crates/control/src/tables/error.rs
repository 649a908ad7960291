//! Why the tables refused a change or a query.

use std::net::IpAddr;

use crate::api::{ControlError, ErrorKind};

/// Why the tables refused a change or a query. What a person reads is
/// [`TablesError::message`]: this error and its sources, as the CLI prints them.
#[derive(Debug, thiserror::Error)]
pub enum TablesError {
    /// The request does not fit the router: a route that does not resolve, a label out of
    /// range, a destination that has a route or none. The sentence says what and how to
    /// fix it.
    #[error("{0}")]
    Invalid(String),
    /// A VRF the config does not define.
    #[error("VRF \"{vrf}\" is not defined (VRFs: {defined})")]
    UnknownVrf {
        /// The VRF asked for.
        vrf: String,
        /// The VRFs there are, comma-separated.
        defined: String,
    },
    /// `route get`: no route holds the address.
    #[error("no route to {addr} in VRF \"{vrf}\"")]
    NoRoute {
        /// The address.
        addr: IpAddr,
        /// The VRF.
        vrf: String,
    },
    /// `reload`: a route added at runtime would not fit the new file's ports or VRFs.
    #[error("the route {what} (added at runtime) would be invalid")]
    RuntimeRoute {
        /// Which route: `to PREFIX` or `for label LABEL`.
        what: String,
        /// Why.
        #[source]
        source: Box<TablesError>,
    },
    /// `reload`: the file changes what only a restart can apply.
    #[error("{why}: restart the router to apply this (the running config stays)")]
    RestartNeeded {
        /// What changed.
        why: String,
    },
    /// The forwarding tables refused an entry the checks let through.
    #[error("{what}")]
    Fib {
        /// The entry: `PREFIX/LENGTH` or `label LABEL`.
        what: String,
        /// Why.
        #[source]
        source: vmpls_fib::FibError,
    },
    /// The forwarding tables could not be built from the routes in force.
    #[error(transparent)]
    Build(crate::ConfigError),
    /// A next hop's outgoing label stack.
    #[error(transparent)]
    LabelStack(#[from] crate::LabelStackError),
    /// A destination that is not a prefix.
    #[error(transparent)]
    Prefix(#[from] crate::PrefixError),
    /// A batch the forwarding tables refused as a whole; nothing of it applied.
    #[error("the batch was not applied")]
    Batch(#[source] Box<TablesError>),
}

impl TablesError {
    /// This error and its sources, `: `-separated, as the CLI prints them.
    pub fn message(&self) -> String {
        let mut msg = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(s) = source {
            msg = format!("{msg}: {s}");
            source = s.source();
        }
        msg
    }

    /// The kind of failure the control API reports.
    pub fn kind(&self) -> ErrorKind {
        match self {
            TablesError::RestartNeeded { .. } => ErrorKind::RestartNeeded,
            _ => ErrorKind::Invalid,
        }
    }
}

impl From<String> for TablesError {
    fn from(message: String) -> TablesError {
        TablesError::Invalid(message)
    }
}

impl From<&str> for TablesError {
    fn from(message: &str) -> TablesError {
        TablesError::Invalid(message.to_string())
    }
}

impl From<TablesError> for ControlError {
    fn from(e: TablesError) -> ControlError {
        ControlError::new(e.kind(), e.message())
    }
}
