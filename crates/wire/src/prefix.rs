//! IP prefixes: an address with a prefix length (`198.18.1.2/24`), and the one place
//! host bits are cleared ([`mask`]) for the config, the tables, the FIB and the labs.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// The longest prefix of `addr`'s family: 32 or 128.
pub fn max_len(addr: IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

/// `addr` with the bits beyond `len` cleared (`len` at or above [`max_len`] keeps it all).
pub fn mask(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32u32.saturating_sub(u32::from(len))).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & m))
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128u32.saturating_sub(u32::from(len))).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & m))
        }
    }
}

/// An IPv4 or IPv6 address with a prefix length, e.g. `198.18.1.2/24`.
///
/// As an interface address it keeps its host bits; [`IpPrefix::network`] clears them
/// for use as a route destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpPrefix {
    addr: IpAddr,
    len: u8,
}

/// Why an [`IpPrefix`] could not be built or parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixError(String);

impl fmt::Display for PrefixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PrefixError {}

impl IpPrefix {
    /// Builds a prefix; fails if `len` is longer than the address (32 or 128 bits).
    pub fn new(addr: IpAddr, len: u8) -> Result<Self, PrefixError> {
        let max = max_len(addr);
        if len > max {
            return Err(PrefixError(format!("prefix length {len} is longer than {max} for {addr}")));
        }
        Ok(Self { addr, len })
    }

    /// The default route of `addr`'s family: `0.0.0.0/0` or `::/0`.
    pub fn default_for(addr: IpAddr) -> Self {
        match addr {
            IpAddr::V4(_) => Self { addr: Ipv4Addr::UNSPECIFIED.into(), len: 0 },
            IpAddr::V6(_) => Self { addr: Ipv6Addr::UNSPECIFIED.into(), len: 0 },
        }
    }

    /// The address, host bits included.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length in bits.
    pub fn len(&self) -> u8 {
        self.len
    }

    /// Whether the prefix length is zero (a default route).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The same prefix with the host bits cleared (`198.18.1.2/24` -> `198.18.1.0/24`).
    pub fn network(&self) -> Self {
        Self { addr: mask(self.addr, self.len), len: self.len }
    }

    /// Whether `addr` lies inside this prefix.
    pub fn contains(&self, addr: IpAddr) -> bool {
        match Self::new(addr, self.len) {
            Ok(p) => addr.is_ipv4() == self.addr.is_ipv4() && p.network() == self.network(),
            Err(_) => false,
        }
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl FromStr for IpPrefix {
    type Err = PrefixError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, len) =
            s.split_once('/').ok_or_else(|| PrefixError(format!("{s:?} is not ADDRESS/LENGTH")))?;
        let addr: IpAddr = addr.parse().map_err(|_| PrefixError(format!("{addr:?} is not an IP address")))?;
        let len: u8 = len.parse().map_err(|_| PrefixError(format!("{len:?} is not a prefix length")))?;
        Self::new(addr, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_masks_v4_and_v6() {
        let p: IpPrefix = "198.18.1.2/24".parse().unwrap();
        assert_eq!(p.network().to_string(), "198.18.1.0/24");
        assert!(p.contains("198.18.1.200".parse().unwrap()));
        assert!(!p.contains("198.18.2.1".parse().unwrap()));
        let p: IpPrefix = "2001:db8:1::2/64".parse().unwrap();
        assert_eq!(p.network().to_string(), "2001:db8:1::/64");
        let d = IpPrefix::default_for("2001:db8::1".parse().unwrap());
        assert_eq!(d.to_string(), "::/0");
        assert!(d.contains("2001:db8::1".parse().unwrap()));
        assert!(!d.contains("198.18.0.1".parse().unwrap()));
    }

    #[test]
    fn mask_clears_host_bits_at_every_length() {
        let a: IpAddr = "198.18.255.255".parse().unwrap();
        assert_eq!(mask(a, 0), "0.0.0.0".parse::<IpAddr>().unwrap());
        assert_eq!(mask(a, 15), "198.18.0.0".parse::<IpAddr>().unwrap());
        assert_eq!(mask(a, 32), a);
        let b: IpAddr = "2001:db8:ffff::1".parse().unwrap();
        assert_eq!(mask(b, 32), "2001:db8::".parse::<IpAddr>().unwrap());
        assert_eq!(mask(b, 128), b);
        assert_eq!(mask(b, 0), "::".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn rejects_malformed_prefixes() {
        for bad in ["198.18.1.2", "198.18.1.2/33", "2001:db8::/129", "x/8", "1.2.3.4/-1"] {
            assert!(bad.parse::<IpPrefix>().is_err(), "{bad} accepted");
        }
    }
}
