//! The control socket's VPLS requests: `vpls-show` (the instances, their members' state)
//! and `fdb-show` (their MAC tables, as `bridge fdb show` lists a bridge's), both from
//! the tables and one answer of the forwarding loop, which holds the MAC tables and
//! follows the attachment circuits' links.

use vmpls_control::api::{self, FdbEntry, Mac, VplsStatus};
use vmpls_dataplane::FdbDev;

use super::Server;

impl Server {
    /// `vpls-show`.
    pub(super) fn vpls_show(&self) -> anyhow::Result<Vec<VplsStatus>> {
        let view = self.lp.vpls()?;
        let t = self.tables();
        let link_up = |p: vmpls_fib::PortId| view.link_up.get(usize::from(p)).copied().unwrap_or(false);
        let macs = |name: &str| view.fdb.iter().filter(|e| e.vpls == name).count() as u64;
        Ok(t.vpls_status(link_up, macs))
    }

    /// `fdb-show [vpls NAME]`.
    pub(super) fn fdb_show(&self, vpls: Option<&str>) -> anyhow::Result<Vec<FdbEntry>> {
        if let Some(name) = vpls
            && !self.tables().config().vpls.iter().any(|v| v.name == name)
        {
            anyhow::bail!("no VPLS named \"{name}\"");
        }
        let view = self.lp.vpls()?;
        Ok(view
            .fdb
            .into_iter()
            .filter(|e| vpls.is_none_or(|n| e.vpls == n))
            .map(|e| {
                let (ifname, pw) = match e.dev {
                    FdbDev::Port(p) => (Some(p), None),
                    FdbDev::Pw(p) => (None, Some(p)),
                };
                api::FdbEntry {
                    mac: Mac(e.mac),
                    ifname,
                    pw,
                    master: e.vpls,
                    state: String::new(),
                    updated: e.age_s,
                }
            })
            .collect())
    }
}
