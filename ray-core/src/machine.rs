//! What this machine has: CPUs, memory and GPUs, detected for a node's
//! default resources (embedded `init`, `rayrs start`).
//!
//! Detection reads Linux's `/proc`; a source it cannot read counts as
//! nothing (no memory resource, no GPU), never as an error: flags and
//! [`Config`](crate::Config) fields override every figure.

use std::path::Path;

/// The share of the memory available at start that a node offers as its
/// `memory` resource, as Ray does (the rest is left to the object store
/// and the system).
pub const MEMORY_SHARE: f64 = 0.7;

/// What [`detect`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct Machine {
    /// Logical cores this process may use.
    pub cpus: usize,
    /// Memory available now, in bytes (`MemAvailable`), if known.
    pub available_memory_bytes: Option<u64>,
    /// The GPUs, in index order.
    pub gpus: Vec<Gpu>,
}

/// One GPU of the machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gpu {
    /// Its index (as CUDA counts them).
    pub index: u32,
    /// Its model, as the driver names it (`NVIDIA H100 80GB HBM3`), if known.
    pub model: Option<String>,
}

impl Machine {
    /// The `memory` resource a node offers by default: [`MEMORY_SHARE`] of
    /// the available memory, in bytes (0 when it is unknown).
    pub fn default_memory_bytes(&self) -> u64 {
        self.available_memory_bytes
            .map_or(0, |b| (b as f64 * MEMORY_SHARE) as u64)
            // A resource amount holds at most `MAX_UNITS` (1e12 bytes
            // here); a machine with more offers that much.
            .min(ray_sched::MAX_UNITS as u64)
    }

    /// The model shared by the GPUs, if there are any and one name fits all.
    pub fn gpu_model(&self) -> Option<&str> {
        let first = self.gpus.first()?.model.as_deref()?;
        self.gpus
            .iter()
            .all(|g| g.model.as_deref() == Some(first))
            .then_some(first)
    }
}

/// Detects this machine's resources; GPUs as `CUDA_VISIBLE_DEVICES`
/// limits them when it is set (indices; an empty value hides them all).
pub fn detect() -> Machine {
    let mut machine = detect_in(Path::new("/"));
    if let Ok(visible) = std::env::var("CUDA_VISIBLE_DEVICES") {
        machine.gpus = visible_gpus(machine.gpus, &visible);
    }
    machine
}

/// The GPUs `visible` (a `CUDA_VISIBLE_DEVICES` value) names, by index.
/// Entries that are not indices (UUIDs) keep the GPU at that position.
fn visible_gpus(gpus: Vec<Gpu>, visible: &str) -> Vec<Gpu> {
    let entries: Vec<&str> = visible
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    entries
        .iter()
        .enumerate()
        .filter_map(|(position, entry)| {
            let index = entry.parse::<u32>().unwrap_or(position as u32);
            gpus.iter().find(|g| g.index == index).cloned()
        })
        .collect()
}

/// [`detect`] with `/proc` and `/dev` read under `root` (for tests).
pub fn detect_in(root: &Path) -> Machine {
    Machine {
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        available_memory_bytes: available_memory(root),
        gpus: gpus(root),
    }
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
fn available_memory(root: &Path) -> Option<u64> {
    let meminfo = std::fs::read_to_string(root.join("proc/meminfo")).ok()?;
    meminfo.lines().find_map(|line| {
        let kib = line
            .strip_prefix("MemAvailable:")?
            .trim()
            .strip_suffix("kB")?;
        kib.trim().parse::<u64>().ok().map(|k| k * 1024)
    })
}

/// NVIDIA GPUs: one directory each under `/proc/driver/nvidia/gpus` (its
/// `information` file names the model), else one `/dev/nvidiaN` each.
/// [`detect`] then keeps those `CUDA_VISIBLE_DEVICES` lists, as Ray does.
fn gpus(root: &Path) -> Vec<Gpu> {
    let from_driver: Vec<Option<String>> =
        match std::fs::read_dir(root.join("proc/driver/nvidia/gpus")) {
            Ok(dir) => {
                let mut busses: Vec<_> = dir.filter_map(|e| e.ok()).map(|e| e.path()).collect();
                busses.sort();
                busses
                    .iter()
                    .map(|bus| {
                        let info = std::fs::read_to_string(bus.join("information")).ok()?;
                        info.lines().find_map(|l| {
                            let model = l.strip_prefix("Model:")?.trim();
                            (!model.is_empty()).then(|| model.to_owned())
                        })
                    })
                    .collect()
            }
            Err(_) => Vec::new(),
        };
    if !from_driver.is_empty() {
        return (0..)
            .zip(from_driver)
            .map(|(index, model)| Gpu { index, model })
            .collect();
    }
    let Ok(dev) = std::fs::read_dir(root.join("dev")) else {
        return Vec::new();
    };
    let mut indices: Vec<u32> = dev
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_prefix("nvidia")?.parse().ok()
        })
        .collect();
    indices.sort_unstable();
    indices
        .into_iter()
        .map(|index| Gpu { index, model: None })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, path: &str, text: &str) {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().expect("a file in a directory")).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn temp_root(name: &str) -> std::path::PathBuf {
        let root = std::env::temp_dir().join(format!("ray-machine-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        root
    }

    #[test]
    fn memory_and_gpu_models_are_read_from_the_driver() {
        let root = temp_root("driver");
        write(
            &root,
            "proc/meminfo",
            "MemTotal:       2000 kB\nMemAvailable:   1000 kB\n",
        );
        for bus in ["0000:19:00.0", "0000:3b:00.0"] {
            write(
                &root,
                &format!("proc/driver/nvidia/gpus/{bus}/information"),
                "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   42\n",
            );
        }
        let m = detect_in(&root);
        assert_eq!(m.available_memory_bytes, Some(1000 * 1024));
        assert_eq!(m.default_memory_bytes(), 716_800);
        assert_eq!(m.gpus.len(), 2);
        assert_eq!(m.gpus[1].index, 1);
        assert_eq!(m.gpu_model(), Some("NVIDIA H100 80GB HBM3"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn device_nodes_count_gpus_when_the_driver_says_nothing() {
        let root = temp_root("dev");
        for dev in ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "null"] {
            write(&root, &format!("dev/{dev}"), "");
        }
        let m = detect_in(&root);
        assert_eq!(m.gpus.iter().map(|g| g.index).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(m.gpu_model(), None);
        assert_eq!(m.available_memory_bytes, None);
        assert_eq!(m.default_memory_bytes(), 0);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn cuda_visible_devices_limits_the_gpus() {
        let gpus: Vec<Gpu> = (0..4).map(|index| Gpu { index, model: None }).collect();
        let indices = |v: &str| -> Vec<u32> {
            visible_gpus(gpus.clone(), v)
                .iter()
                .map(|g| g.index)
                .collect()
        };
        assert_eq!(indices("2,0"), [2, 0]);
        assert_eq!(indices(""), Vec::<u32>::new());
        assert_eq!(indices("7"), Vec::<u32>::new(), "no such GPU");
        assert_eq!(
            indices("GPU-aaaa,GPU-bbbb"),
            [0, 1],
            "UUIDs keep their positions"
        );
    }

    #[test]
    fn a_machine_without_gpus_has_none() {
        let root = temp_root("none");
        write(&root, "dev/null", "");
        assert!(detect_in(&root).gpus.is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
