//! `rayrs`: start, inspect and stop a ray-rs cluster's control plane.
//!
//! `rayrs start --head` runs the GCS and the head's node daemon in the
//! foreground; `rayrs start --address` joins a node; `rayrs status` and
//! `rayrs list` read the GCS tables (and, for tasks and objects, ask every
//! owner); `rayrs stop` ends what this host started; `rayrs insight` exports
//! the insight views of a recorded job. Every failure is one line on stderr and a non-zero exit.

mod args;
mod insight;
mod layout;
mod owners;
mod query;
mod start;
mod stop;

use std::process::ExitCode;

use args::Command;

/// A failure to report: one line, and the exit code.
#[derive(Debug)]
pub struct CliError {
    message: String,
    code: u8,
}

impl CliError {
    /// A wrong command line (exit code 2).
    pub fn usage(message: String) -> Self {
        Self { message, code: 2 }
    }

    /// Anything else that failed (exit code 1).
    pub fn failed(message: impl std::fmt::Display) -> Self {
        Self {
            message: message.to_string(),
            code: 1,
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args::parse(&args).and_then(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line, whatever the error's text holds.
            let line = e.message.replace(['\n', '\r'], " ");
            eprintln!("rayrs: {line}");
            ExitCode::from(e.code)
        }
    }
}

fn run(command: Command) -> Result<(), CliError> {
    match command {
        Command::Help => {
            println!("{}", args::USAGE);
            Ok(())
        }
        Command::Stop { dir } => stop::stop(&dir),
        Command::InsightExport(args) => insight::export(args),
        Command::InsightDiff(args) => insight::diff(args),
        Command::InsightServe { log, dashboard } => insight::serve(&log, dashboard),
        command => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .map_err(|e| CliError::failed(format!("cannot start the async runtime: {e}")))?;
            runtime.block_on(async move {
                match command {
                    Command::Head(args) => start::head(args).await,
                    Command::Join(args, addr) => start::join(args, addr).await,
                    Command::Status(args) => query::status(args).await,
                    Command::List(args, table, format) => query::list(args, table, format).await,
                    Command::Help
                    | Command::Stop { .. }
                    | Command::InsightExport(_)
                    | Command::InsightDiff(_)
                    | Command::InsightServe { .. } => unreachable!("handled above"),
                }
            })
        }
    }
}
