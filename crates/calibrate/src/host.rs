//! Facts about the measuring machine that a profile records.

use std::process::Command;

/// The CPU model from `/proc/cpuinfo`, or `unknown`.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split_once(':'))
                .map(|(_, model)| model.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Logical CPUs available to this process.
pub fn logical_cpus() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

/// The first GPU's name and driver from `nvidia-smi`, or `unknown GPU` when it cannot say.
pub fn gpu_name() -> String {
    Command::new("nvidia-smi")
        .args(["--query-gpu=name,driver_version", "--format=csv,noheader"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|text| text.lines().next().map(str::to_string))
        .map(|line| match line.split_once(',') {
            Some((name, driver)) => format!("{} (driver {})", name.trim(), driver.trim()),
            None => line.trim().to_string(),
        })
        .unwrap_or_else(|| "unknown GPU (nvidia-smi unavailable)".into())
}

/// How long one thread has spent runnable but waiting for a CPU, from Linux's
/// `/proc/thread-self/schedstat` (its second field). The difference over a span is how long
/// other threads or processes kept the thread off the CPU.
///
/// The file stays open: opening it costs about 35 us (resolving `thread-self`), a read of the
/// open file about 2 us. A live server reads it around every batch, and 70 us of reads between
/// batches is a server overhead the simulator rightly does not have.
#[derive(Debug)]
pub struct CpuWaitMeter {
    file: Option<std::fs::File>,
}

impl CpuWaitMeter {
    /// The meter of the calling thread (read it from that thread only). Reads give `None` where
    /// the file is missing.
    pub fn for_this_thread() -> CpuWaitMeter {
        CpuWaitMeter {
            file: std::fs::File::open("/proc/thread-self/schedstat").ok(),
        }
    }

    /// The thread's total wait so far, in nanoseconds.
    pub fn read_ns(&self) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 96];
        let n = self.file.as_ref()?.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        text.split_whitespace().nth(1)?.parse().ok()
    }
}

/// Operating system and architecture, for example `linux x86_64`.
pub fn os() -> String {
    format!("{} {}", std::env::consts::OS, std::env::consts::ARCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn cpu_wait_is_read_on_linux_and_never_decreases() {
        let meter = CpuWaitMeter::for_this_thread();
        let before = meter
            .read_ns()
            .expect("Linux has /proc/thread-self/schedstat");
        // Work and yield so the scheduler has a chance to run others in between.
        let mut x = 0u64;
        for i in 0..100_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
            if i % 10_000 == 0 {
                std::thread::yield_now();
            }
        }
        std::hint::black_box(x);
        let after = meter.read_ns().expect("second read of the open file");
        assert!(after >= before, "wait went back: {before} -> {after}");
    }
}
