//! Queue benchmark (filled in with the queue benchmark work).
fn main() {}
