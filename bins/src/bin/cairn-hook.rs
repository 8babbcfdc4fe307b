//! `cairn-hook`: the producer. Claude Code runs it for every hook event.

fn main() {
    // Built in the hook issue.
    print!("{{\"continue\":true,\"suppressOutput\":true}}");
}
