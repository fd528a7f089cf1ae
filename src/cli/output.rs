//! What the commands print: aligned tables for people (`--format table`, the default), one
//! JSON document on stdout for scripts (`--format json`).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
}

/// A command's answer in both forms; `print` writes the one asked for.
pub struct Report {
    pub json: serde_json::Value,
    pub text: String,
}

impl Report {
    pub fn print(&self, format: Format) {
        match format {
            Format::Json => out(&format!("{}\n", self.json)),
            Format::Table => out(&self.text),
        }
    }
}

/// Writes to stdout; a closed stdout (a pipe into `head`) is not an error worth a panic, as
/// `print!` would make it.
pub fn out(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush());
}

/// Rows under a header, each column as wide as its widest cell, two spaces apart.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, cell) in cells.enumerate() {
            let width = widths.get(i).copied().unwrap_or(0);
            text.push_str(cell);
            text.extend(std::iter::repeat_n(
                ' ',
                (width + 2).saturating_sub(cell.chars().count()),
            ));
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// Broker ids as Kafka's tools print them: `1,2,3`.
pub fn ids(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

/// "consumed N records" lines on stderr at most once a second, when stderr is a terminal or
/// `--progress` was given.
pub struct Progress {
    enabled: bool,
    last: Instant,
}

impl Progress {
    pub fn new(forced: bool) -> Progress {
        Progress {
            enabled: forced || std::io::stderr().is_terminal(),
            last: Instant::now(),
        }
    }

    pub fn tick(&mut self, line: impl FnOnce() -> String) {
        if self.enabled && self.last.elapsed() >= Duration::from_secs(1) {
            self.last = Instant::now();
            eprintln!("{}", line());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns() {
        let text = table(
            &["TOPIC", "PARTITIONS"],
            &[vec!["orders".into(), "3".into()], vec!["a".into(), "12".into()]],
        );
        assert_eq!(text, "TOPIC   PARTITIONS\norders  3\na       12\n");
    }
}
