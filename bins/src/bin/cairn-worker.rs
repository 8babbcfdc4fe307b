//! `cairn-worker`: the consumer. See `cairn_cli::entry::worker` and `cairn-worker --help`.

fn main() -> std::process::ExitCode {
    cairn_cli::entry::worker::main(std::env::args_os())
}
