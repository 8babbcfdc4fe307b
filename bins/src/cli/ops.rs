//! `cairn demo`, `status`, `queue`, `doctor`, `config`, `backup`, `restore`, `export` and
//! `import`: running and looking after cairn.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};

use super::Ctx;

#[derive(Debug, Args)]
pub struct DemoArgs {}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// List jobs, newest first.
    List {
        /// Only jobs in this state: pending, claimed, done or skipped.
        #[arg(long)]
        status: Option<String>,
    },
}

#[derive(Debug, Args)]
pub struct DoctorArgs {}

#[derive(Debug, Args)]
pub struct ConfigArgs {}

#[derive(Debug, Args)]
pub struct BackupArgs {
    /// Where to write the backup.
    #[arg(long)]
    pub to: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The backup file.
    pub path: PathBuf,
}

#[derive(Debug, Args)]
pub struct ExportArgs {}

#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// Import a `cairn export --format jsonl` file.
    Jsonl { file: PathBuf },
}

pub fn demo(_args: &DemoArgs, _data_dir: Option<&Path>, _verbose: u8) -> anyhow::Result<u8> {
    anyhow::bail!("demo is not built yet")
}
pub fn status(_ctx: &Ctx, _args: &StatusArgs) -> anyhow::Result<u8> {
    anyhow::bail!("status is not built yet")
}
pub fn queue(_ctx: &Ctx, _cmd: &QueueCommand) -> anyhow::Result<u8> {
    anyhow::bail!("queue is not built yet")
}
pub fn doctor(_ctx: &Ctx, _args: &DoctorArgs) -> anyhow::Result<u8> {
    anyhow::bail!("doctor is not built yet")
}
pub fn config(_ctx: &Ctx, _args: &ConfigArgs) -> anyhow::Result<u8> {
    anyhow::bail!("config is not built yet")
}
pub fn backup(_ctx: &Ctx, _args: &BackupArgs) -> anyhow::Result<u8> {
    anyhow::bail!("backup is not built yet")
}
pub fn restore(_ctx: &Ctx, _args: &RestoreArgs) -> anyhow::Result<u8> {
    anyhow::bail!("restore is not built yet")
}
pub fn export(_ctx: &Ctx, _args: &ExportArgs) -> anyhow::Result<u8> {
    anyhow::bail!("export is not built yet")
}
pub fn import(_ctx: &Ctx, _cmd: &ImportCommand) -> anyhow::Result<u8> {
    anyhow::bail!("import is not built yet")
}
