//! The bench environment of `vmpls-tools`, as a library for its binary and its tests:
//! hugepages reserved and given back ([`hugepages`]), DPDK's testpmd as a vhost-user
//! guest ([`testpmd`]) and a private Open vSwitch with DPDK as the baseline switch
//! ([`ovs_dpdk`]).

pub mod hugepages;
pub mod ovs_dpdk;
pub mod testpmd;
