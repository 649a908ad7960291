//! The calling process and others.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The kernel's clock ticks a second (`sysconf(_SC_CLK_TCK)`): the unit of the CPU times
/// in `/proc/PID/stat`.
pub fn clock_ticks_per_second() -> u64 {
    rustix::param::clock_ticks_per_second()
}

/// CPU seconds (user + system, all threads) process `pid` has used so far, from
/// `/proc/PID/stat`.
pub fn cpu_seconds(pid: u32) -> io::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    cpu_seconds_of_stat(&stat)
        .map(|ticks| ticks as f64 / clock_ticks_per_second().max(1) as f64)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("malformed /proc/{pid}/stat")))
}

/// utime + stime, in clock ticks, of a `/proc/PID/stat` line.
fn cpu_seconds_of_stat(stat: &str) -> Option<u64> {
    // The command name (field 2, in parentheses) may hold spaces and ")"; the fields
    // after its last ")" are plain. utime and stime are fields 14 and 15: 11 and 12 after it.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// Confines the calling thread, and every thread it starts from then on, to `cpus`,
/// each one it may run on now ([`check_cpus`]).
pub fn run_on_cpus(cpus: &[u16]) -> io::Result<()> {
    let set = check_cpus(cpus)?;
    Ok(rustix::thread::sched_setaffinity(None, &set)?)
}

/// The CPUs the calling thread may run on (online, and in its cpuset), ascending.
pub fn allowed_cpus() -> io::Result<Vec<u16>> {
    Ok(cpus_in(&rustix::thread::sched_getaffinity(None)?))
}

fn cpus_in(set: &rustix::thread::CpuSet) -> Vec<u16> {
    (0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).map(|c| c as u16).collect()
}

/// Whether the calling thread may run on each of `cpus` (online, and in its cpuset): an
/// error names those it may run on otherwise, rather than leaving the kernel to use
/// quietly the ones of `cpus` it can.
pub fn check_cpus(cpus: &[u16]) -> io::Result<rustix::thread::CpuSet> {
    use rustix::thread::CpuSet;
    let allowed = rustix::thread::sched_getaffinity(None)?;
    let mut set = CpuSet::new();
    for &cpu in cpus {
        let cpu = usize::from(cpu);
        if cpu >= CpuSet::MAX_CPU || !allowed.is_set(cpu) {
            let here: Vec<String> = cpus_in(&allowed).iter().map(u16::to_string).collect();
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("CPU {cpu} is not one this process may run on (those are {})", here.join(",")),
            ));
        }
        set.set(cpu);
    }
    if set.count() == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no CPU given"));
    }
    Ok(set)
}

/// Whether the process runs as root (effective user 0).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The process's effective user ID.
pub fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Sends `signal` (`libc::SIGTERM`, ...) to process `pid`.
pub fn kill(pid: u32, signal: libc::c_int) -> io::Result<()> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
    let sig = rustix::process::Signal::from_named_raw(signal)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    Ok(rustix::process::kill_process(pid, sig)?)
}

/// Sends `signal` to every process of the group `pgid` leads.
pub fn kill_group(pgid: u32, signal: libc::c_int) -> io::Result<()> {
    let pid = i32::try_from(pgid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
    let sig = rustix::process::Signal::from_named_raw(signal)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    Ok(rustix::process::kill_process_group(pid, sig)?)
}

/// Makes `cmd`'s process receive `SIGKILL` when the thread that spawned it exits
/// (`PR_SET_PDEATHSIG`), so it cannot outlive a crashed parent.
pub fn kill_with_parent(cmd: &mut Command) {
    // SAFETY: runs in the child between fork and exec; prctl(2) is a direct syscall,
    // async-signal-safe, and the closure allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            Ok(())
        });
    }
}

/// Takes an exclusive `flock` on `file`, waiting for it; it is released by [`unlock`] or
/// when the file is closed.
pub fn lock_exclusive(file: &File) -> io::Result<()> {
    Ok(rustix::fs::flock(file.as_fd(), rustix::fs::FlockOperation::LockExclusive)?)
}

/// Tries to take an exclusive `flock` on `file` without waiting: `false` if another holds
/// one.
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    match rustix::fs::flock(file.as_fd(), rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Sets the process's file mode creation mask; returns the previous one.
pub fn umask(mask: u32) -> u32 {
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(mask)).as_raw_mode()
}

/// The id of the group called `name` (`getgrnam_r`: `/etc/group` and whatever else the
/// system's name service consults); `Ok(None)` when there is no such group.
///
/// # Errors
/// The name service failed (not: the group does not exist), or `name` holds a NUL.
pub fn group_id(name: &str) -> io::Result<Option<u32>> {
    let cname = std::ffi::CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: plain C data; all zeroes is a valid (empty) value, overwritten by the call.
        let mut group: libc::group = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::group = std::ptr::null_mut();
        // SAFETY: `cname` is NUL-terminated; `group`, `buf` (for `buf.len()` bytes) and
        // `found` are valid for writes for the whole call and outlive it; the strings the
        // entry points into live in `buf`, which is not read through them here.
        let rc = unsafe {
            libc::getgrnam_r(cname.as_ptr(), &mut group, buf.as_mut_ptr().cast(), buf.len(), &mut found)
        };
        match rc {
            0 if found.is_null() => return Ok(None),
            0 => return Ok(Some(group.gr_gid)),
            libc::ERANGE if buf.len() < 1 << 20 => buf.resize(buf.len() * 4, 0),
            // "Not found" as some name services report it.
            libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM => return Ok(None),
            e => return Err(io::Error::from_raw_os_error(e)),
        }
    }
}

/// Gives the memory the allocator holds free back to the system (glibc's
/// `malloc_trim(0)`).
pub fn trim_heap() {
    // SAFETY: malloc_trim only walks and trims glibc's own heap; it takes no pointers.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Releases a `flock` taken with [`lock_exclusive`].
pub fn unlock(file: &File) -> io::Result<()> {
    Ok(rustix::fs::flock(file.as_fd(), rustix::fs::FlockOperation::Unlock)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_runs_where_it_is_confined_and_a_cpu_it_may_not_use_is_refused() {
        // In a thread of its own: the test harness's threads keep their placement.
        std::thread::spawn(|| {
            let allowed = rustix::thread::sched_getaffinity(None).unwrap();
            let first = (0..1024).find(|&c| allowed.is_set(c)).unwrap();
            run_on_cpus(&[first as u16]).unwrap();
            let now = rustix::thread::sched_getaffinity(None).unwrap();
            assert_eq!(now.count(), 1);
            assert!(now.is_set(first));
            // Started after: confined alike.
            let child =
                std::thread::spawn(|| rustix::thread::sched_getaffinity(None).unwrap().count()).join();
            assert_eq!(child.unwrap(), 1);
            // Outside what it may use now (it was confined to one): refused, unchanged.
            let other = if first == 0 { 1 } else { 0 };
            let e = run_on_cpus(&[first as u16, other]).unwrap_err();
            assert!(
                e.to_string()
                    .contains(&format!("CPU {other} is not one this process may run on (those are {first})")),
                "{e}"
            );
            assert_eq!(rustix::thread::sched_getaffinity(None).unwrap().count(), 1);
            assert!(run_on_cpus(&[]).is_err());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_second_exclusive_lock_on_a_file_is_refused_until_released() {
        let path = std::env::temp_dir().join(format!("vmpls-sys-lock-{}", std::process::id()));
        let a = File::create(&path).unwrap();
        let b = File::open(&path).unwrap();
        assert!(try_lock_exclusive(&a).unwrap());
        assert!(!try_lock_exclusive(&b).unwrap());
        unlock(&a).unwrap();
        assert!(try_lock_exclusive(&b).unwrap());
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn groups_are_found_by_name() {
        assert_eq!(group_id("root").unwrap(), Some(0));
        assert_eq!(group_id("no-such-group-vmpls").unwrap(), None);
        assert!(group_id("a\0b").is_err());
    }
}

#[cfg(test)]
mod cpu_tests {
    use super::*;

    #[test]
    fn cpu_time_is_read_after_the_command_name() {
        let line = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0 1 2 3";
        assert_eq!(cpu_seconds_of_stat(line), Some(325));
        assert_eq!(cpu_seconds_of_stat("4242 (x) S 1"), None);
        assert!(cpu_seconds(std::process::id()).unwrap() >= 0.0);
    }
}
