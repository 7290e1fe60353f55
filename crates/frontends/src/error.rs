use thiserror::Error;

/// Errors of the command-line tool. Bad input (configuration, arguments, trace lines) exits
/// with status 2; failures while running exit with status 1.
#[derive(Debug, Error)]
pub enum Error {
    #[error("configuration {origin}: {message}")]
    Config { origin: String, message: String },
    #[error("{0}")]
    Input(String),
    #[error("device stack: {0}")]
    Stack(String),
    #[error("run failed: {0}")]
    Run(String),
    #[error("{0}")]
    Io(String),
}

impl Error {
    /// The process exit status for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Config { .. } | Error::Input(_) | Error::Stack(_) => 2,
            Error::Run(_) | Error::Io(_) => 1,
        }
    }
}
