mod disasm;
mod probe;
mod symbols;
fn main() {}
