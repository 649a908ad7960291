//! A writer for the `newc` cpio format the Linux kernel unpacks as its initramfs
//! (`Documentation/driver-api/early-userspace/buffer-format.rst`): a 110-byte ASCII header
//! per entry, the NUL-terminated name and the data, each padded to 4 bytes, closed by a
//! `TRAILER!!!` entry. Several archives may follow one another in one initramfs file; the
//! kernel unpacks them in order (later files overwrite earlier ones).

use std::collections::BTreeSet;

/// File type bits of `st_mode`.
const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;

/// An archive being built in memory. Parent directories of every entry are added
/// automatically (mode 0755), before the entry.
#[derive(Debug, Default)]
pub struct Archive {
    buf: Vec<u8>,
    dirs: BTreeSet<String>,
    ino: u32,
}

fn pad4(buf: &mut Vec<u8>) {
    while !buf.len().is_multiple_of(4) {
        buf.push(0);
    }
}

/// `path` without leading and trailing slashes (cpio names are relative).
fn relative(path: &str) -> &str {
    path.trim_matches('/')
}

impl Archive {
    /// An empty archive.
    pub fn new() -> Archive {
        Archive::default()
    }

    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.ino += 1;
        let namesize = name.len() + 1;
        let fields = [
            self.ino,
            mode,
            0, // uid
            0, // gid
            if mode & S_IFDIR != 0 { 2 } else { 1 },
            0, // mtime: reproducible archives
            data.len() as u32,
            0,
            0,
            0,
            0,
            namesize as u32,
            0, // check
        ];
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        pad4(&mut self.buf);
        self.buf.extend_from_slice(data);
        pad4(&mut self.buf);
    }

    fn parents(&mut self, path: &str) {
        let mut prefix = String::new();
        let parts: Vec<&str> = path.split('/').collect();
        for part in &parts[..parts.len().saturating_sub(1)] {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            if self.dirs.insert(prefix.clone()) {
                let p = prefix.clone();
                self.entry(&p, S_IFDIR | 0o755, &[]);
            }
        }
    }

    /// Adds a directory (and its parents).
    pub fn dir(&mut self, path: &str) {
        let path = relative(path);
        if path.is_empty() {
            return;
        }
        self.parents(path);
        if self.dirs.insert(path.to_string()) {
            self.entry(path, S_IFDIR | 0o755, &[]);
        }
    }

    /// Adds a regular file with permission bits `perm` (e.g. `0o755`).
    pub fn file(&mut self, path: &str, perm: u32, data: &[u8]) {
        let path = relative(path);
        self.parents(path);
        self.entry(path, S_IFREG | (perm & 0o7777), data);
    }

    /// Adds a symbolic link at `path` pointing to `target`.
    pub fn symlink(&mut self, path: &str, target: &str) {
        let path = relative(path);
        self.parents(path);
        self.entry(path, S_IFLNK | 0o777, target.as_bytes());
    }

    /// Closes the archive with the trailer, pads it to 512 bytes and returns its bytes.
    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[]);
        while !self.buf.len().is_multiple_of(512) {
            self.buf.push(0);
        }
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(header: &[u8], i: usize) -> u32 {
        let s = std::str::from_utf8(&header[6 + 8 * i..6 + 8 * (i + 1)]).unwrap();
        u32::from_str_radix(s, 16).unwrap()
    }

    /// Walks an archive: (name, mode, data) per entry, trailer excluded.
    fn entries(buf: &[u8]) -> Vec<(String, u32, Vec<u8>)> {
        let mut out = Vec::new();
        let mut at = 0;
        loop {
            let h = &buf[at..at + 110];
            assert_eq!(&h[..6], b"070701");
            let mode = field(h, 1);
            let size = field(h, 6) as usize;
            let namesize = field(h, 11) as usize;
            let name = String::from_utf8(buf[at + 110..at + 110 + namesize - 1].to_vec()).unwrap();
            assert_eq!(buf[at + 110 + namesize - 1], 0);
            let data_at = (at + 110 + namesize).next_multiple_of(4);
            let data = buf[data_at..data_at + size].to_vec();
            at = (data_at + size).next_multiple_of(4);
            if name == "TRAILER!!!" {
                return out;
            }
            out.push((name, mode, data));
        }
    }

    #[test]
    fn entries_come_back_with_parents_first_and_padding() {
        let mut a = Archive::new();
        a.file("/bin/busybox", 0o755, b"abc");
        a.symlink("/bin/sh", "busybox");
        a.dir("/proc");
        a.file("/etc/vmpls/modules", 0o644, b"x.ko\n");
        let buf = a.finish();
        assert_eq!(buf.len() % 512, 0);
        let e = entries(&buf);
        let names: Vec<&str> = e.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(names, ["bin", "bin/busybox", "bin/sh", "proc", "etc", "etc/vmpls", "etc/vmpls/modules"]);
        assert_eq!(e[0].1, 0o040755);
        assert_eq!(e[1], ("bin/busybox".into(), 0o100755, b"abc".to_vec()));
        assert_eq!(e[2], ("bin/sh".into(), 0o120777, b"busybox".to_vec()));
        assert_eq!(e[6].2, b"x.ko\n");
    }

    #[test]
    fn header_matches_the_newc_layout() {
        let mut a = Archive::new();
        a.file("init", 0o755, b"#!/bin/sh\n");
        let buf = a.finish();
        // ino 1, mode 0100755, uid 0, gid 0, nlink 1, mtime 0, size 10, 4 x dev 0,
        // namesize 5 ("init" + NUL), check 0.
        let fields = [
            "00000001", "000081ed", "00000000", "00000000", "00000001", "00000000", "0000000a", "00000000",
            "00000000", "00000000", "00000000", "00000005", "00000000",
        ];
        let expected = ["070701", &fields.concat(), "init\0\0"].concat();
        let expected = expected.as_bytes();
        assert_eq!(&buf[..expected.len()], expected);
        assert_eq!(&buf[116..126], b"#!/bin/sh\n");
    }
}
