//! How a command ends: the output asked for, and the exit code.

use clap::ValueEnum;

/// How replies are printed (`-o`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Output {
    Table,
    Wide,
    Json,
}

pub(crate) const OK: u8 = 0;
pub(crate) const FAILED: u8 = 1;
/// clap's code for a usage error: flags that make no request.
pub(crate) const USAGE: u8 = 2;
/// sysexits.h's EX_TEMPFAIL: try again later (with the printed key).
pub(crate) const TEMPFAIL: u8 = 75;
