//! IP prefixes in `address/length` notation: the one prefix type, from `vmpls-wire`.

pub use vmpls_wire::prefix::{IpPrefix, PrefixError};
