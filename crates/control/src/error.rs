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

/// Why an outgoing label stack is refused ([`crate::check_out_stack`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelStackError {
    /// A label wider than 20 bits.
    #[error("label {label} is out of range; labels are 0 to {max} (20 bits)", max = vmpls_fib::MAX_LABEL)]
    OutOfRange {
        /// The label.
        label: u32,
    },
    /// More labels than a router forwards.
    #[error(
        "{depth} labels: a router forwards label stacks of at most {max} entries, so a stack this deep would be dropped",
        max = vmpls_fib::MAX_STACK_DEPTH
    )]
    TooDeep {
        /// How many labels.
        depth: usize,
    },
    /// Implicit null inside a longer stack.
    #[error(
        "implicit null (3) never goes on the wire: give it alone for penultimate-hop popping, not inside a stack"
    )]
    ImplicitNullInStack,
    /// Explicit null above the bottom of the stack.
    #[error(
        "label {label} ({name}) goes only at the bottom of a stack (RFC 3032): the packet under it must be IP"
    )]
    ExplicitNullNotAtBottom {
        /// The label.
        label: u32,
        /// Its reserved name.
        name: &'static str,
    },
    /// The explicit null of the other IP family.
    #[error(
        "label {label} ({name}) would announce the wrong payload: the route carries {family} packets, whose explicit null is {right}"
    )]
    WrongExplicitNull {
        /// The label.
        label: u32,
        /// Its reserved name.
        name: &'static str,
        /// The route's family, `IPv4` or `IPv6`.
        family: &'static str,
        /// The family's explicit null.
        right: u32,
    },
    /// Another reserved label.
    #[error(
        "label {label} ({name}) is reserved (0-15): an outgoing stack may hold only explicit null (0 IPv4, 2 IPv6) at its bottom, or 3 (implicit null) alone"
    )]
    Reserved {
        /// The label.
        label: u32,
        /// Its reserved name.
        name: &'static str,
    },
}

/// Why a prefix given to the tables or the CLI does not parse ([`crate::tables::parse_prefix`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// Not `address/length`, an address or `default`.
    #[error("\"{text}\" is not a prefix; expected address/length like 198.18.2.0/24 or 2001:db8:2::/64")]
    Malformed {
        /// What was given.
        text: String,
    },
    /// A length past the address's bits.
    #[error("\"{text}\": prefix length /{len} is longer than the address (at most /{max})")]
    TooLong {
        /// What was given.
        text: String,
        /// The length given.
        len: u8,
        /// The address's bits.
        max: u8,
    },
}
