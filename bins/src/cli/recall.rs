//! `cairn search`, `timeline`, `show`, `context`, `save` and `mcp`: everything that reads
//! memories back.

use clap::Args;

use super::Ctx;

#[derive(Debug, Args)]
pub struct SearchArgs {
    /// Words (all must match), "exact phrases", -excluded, OR, prefix*.
    pub query: Vec<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TimelineArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Observation ids.
    pub ids: Vec<i64>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ContextArgs {
    /// Project name (default: the project of the current directory).
    #[arg(long)]
    pub project: Option<String>,
}

#[derive(Debug, Args)]
pub struct SaveArgs {
    /// Title of the memory.
    pub title: String,
}

#[derive(Debug, Args)]
pub struct McpArgs {}

pub fn search(_ctx: &Ctx, _args: &SearchArgs) -> anyhow::Result<u8> {
    anyhow::bail!("search is not built yet")
}
pub fn timeline(_ctx: &Ctx, _args: &TimelineArgs) -> anyhow::Result<u8> {
    anyhow::bail!("timeline is not built yet")
}
pub fn show(_ctx: &Ctx, _args: &ShowArgs) -> anyhow::Result<u8> {
    anyhow::bail!("show is not built yet")
}
pub fn context(_ctx: &Ctx, _args: &ContextArgs) -> anyhow::Result<u8> {
    anyhow::bail!("context is not built yet")
}
pub fn save(_ctx: &Ctx, _args: &SaveArgs) -> anyhow::Result<u8> {
    anyhow::bail!("save is not built yet")
}
pub fn mcp(_ctx: &Ctx, _args: &McpArgs) -> anyhow::Result<u8> {
    anyhow::bail!("mcp is not built yet")
}
