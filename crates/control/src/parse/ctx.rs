//! Where in the file a value is, for messages: [`Ctx`] turns a byte span of the TOML
//! text into a line (and column) and builds the [`ConfigError`] that names the file, the
//! line and the key; it also words serde's own parse errors for a network engineer.

use std::ops::Range;
use std::path::Path;

use crate::ConfigError;

/// Where in the file, for messages.
pub(super) struct Ctx<'a> {
    path: &'a Path,
    text: &'a str,
    /// Byte offset of every newline, so that a line number is a binary search (every
    /// entry of a config has one), not a count from the start of the file.
    newlines: Vec<usize>,
}

impl<'a> Ctx<'a> {
    pub(super) fn new(path: &'a Path, text: &'a str) -> Ctx<'a> {
        Ctx { path, text, newlines: text.match_indices('\n').map(|(i, _)| i).collect() }
    }

    fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before_count = self.newlines.partition_point(|&nl| nl < offset);
        let line = before_count + 1;
        let line_start = before_count.checked_sub(1).map_or(0, |i| self.newlines[i] + 1);
        let before = self.text.get(..offset).unwrap_or(self.text);
        let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
        (line, column)
    }

    pub(super) fn line(&self, span: &Range<usize>) -> usize {
        self.line_col(span.start).0
    }

    pub(super) fn err(&self, span: &Range<usize>, field: &str, message: impl Into<String>) -> ConfigError {
        self.err_line(self.line(span), field, message)
    }

    pub(super) fn err_line(&self, line: usize, field: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            path: self.path.to_path_buf(),
            line,
            field: field.to_string(),
            message: message.into(),
        }
    }

    pub(super) fn toml_error(&self, e: &toml::de::Error) -> ConfigError {
        let (line, column) = e.span().map_or((1, 1), |s| self.line_col(s.start));
        ConfigError::Parse {
            path: self.path.to_path_buf(),
            line,
            column,
            message: friendlier(e.message().trim_end()),
        }
    }
}

/// Serde's type names in a network engineer's words.
fn friendlier(message: &str) -> String {
    message
        .replace("expected i64", "expected an integer")
        .replace("expected a sequence", "expected a list like [\"...\", \"...\"]")
        .replace("expected a boolean", "expected true or false")
}
