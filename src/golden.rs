//! Golden files: expected output kept next to the code that prints it.
//! `TACHY_BLESS=1 cargo test` rewrites them.

use std::path::Path;

/// Compares output with the golden file `dir/name` (`dir` relative to the
/// crate root); `TACHY_BLESS=1` rewrites the file instead.
pub(crate) fn check(dir: &str, name: &str, got: &[u8]) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir).join(name);
    if std::env::var_os("TACHY_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want =
        std::fs::read(&path).unwrap_or_else(|_| panic!("missing golden file {}", path.display()));
    assert_eq!(
        String::from_utf8_lossy(got),
        String::from_utf8_lossy(&want),
        "{name} differs; TACHY_BLESS=1 rewrites it"
    );
}
