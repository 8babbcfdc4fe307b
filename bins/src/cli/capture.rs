//! `cairn install` / `cairn uninstall`: cairn's hooks in Claude Code's settings.

use std::path::PathBuf;

use clap::Args;

use super::Ctx;

#[derive(Debug, Args)]
pub struct InstallArgs {
    /// Change this project's `.claude/settings.json` instead of `~/.claude/settings.json`.
    #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = ".")]
    pub project: Option<PathBuf>,
}

pub fn install(_ctx: &Ctx, _args: &InstallArgs) -> anyhow::Result<u8> {
    anyhow::bail!("install is not built yet")
}

pub fn uninstall(_ctx: &Ctx, _args: &InstallArgs) -> anyhow::Result<u8> {
    anyhow::bail!("uninstall is not built yet")
}
