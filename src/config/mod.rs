//! Command-line and environment configuration, validated once at start: every flag
//! has a `LEDGER_*` environment twin, and a bad value stops the process with one
//! clear line before anything is opened. The result is a [`Settings`], all that
//! `app::Application::build` needs; the flags come down to it here, so building
//! and serving never see a flag.
//!
//! - `flags`: the subcommands and their flags, each with its default, its
//!   environment twin and its check.
//! - `settings`: what serving needs, made from the flags.

mod flags;
mod settings;

pub use flags::{
    AuditArgs, Cli, Command, DatabaseArgs, HealthcheckArgs, MigrateArgs, PurgeArgs, ServeArgs,
    Switch,
};
pub use settings::{Settings, TlsIdentity};
