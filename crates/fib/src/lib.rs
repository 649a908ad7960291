//! Forwarding tables: being written.
/// Index of a port in the router's port list.
pub type PortId = u16;
