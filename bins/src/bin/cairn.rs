//! `cairn`: the command-line interface and MCP server. See `cairn --help`.

fn main() -> std::process::ExitCode {
    cairn_cli::cli::main()
}
