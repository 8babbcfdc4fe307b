//! `cairn-hook`: the producer. Claude Code runs it for every hook event. See
//! `cairn_cli::entry::hook`.

fn main() -> std::process::ExitCode {
    cairn_cli::entry::hook::main(std::env::args().skip(1))
}
