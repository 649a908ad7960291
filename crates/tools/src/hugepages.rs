//! 2 MiB hugepages for the DPDK processes of the bench environment (testpmd, OVS-DPDK):
//! reserved on top of what the machine has reserved (others may be using theirs), a
//! hugetlbfs of their own mounted for them, and both given back.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

/// The size of the pages whose count is `/proc/sys/vm/nr_hugepages` on x86_64.
pub const HUGEPAGE_MB: u32 = 2;

const NR_HUGEPAGES: &str = "/proc/sys/vm/nr_hugepages";

fn read_nr_hugepages() -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(NR_HUGEPAGES).with_context(|| format!("reading {NR_HUGEPAGES}"))?;
    text.trim().parse().with_context(|| format!("{NR_HUGEPAGES}: {text:?}"))
}

fn write_nr_hugepages(n: u64) -> anyhow::Result<()> {
    std::fs::write(NR_HUGEPAGES, n.to_string()).with_context(|| format!("writing {n} to {NR_HUGEPAGES}"))
}

/// Sets the count to `change(count)` and returns (before, after as the kernel set it).
/// One change at a time in the process: tests that run at once reserve pages together,
/// and two reads before two writes would lose one reservation.
fn change_nr_hugepages(change: impl FnOnce(u64) -> u64) -> anyhow::Result<(u64, u64)> {
    static COUNT: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = COUNT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let before = read_nr_hugepages().context("reading the hugepage count (are we root?)")?;
    write_nr_hugepages(change(before))?;
    Ok((before, read_nr_hugepages()?))
}

/// 2 MiB hugepages reserved on top of the machine's count and a hugetlbfs mounted for
/// them; both given back by [`Hugepages::release`] or on drop (also when a test panics).
#[derive(Debug)]
pub struct Hugepages {
    pages: u64,
    dir: PathBuf,
    mounted: bool,
}

impl Hugepages {
    /// Reserves `pages` more hugepages and mounts a hugetlbfs at `dir` (created). Fails
    /// with what to do when the kernel cannot find that many free pages.
    pub fn reserve(pages: u64, dir: &Path) -> anyhow::Result<Hugepages> {
        // The kernel sets the count to what it could allocate: give back exactly that.
        let (before, after) = change_nr_hugepages(|n| n + pages)?;
        let added = after.saturating_sub(before);
        let mut h = Hugepages { pages: added, dir: dir.to_path_buf(), mounted: false };
        if added < pages {
            bail!(
                "could not reserve {pages} hugepages of {HUGEPAGE_MB} MiB (the kernel found {added}): \
                 free some memory (echo 3 > /proc/sys/vm/drop_caches; echo 1 > /proc/sys/vm/compact_memory) and try again"
            );
        }
        std::fs::create_dir_all(dir)?;
        let out = Command::new("mount").args(["-t", "hugetlbfs", "nodev"]).arg(dir).output()?;
        anyhow::ensure!(
            out.status.success(),
            "mounting a hugetlbfs at {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        h.mounted = true;
        Ok(h)
    }

    /// The mount point, for DPDK's `--huge-dir`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Unmounts the hugetlbfs, removes its mount point and gives the pages back, saying
    /// what failed (dropping does the same and logs it).
    pub fn release(mut self) -> anyhow::Result<()> {
        self.give_back()
    }

    fn give_back(&mut self) -> anyhow::Result<()> {
        let unmounted = if self.mounted { self.unmount() } else { Ok(()) };
        // Given back even when the unmount failed: pages still mapped become surplus
        // pages, which the kernel frees once their last user lets go.
        if self.pages > 0 {
            // Relative to the count now: others may have reserved or released theirs meanwhile.
            let pages = self.pages;
            change_nr_hugepages(|now| now.saturating_sub(pages))?;
            self.pages = 0;
        }
        unmounted
    }

    fn unmount(&mut self) -> anyhow::Result<()> {
        let out = Command::new("umount").arg(&self.dir).output().context("running umount")?;
        if !out.status.success() {
            bail!("umount {}: {}", self.dir.display(), String::from_utf8_lossy(&out.stderr).trim());
        }
        self.mounted = false;
        let _ = std::fs::remove_dir(&self.dir);
        Ok(())
    }
}

impl Drop for Hugepages {
    fn drop(&mut self) {
        if let Err(e) = self.give_back() {
            tracing::warn!("giving back hugepages at {}: {e:#}", self.dir.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mounted_at(dir: &Path) -> bool {
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
        mounts.lines().any(|l| l.split_whitespace().nth(1) == Some(dir.to_str().unwrap()))
    }

    /// Needs root (scripts/test runs as root); the count itself is not checked, as other
    /// processes may reserve or release theirs at the same time.
    #[test]
    fn a_reservation_mounts_a_hugetlbfs_and_release_takes_it_away() {
        let dir = std::env::temp_dir().join(format!("vmpls-hugepages-test-{}", std::process::id()));
        let pages = Hugepages::reserve(1, &dir).unwrap();
        assert!(mounted_at(pages.dir()), "no hugetlbfs at {}", dir.display());
        pages.release().unwrap();
        assert!(!mounted_at(&dir));
        assert!(!dir.exists());
    }
}
