//! Config errors: each names the file, the line and the key, and says what is expected.

use std::fmt;
use std::path::{Path, PathBuf};

/// Why a config file was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not TOML, or its shape is wrong: an unknown key, a missing key, a value
    /// of the wrong type.
    #[error("{}:{line}:{column}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Line, from 1.
        line: usize,
        /// Column (in characters), from 1.
        column: usize,
        /// What the TOML parser found wrong.
        message: String,
    },
    /// A value is not acceptable: a bad address, a reserved label, a next hop that is not
    /// on its port's subnet, a duplicate, ...
    #[error("{}:{line}: {field}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Line of the offending value, from 1.
        line: usize,
        /// The key, with its table: `route.via`, `label.in`, `port.interface`, ...
        field: String,
        /// What is wrong and what is expected.
        message: String,
    },
    /// The validated config still could not be turned into forwarding tables.
    #[error("{}: cannot build the forwarding table", Location(path, *line))]
    Build {
        /// The file.
        path: PathBuf,
        /// Line of the entry that failed, when known.
        line: Option<usize>,
        /// Why.
        #[source]
        source: vmpls_fib::FibError,
    },
}

struct Location<'a>(&'a Path, Option<usize>);

impl fmt::Display for Location<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(line) => write!(f, "{}:{line}", self.0.display()),
            None => write!(f, "{}", self.0.display()),
        }
    }
}

impl ConfigError {
    /// The line the error points at, when it points at one.
    pub fn line(&self) -> Option<usize> {
        match self {
            ConfigError::Read { .. } => None,
            ConfigError::Parse { line, .. } | ConfigError::Invalid { line, .. } => Some(*line),
            ConfigError::Build { line, .. } => *line,
        }
    }

    /// The key the error is about (`route.via`, ...), for [`ConfigError::Invalid`].
    pub fn field(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }
}
