//! `cairn-worker`: the consumer.

fn main() -> std::process::ExitCode {
    eprintln!("error: cairn-worker is not built yet");
    std::process::ExitCode::from(2)
}
