//! `rayrs`: the command that starts, inspects and stops a ray-rs cluster's
//! control plane, and exports the insight views of a recorded job.
//!
//! This crate owns the command line and nothing the runtime needs: the
//! arguments (clap, derived from the types in `args.rs`, whose doc
//! comments are the `--help` texts; `rayrs completions SHELL`), the files
//! of the cluster directory only the command uses (`ca/`, `pids/`), what
//! each command prints, and its exit status. What it runs lives in
//! ray-core: `rayrs start --head` starts a [`ray_core::cluster::Head`] (the
//! GCS, the head's node and the dashboard, assembled as `Cluster::local`
//! assembles them), `rayrs start --address` a node
//! ([`ray_core::cluster::start_node`]); `status` and `list` ask the GCS
//! through [`ray_core::cluster::GcsClient`] (and, for tasks and objects,
//! every owner); `stop` signals what `start` recorded; `insight` replays
//! event logs with ray-insight or asks the head.
//!
//! Every failure is one line on stderr, `rayrs: …`, and a non-zero exit
//! status: 1 failed, 2 bad command line (clap's errors included), 3 a
//! damaged event log whose readable prefix was used.
//!
//! The crate is also a library with one function, [`main`]: a program that
//! registers its own scheduling policies
//! ([`ray_core::policy_set!`]) and calls it is a `rayrs` whose
//! `start --policies NAME` can use them:
//!
//! ```no_run
//! fn my_policies(seed: u64) -> ray_core::cluster::Policies {
//!     ray_core::cluster::Policies::standard(seed)
//! }
//! ray_core::policy_set!("mine", my_policies);
//!
//! fn main() -> std::process::ExitCode {
//!     rayrs::main()
//! }
//! ```

mod args;
mod insight;
mod layout;
mod owners;
mod query;
mod start;
mod stop;

use std::process::ExitCode;

use args::Command;
use clap::{CommandFactory, Parser};

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

/// Runs the `rayrs` command line (`std::env::args`) and returns its exit
/// status.
pub fn main() -> ExitCode {
    let cli = match args::Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version: printed on stdout, a success.
        Err(e) if !e.use_stderr() => {
            // Nothing to do if stdout is gone.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => return report(CliError::usage(args::one_line(&e))),
    };
    match cli.into_command().and_then(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => report(e),
    }
}

/// `println!` on stdout, except that a reader gone away (`rayrs status |
/// head -1`) ends the command quietly, as Unix tools do, instead of the
/// panic `println!` gives on a closed pipe.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::write_out(format_args!($($arg)*))
    };
}
pub(crate) use out;

/// A line on stdout from a process that keeps running (`rayrs start`): a
/// reader gone away loses the line, and the daemon goes on.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}
pub(crate) use say;

/// Writes one line on stdout for [`out!`].
pub(crate) fn write_out(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout
        .write_fmt(args)
        .and_then(|()| stdout.write_all(b"\n"))
    {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("rayrs: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// Prints `e` as one line on stderr, whatever its text holds.
fn report(e: CliError) -> ExitCode {
    let line = e.message.replace(['\n', '\r'], " ");
    eprintln!("rayrs: {line}");
    ExitCode::from(e.code)
}

fn run(command: Command) -> Result<(), CliError> {
    match command {
        Command::Completions(shell) => {
            clap_complete::generate(
                shell,
                &mut args::Cli::command(),
                "rayrs",
                &mut std::io::stdout(),
            );
            Ok(())
        }
        Command::Stop { dir } => stop::stop(&dir),
        Command::InsightExport(args) => insight::export(args),
        Command::InsightDiff(args) => insight::diff(args),
        Command::InsightTop(args) => insight::top(args),
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
                    Command::Completions(_)
                    | Command::Stop { .. }
                    | Command::InsightExport(_)
                    | Command::InsightDiff(_)
                    | Command::InsightTop(_)
                    | Command::InsightServe { .. } => unreachable!("handled above"),
                }
            })
        }
    }
}
