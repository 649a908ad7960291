//! The pipeline is sans-I/O: time is an argument (ARCHITECTURE.md, "what may depend on
//! what"). A clock read in its code would make its timers follow the machine instead of
//! the time the caller gives, and the loop's `poll_timeout` wrong; this test finds one.

use std::path::{Path, PathBuf};

/// What reads a clock or sleeps.
const CLOCK_READS: [&str; 4] = ["Instant::now", "SystemTime", "thread::sleep", "UNIX_EPOCH"];

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The code of a source file without its unit tests: the crate keeps them last, in a
/// `#[cfg(test)] mod tests { .. }`, or in a file of their own named `tests.rs`.
fn code_without_tests(path: &Path) -> String {
    // Test modules of their own (`tests.rs`, `NAME_tests.rs`) are not the pipeline.
    if path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n == "tests.rs" || n.ends_with("_tests.rs"))
    {
        return String::new();
    }
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .windows(2)
        .position(|w| w[0].trim() == "#[cfg(test)]" && w[1].trim() == "mod tests {")
        .unwrap_or(lines.len());
    lines[..end].join("\n")
}

#[test]
fn the_pipeline_reads_no_clock() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 10, "the sources were found");
    let mut reads = Vec::new();
    for path in &files {
        for (i, line) in code_without_tests(path).lines().enumerate() {
            if CLOCK_READS.iter().any(|c| line.contains(c)) && !line.trim_start().starts_with("//") {
                reads.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(reads.is_empty(), "time must be an argument of the pipeline:\n{}", reads.join("\n"));
}
