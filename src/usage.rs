//! Bad usage: arguments that do not go together, found after clap parsed
//! them (by `cli`) or once what they name is known (by `plan`). `main`
//! prints it as clap prints its own, with exit status 2.

/// A usage error, said in one line.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}
