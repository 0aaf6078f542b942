//! `rayrs stop`: SIGTERM to every process `rayrs start` recorded in the
//! cluster directory's pid folder, then wait for them to exit.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::{layout, CliError};

/// How long stopped processes get to exit before `stop` reports them.
const GRACE: Duration = Duration::from_secs(10);

/// Stops what `rayrs start --dir dir` started on this host.
pub fn stop(dir: &Path) -> Result<(), CliError> {
    let pid_dir = layout::pid_dir(dir);
    let entries = match std::fs::read_dir(&pid_dir) {
        Ok(entries) => entries,
        Err(_) => {
            crate::out!("rayrs: nothing to stop in {}", dir.display());
            return Ok(());
        }
    };
    let mut signalled = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(pid) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse::<i32>().ok())
            .filter(|&p| p > 0)
        else {
            continue;
        };
        if is_running_rayrs(pid) && terminate(pid) {
            signalled.push((pid, path));
        } else {
            // A stale entry: the process died without cleaning up (kill -9).
            let _ = std::fs::remove_file(&path);
        }
    }
    let deadline = Instant::now() + GRACE;
    let mut left: Vec<i32> = Vec::new();
    for (pid, path) in &signalled {
        while is_running_rayrs(*pid) && path.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if is_running_rayrs(*pid) && path.exists() {
            left.push(*pid);
        } else {
            let _ = std::fs::remove_file(path);
        }
    }
    if !left.is_empty() {
        return Err(CliError::failed(format!(
            "processes {left:?} did not exit within {GRACE:?} of SIGTERM"
        )));
    }
    crate::out!("rayrs: stopped {} process(es)", signalled.len());
    Ok(())
}

/// Whether `pid` is a live (not zombie) `rayrs` process. Pids are reused,
/// so a stale pid file must not make us signal some other program.
fn is_running_rayrs(pid: i32) -> bool {
    let proc_dir = Path::new("/proc").join(pid.to_string());
    let Ok(stat) = std::fs::read_to_string(proc_dir.join("stat")) else {
        return false;
    };
    // The state follows the parenthesised command name: `pid (comm) S …`.
    let zombie = stat
        .rsplit_once(')')
        .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']));
    let cmdline = std::fs::read(proc_dir.join("cmdline")).unwrap_or_default();
    !zombie && String::from_utf8_lossy(&cmdline).contains("rayrs")
}

/// Sends SIGTERM; false if there is no such process.
fn terminate(pid: i32) -> bool {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe { libc::kill(pid, libc::SIGTERM) == 0 }
}
