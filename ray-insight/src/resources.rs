//! Reading what a process and the machine's GPUs use, with no runtime types:
//! CPU time and resident memory from `/proc/self`, GPU utilisation and
//! memory from `nvidia-smi`.
//!
//! The parsers are pure functions of the text read (tested on sample text,
//! malformed input included); [`ProcessSampler`] and [`GpuSampler`] do the
//! reading. Neither panics on what it reads: an unreadable `/proc` (or a
//! system without one), a missing `nvidia-smi` or output it cannot parse all
//! give `None`.
//!
//! A sampler of the runtime calls them periodically on a thread of its own
//! and emits the values as `resource.sample` events, which the physical view
//! ([`views::PhysicalView`](crate::views::PhysicalView)) keeps as a bounded
//! history per process.
//!
//! ```
//! use ray_insight::resources::ProcessSampler;
//!
//! // `None` where there is no readable /proc (not Linux, or restricted).
//! if let Some(mut sampler) = ProcessSampler::new() {
//!     let first = sampler.sample().expect("read just now");
//!     assert!(first.rss_bytes > 0);
//!     assert_eq!(first.cpu_percent, None); // a rate needs two readings
//! }
//! ```

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Clock ticks per second of `/proc/<pid>/stat` times when the kernel does
/// not say (`AT_CLKTCK` in `/proc/self/auxv`): `USER_HZ`, which is 100 on
/// every mainstream Linux architecture.
pub const DEFAULT_TICKS_PER_SECOND: u64 = 100;

/// Page size assumed for `/proc/<pid>/statm` when the kernel does not say
/// (`AT_PAGESZ` in `/proc/self/auxv`).
pub const DEFAULT_PAGE_SIZE: u64 = 4096;

/// `AT_PAGESZ` in the ELF auxiliary vector.
const AT_PAGESZ: u64 = 6;
/// `AT_CLKTCK` in the ELF auxiliary vector.
const AT_CLKTCK: u64 = 17;

/// User plus system CPU time of a process in clock ticks, from the text of
/// `/proc/<pid>/stat` (fields 14 and 15); `None` if the text is malformed.
///
/// The command name (field 2) is in parentheses and may itself hold spaces
/// and parentheses, so fields are counted after its last `)`.
pub fn parse_stat_cpu_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    // After the name: field 3 (state) is index 0, so utime (14) is index 11.
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    utime.checked_add(stime)
}

/// Resident pages of a process, from the text of `/proc/<pid>/statm`
/// (its second field); `None` if the text is malformed.
pub fn parse_statm_resident_pages(statm: &str) -> Option<u64> {
    statm.split_whitespace().nth(1)?.parse().ok()
}

/// The value of `key` in an ELF auxiliary vector (`/proc/self/auxv`: pairs
/// of native-endian machine words, ended by a zero key); `None` if absent.
fn auxv_value(auxv: &[u8], key: u64) -> Option<u64> {
    const WORD: usize = std::mem::size_of::<usize>();
    let word = |bytes: &[u8]| -> Option<u64> {
        let bytes: [u8; WORD] = bytes.try_into().ok()?;
        u64::try_from(usize::from_ne_bytes(bytes)).ok()
    };
    for pair in auxv.chunks_exact(2 * WORD) {
        let (k, v) = pair.split_at(WORD);
        match word(k)? {
            0 => return None,
            k if k == key => return word(v).filter(|v| *v > 0),
            _ => {}
        }
    }
    None
}

/// Turns successive readings of a CPU time counter into a CPU percentage,
/// where 100 % is one core fully busy. Pure: times are passed in.
#[derive(Debug, Clone)]
pub struct CpuMeter {
    ticks_per_second: u64,
    last: Option<(Instant, u64)>,
}

impl CpuMeter {
    /// A meter for a counter that advances `ticks_per_second` per second of
    /// CPU time (0 is taken as [`DEFAULT_TICKS_PER_SECOND`]).
    pub fn new(ticks_per_second: u64) -> Self {
        let ticks_per_second = if ticks_per_second == 0 {
            DEFAULT_TICKS_PER_SECOND
        } else {
            ticks_per_second
        };
        Self {
            ticks_per_second,
            last: None,
        }
    }

    /// Takes the reading `ticks` made at `at`; returns the CPU percentage
    /// since the previous reading, or `None` for the first reading, a reading
    /// no later than the previous one, or a counter that went backwards
    /// (the reading is kept as the new base in every case).
    pub fn update(&mut self, at: Instant, ticks: u64) -> Option<f64> {
        let previous = self.last.replace((at, ticks));
        let (then, before) = previous?;
        let wall = at.checked_duration_since(then)?.as_secs_f64();
        if wall <= 0.0 {
            return None;
        }
        let cpu = ticks.checked_sub(before)? as f64 / self.ticks_per_second as f64;
        Some(100.0 * cpu / wall)
    }
}

/// One reading of a process's resource use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessSample {
    /// CPU use since the previous reading, in percent of one core (200 %:
    /// two cores busy); `None` for the first reading.
    pub cpu_percent: Option<f64>,
    /// Resident set size in bytes.
    pub rss_bytes: u64,
    /// CPU time (user plus system) since the process started, in seconds.
    pub cpu_seconds: f64,
}

/// Reads the calling process's CPU time and resident memory from
/// `/proc/self/stat` and `/proc/self/statm`, and turns successive readings
/// into CPU percentages.
///
/// Clock ticks per second and the page size come from the kernel's
/// auxiliary vector (`/proc/self/auxv`, what `sysconf` reads), else
/// [`DEFAULT_TICKS_PER_SECOND`] and [`DEFAULT_PAGE_SIZE`].
#[derive(Debug, Clone)]
pub struct ProcessSampler {
    stat: PathBuf,
    statm: PathBuf,
    page_size: u64,
    meter: CpuMeter,
}

impl ProcessSampler {
    /// A sampler of this process, or `None` where `/proc/self` cannot be
    /// read and parsed (not Linux, or a restricted `/proc`).
    pub fn new() -> Option<Self> {
        if !cfg!(target_os = "linux") {
            return None;
        }
        let auxv = std::fs::read("/proc/self/auxv").unwrap_or_default();
        let sampler = Self::at(
            Path::new("/proc/self"),
            auxv_value(&auxv, AT_CLKTCK).unwrap_or(DEFAULT_TICKS_PER_SECOND),
            auxv_value(&auxv, AT_PAGESZ).unwrap_or(DEFAULT_PAGE_SIZE),
        );
        sampler.read().map(|_| sampler)
    }

    /// A sampler reading `stat` and `statm` under `dir` (a `/proc/<pid>`
    /// directory, or a test's copy of one), with the given clock ticks per
    /// second and page size.
    pub fn at(dir: &Path, ticks_per_second: u64, page_size: u64) -> Self {
        Self {
            stat: dir.join("stat"),
            statm: dir.join("statm"),
            page_size,
            meter: CpuMeter::new(ticks_per_second),
        }
    }

    /// Reads the CPU ticks and resident bytes; `None` if either file cannot
    /// be read or parsed.
    fn read(&self) -> Option<(u64, u64)> {
        let stat = std::fs::read_to_string(&self.stat).ok()?;
        let statm = std::fs::read_to_string(&self.statm).ok()?;
        let ticks = parse_stat_cpu_ticks(&stat)?;
        let pages = parse_statm_resident_pages(&statm)?;
        Some((ticks, pages.saturating_mul(self.page_size)))
    }

    /// Reads the process's use now; `None` if `/proc` could not be read or
    /// parsed this time (the next call tries again).
    pub fn sample(&mut self) -> Option<ProcessSample> {
        let (ticks, rss_bytes) = self.read()?;
        let cpu_percent = self.meter.update(Instant::now(), ticks);
        Some(ProcessSample {
            cpu_percent,
            rss_bytes,
            cpu_seconds: ticks as f64 / self.meter.ticks_per_second as f64,
        })
    }
}

/// One GPU as `nvidia-smi` reports it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuDevice {
    /// The device index.
    pub index: u32,
    /// Utilisation over the driver's last sample period, in percent; `None`
    /// where the driver reports it as not available.
    pub utilization_percent: Option<f64>,
    /// Device memory in use, in bytes; `None` where not available.
    pub memory_used_bytes: Option<u64>,
    /// Device memory in all, in bytes; `None` where not available.
    pub memory_total_bytes: Option<u64>,
}

/// One reading of every GPU of the machine.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSample {
    /// The devices, in the order `nvidia-smi` listed them (never empty).
    pub devices: Vec<GpuDevice>,
}

impl GpuSample {
    /// How many GPUs were read.
    pub fn count(&self) -> usize {
        self.devices.len()
    }

    /// Mean utilisation over the devices that report one, in percent.
    pub fn utilization_percent(&self) -> Option<f64> {
        let known: Vec<f64> = self
            .devices
            .iter()
            .filter_map(|d| d.utilization_percent)
            .collect();
        (!known.is_empty()).then(|| known.iter().sum::<f64>() / known.len() as f64)
    }

    /// Device memory in use, summed over the devices that report it.
    pub fn memory_used_bytes(&self) -> Option<u64> {
        sum_known(self.devices.iter().map(|d| d.memory_used_bytes))
    }

    /// Device memory in all, summed over the devices that report it.
    pub fn memory_total_bytes(&self) -> Option<u64> {
        sum_known(self.devices.iter().map(|d| d.memory_total_bytes))
    }
}

fn sum_known(values: impl Iterator<Item = Option<u64>>) -> Option<u64> {
    values
        .flatten()
        .fold(None, |sum, v| Some(sum.unwrap_or(0u64).saturating_add(v)))
}

/// The arguments [`GpuSampler`] runs `nvidia-smi` with; the output has one
/// line per GPU: `index, utilization %, memory used MiB, memory total MiB`.
pub const NVIDIA_SMI_ARGS: [&str; 2] = [
    "--query-gpu=index,utilization.gpu,memory.used,memory.total",
    "--format=csv,noheader,nounits",
];

/// Parses the output of `nvidia-smi` run with [`NVIDIA_SMI_ARGS`].
///
/// Values the driver does not report (`[N/A]`, `[Not Supported]`, …) become
/// `None`. Output with no device line, a line without exactly four columns,
/// or an index that is not a number is malformed: `None`.
pub fn parse_nvidia_smi(csv: &str) -> Option<GpuSample> {
    const MIB: f64 = 1024.0 * 1024.0;
    let number = |column: &str| -> Option<f64> {
        column
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    let mut devices = Vec::new();
    for line in csv.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let columns: Vec<&str> = line.split(',').collect();
        let [index, utilization, used, total] = columns[..] else {
            return None;
        };
        devices.push(GpuDevice {
            index: index.trim().parse().ok()?,
            utilization_percent: number(utilization),
            memory_used_bytes: number(used).map(|mib| (mib * MIB) as u64),
            memory_total_bytes: number(total).map(|mib| (mib * MIB) as u64),
        });
    }
    (!devices.is_empty()).then_some(GpuSample { devices })
}

/// Reads the machine's GPUs by running `nvidia-smi` (see
/// [`NVIDIA_SMI_ARGS`]), where that program exists.
///
/// Each reading starts a process (tens to hundreds of milliseconds), so a
/// periodic caller [`start`](Self::start)s one and [`poll`](Self::poll)s it on
/// its next ticks instead of waiting; [`sample`](Self::sample) waits. A run
/// that fails, outlives its timeout (it is then killed) or prints what
/// [`parse_nvidia_smi`] rejects is a failure; after
/// [`GpuSampler::MAX_FAILURES`] failures in a row the sampler gives up and
/// runs nothing more ([`GpuSampler::is_disabled`]). Dropping the sampler
/// kills a run still in flight.
#[derive(Debug)]
pub struct GpuSampler {
    program: PathBuf,
    timeout: Duration,
    failures: u32,
    /// The run in flight and when it must be done.
    running: Option<(Child, Instant)>,
}

/// What [`GpuSampler::poll`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum GpuPoll {
    /// No run was started (or its outcome was already taken).
    Idle,
    /// A run is in flight.
    Running,
    /// The run ended and its output parsed.
    Ready(GpuSample),
    /// The run failed, timed out or printed something unparsable.
    Failed,
}

impl GpuSampler {
    /// Failed runs in a row after which the sampler stops trying.
    pub const MAX_FAILURES: u32 = 3;

    /// How long one run may take by default before it is killed.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

    /// A sampler running the `nvidia-smi` found on `PATH`, or `None` when
    /// there is none (no NVIDIA driver: nothing to sample, nothing to retry).
    pub fn detect() -> Option<Self> {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .map(|dir| dir.join("nvidia-smi"))
            .find(|candidate| candidate.is_file())
            .map(Self::with_program)
    }

    /// A sampler running `program` (an `nvidia-smi`, or a test's stand-in)
    /// with [`NVIDIA_SMI_ARGS`] and [`GpuSampler::DEFAULT_TIMEOUT`].
    pub fn with_program(program: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            timeout: Self::DEFAULT_TIMEOUT,
            failures: 0,
            running: None,
        }
    }

    /// The same sampler with runs killed after `timeout`.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether the sampler has given up after repeated failures.
    pub fn is_disabled(&self) -> bool {
        self.failures >= Self::MAX_FAILURES
    }

    /// Whether a run is in flight.
    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// Starts a run unless one is in flight or the sampler gave up; a
    /// program that cannot be started counts as a failed run.
    pub fn start(&mut self) {
        if self.running.is_some() || self.is_disabled() {
            return;
        }
        let spawned = Command::new(&self.program)
            .args(NVIDIA_SMI_ARGS)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        match spawned {
            Ok(child) => self.running = Some((child, Instant::now() + self.timeout)),
            Err(_) => self.failures = self.failures.saturating_add(1),
        }
    }

    /// Checks the run in flight without waiting for it.
    ///
    /// Its output is read once it has exited: a few lines per GPU fit the
    /// pipe's buffer (a program that fills it blocks until its timeout).
    pub fn poll(&mut self) -> GpuPoll {
        let Some((child, deadline)) = self.running.as_mut() else {
            return GpuPoll::Idle;
        };
        let outcome = match child.try_wait() {
            Ok(None) if Instant::now() < *deadline => return GpuPoll::Running,
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                None
            }
            Ok(Some(status)) if status.success() => {
                let mut text = String::new();
                match child
                    .stdout
                    .take()
                    .map(|mut out| out.read_to_string(&mut text))
                {
                    Some(Ok(_)) => parse_nvidia_smi(&text),
                    _ => None,
                }
            }
            Ok(Some(_)) | Err(_) => None,
        };
        self.running = None;
        match outcome {
            Some(sample) => {
                self.failures = 0;
                GpuPoll::Ready(sample)
            }
            None => {
                self.failures = self.failures.saturating_add(1);
                GpuPoll::Failed
            }
        }
    }

    /// Reads every GPU now, waiting for the run (up to the timeout); `None`
    /// if it failed or the sampler gave up. A run already in flight is the
    /// one waited for.
    pub fn sample(&mut self) -> Option<GpuSample> {
        const POLL: Duration = Duration::from_millis(5);
        self.start();
        loop {
            match self.poll() {
                GpuPoll::Running => std::thread::sleep(POLL),
                GpuPoll::Ready(sample) => return Some(sample),
                GpuPoll::Idle | GpuPoll::Failed => return None,
            }
        }
    }
}

impl Drop for GpuSampler {
    fn drop(&mut self) {
        if let Some((mut child, _)) = self.running.take() {
            // Killed and reaped, so no zombie is left behind.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (ray worker) S 1 4242 4242 0 -1 4194560 5131 0 0 0 \
                        250 37 0 0 20 0 9 0 123456 1234567 890 18446744073709551615 \
                        1 1 0 0 0 0 0 4096 17610 0 0 0 17 3 0 0 0 0 0";

    #[test]
    fn stat_cpu_ticks_sum_user_and_system_time() {
        assert_eq!(parse_stat_cpu_ticks(STAT), Some(250 + 37));
    }

    #[test]
    fn stat_command_names_with_spaces_and_parens_are_skipped() {
        let tricky = STAT.replace("(ray worker)", "(a) b (c))");
        assert_eq!(parse_stat_cpu_ticks(&tricky), Some(287));
    }

    #[test]
    fn malformed_stat_text_gives_none() {
        assert_eq!(parse_stat_cpu_ticks(""), None);
        assert_eq!(parse_stat_cpu_ticks("4242 (x) S 1 2 3"), None, "truncated");
        assert_eq!(
            parse_stat_cpu_ticks("no parens 1 2 3 4 5 6 7 8 9 10 11 12 13"),
            None
        );
        let garbled = STAT.replace(" 250 ", " 2x0 ");
        assert_eq!(parse_stat_cpu_ticks(&garbled), None);
        let overflow = STAT.replace(" 250 37 ", " 18446744073709551615 1 ");
        assert_eq!(parse_stat_cpu_ticks(&overflow), None);
    }

    #[test]
    fn statm_gives_resident_pages() {
        assert_eq!(
            parse_statm_resident_pages("56789 1234 567 89 0 4321 0\n"),
            Some(1234)
        );
        assert_eq!(parse_statm_resident_pages("56789"), None);
        assert_eq!(parse_statm_resident_pages("56789 -3 1"), None);
        assert_eq!(parse_statm_resident_pages(""), None);
    }

    #[test]
    fn auxv_values_are_found_by_key_until_the_terminator() {
        let mut auxv = Vec::new();
        for (k, v) in [
            (33usize, 0xdead_usize),
            (AT_PAGESZ as usize, 16384),
            (AT_CLKTCK as usize, 250),
        ] {
            auxv.extend_from_slice(&k.to_ne_bytes());
            auxv.extend_from_slice(&v.to_ne_bytes());
        }
        auxv.extend_from_slice(&[0u8; 2 * std::mem::size_of::<usize>()]);
        assert_eq!(auxv_value(&auxv, AT_PAGESZ), Some(16384));
        assert_eq!(auxv_value(&auxv, AT_CLKTCK), Some(250));
        assert_eq!(auxv_value(&auxv, 99), None);
        assert_eq!(auxv_value(&auxv[..5], AT_PAGESZ), None, "truncated");
        assert_eq!(auxv_value(&[], AT_CLKTCK), None);
    }

    #[test]
    fn cpu_meter_turns_tick_deltas_into_percent_of_a_core() {
        let t0 = Instant::now();
        let mut meter = CpuMeter::new(100);
        assert_eq!(meter.update(t0, 1_000), None, "first reading");
        // 50 ticks = 0.5 s of CPU in 0.5 s of wall time: one core busy.
        let busy = meter.update(t0 + Duration::from_millis(500), 1_050);
        assert!((busy.unwrap_or(0.0) - 100.0).abs() < 1e-9, "{busy:?}");
        // 2 s of CPU in 1 s: two cores.
        let two = meter.update(t0 + Duration::from_millis(1_500), 1_250);
        assert!((two.unwrap_or(0.0) - 200.0).abs() < 1e-9, "{two:?}");
        assert_eq!(
            meter.update(t0 + Duration::from_millis(1_500), 1_260),
            None,
            "no time passed"
        );
        assert_eq!(
            meter.update(t0 + Duration::from_secs(2), 10),
            None,
            "counter went back"
        );
        assert_eq!(meter.update(t0 + Duration::from_secs(3), 10), Some(0.0));
    }

    #[test]
    fn nvidia_smi_lines_parse_into_devices_in_bytes() {
        let text = "0, 87, 40536, 81559\n1, 0, 4, 81559\n";
        let sample = parse_nvidia_smi(text).expect("two devices");
        assert_eq!(sample.count(), 2);
        assert_eq!(
            sample.devices[0],
            GpuDevice {
                index: 0,
                utilization_percent: Some(87.0),
                memory_used_bytes: Some(40536 << 20),
                memory_total_bytes: Some(81559 << 20),
            }
        );
        assert_eq!(sample.utilization_percent(), Some(43.5));
        assert_eq!(sample.memory_used_bytes(), Some((40536 + 4) << 20));
        assert_eq!(sample.memory_total_bytes(), Some(2 * (81559 << 20)));
    }

    #[test]
    fn nvidia_smi_values_not_reported_become_none() {
        let text = "0, [N/A], [Not Supported], 16384\r\n\n";
        let sample = parse_nvidia_smi(text).expect("one device");
        assert_eq!(sample.devices[0].utilization_percent, None);
        assert_eq!(sample.devices[0].memory_used_bytes, None);
        assert_eq!(sample.utilization_percent(), None);
        assert_eq!(sample.memory_used_bytes(), None);
        assert_eq!(sample.memory_total_bytes(), Some(16384 << 20));
    }

    #[test]
    fn malformed_nvidia_smi_output_gives_none() {
        for bad in [
            "",
            "\n\n",
            "No devices were found",
            "0, 87, 40536",
            "0, 87, 40536, 81559, 7",
            "gpu0, 87, 40536, 81559",
            "0, 87, 40536, 81559\nNVIDIA-SMI has failed",
            "-1, 87, 40536, 81559",
        ] {
            assert_eq!(parse_nvidia_smi(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_missing_gpu_program_fails_and_the_sampler_gives_up() {
        let _spawning = spawning();
        let mut sampler = GpuSampler::with_program("/nonexistent/nvidia-smi");
        for _ in 0..GpuSampler::MAX_FAILURES {
            assert!(!sampler.is_disabled());
            assert_eq!(sampler.sample(), None);
        }
        assert!(sampler.is_disabled());
        assert_eq!(sampler.sample(), None);
    }

    /// Serialises the tests that start processes: a script being written
    /// while another test forks could fail to exec (`ETXTBSY`).
    static SPAWNING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn spawning() -> std::sync::MutexGuard<'static, ()> {
        SPAWNING
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A shell script in a directory of its own, removed with it.
    #[cfg(unix)]
    struct Script {
        dir: PathBuf,
        path: PathBuf,
    }

    #[cfg(unix)]
    impl Script {
        fn path(&self) -> &std::path::Path {
            &self.path
        }
    }

    #[cfg(unix)]
    impl Drop for Script {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    #[cfg(unix)]
    fn script(name: &str, body: &str) -> Script {
        use std::os::unix::fs::PermissionsExt;
        let dir =
            std::env::temp_dir().join(format!("ray-insight-gpu-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write script");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Script { dir, path }
    }

    #[cfg(unix)]
    #[test]
    fn a_gpu_program_is_run_and_its_output_parsed() {
        let _spawning = spawning();
        let program = script("ok", "echo '0, 55, 1024, 2048'");
        let mut sampler = GpuSampler::with_program(program.path());
        let sample = sampler.sample().expect("parsed");
        assert_eq!(sample.devices[0].utilization_percent, Some(55.0));
        assert_eq!(sample.memory_used_bytes(), Some(1 << 30));
    }

    #[cfg(unix)]
    #[test]
    fn a_hung_gpu_program_is_killed_at_its_timeout() {
        let _spawning = spawning();
        let program = script("hang", "exec sleep 30");
        let mut sampler =
            GpuSampler::with_program(program.path()).with_timeout(Duration::from_millis(100));
        let started = Instant::now();
        assert_eq!(sampler.sample(), None);
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(!sampler.is_running());
        assert!(!sampler.is_disabled(), "one failure");
    }

    #[cfg(unix)]
    #[test]
    fn a_run_is_polled_without_waiting_and_killed_on_drop() {
        let _spawning = spawning();
        let slow = script("slow", "sleep 0.2; echo '0, 7, 1, 2'");
        let mut sampler = GpuSampler::with_program(slow.path());
        assert_eq!(sampler.poll(), GpuPoll::Idle);
        sampler.start();
        assert!(sampler.is_running());
        assert_eq!(sampler.poll(), GpuPoll::Running);
        sampler.start(); // one run at a time
        let deadline = Instant::now() + Duration::from_secs(10);
        let outcome = loop {
            match sampler.poll() {
                GpuPoll::Running if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                other => break other,
            }
        };
        let GpuPoll::Ready(sample) = outcome else {
            panic!("{outcome:?}");
        };
        assert_eq!(sample.devices[0].utilization_percent, Some(7.0));
        assert_eq!(sampler.poll(), GpuPoll::Idle, "the outcome is taken once");

        let hang = script("hang2", "exec sleep 30");
        let mut hung = GpuSampler::with_program(hang.path());
        hung.start();
        assert!(hung.is_running());
        let started = Instant::now();
        drop(hung);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "killed, not waited for"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_failing_gpu_program_gives_none() {
        let _spawning = spawning();
        let fails = script("fails", "echo '0, 1, 2, 3'; exit 9");
        let mut sampler = GpuSampler::with_program(fails.path());
        assert_eq!(sampler.sample(), None);
        let garbage = script("garbage", "echo 'Unable to determine'");
        let mut sampler = GpuSampler::with_program(garbage.path());
        assert_eq!(sampler.sample(), None);
    }

    #[test]
    #[ignore = "needs an NVIDIA GPU and its driver; run with -- --ignored there"]
    fn the_machines_gpus_are_read_through_nvidia_smi() {
        let _spawning = spawning();
        let mut sampler = GpuSampler::detect().expect("nvidia-smi on PATH");
        let sample = sampler.sample().expect("nvidia-smi output parsed");
        assert!(sample.count() >= 1);
        assert!(
            sample.memory_total_bytes().is_some_and(|b| b > 1 << 30),
            "{sample:?}"
        );
        assert!(sample
            .utilization_percent()
            .is_some_and(|u| (0.0..=100.0).contains(&u)));
    }

    #[test]
    fn the_process_sampler_reads_this_process_where_proc_exists() {
        let Some(mut sampler) = ProcessSampler::new() else {
            assert!(!Path::new("/proc/self/stat").exists() || !cfg!(target_os = "linux"));
            return;
        };
        let first = sampler.sample().expect("readable");
        assert!(first.rss_bytes > 1 << 20, "{first:?}");
        assert_eq!(first.cpu_percent, None);
        let spin = Instant::now();
        let mut x = 0u64;
        while spin.elapsed() < Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let second = sampler.sample().expect("readable");
        assert!(second.cpu_percent.is_some_and(|p| p >= 0.0), "{second:?}");
        assert!(second.cpu_seconds >= first.cpu_seconds);
    }

    #[test]
    fn an_unreadable_proc_dir_gives_none() {
        let mut sampler = ProcessSampler::at(Path::new("/nonexistent/proc/1"), 100, 4096);
        assert_eq!(sampler.sample(), None);
    }
}
