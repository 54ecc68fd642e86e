//! The host CPU a served model's requests cost, read from Linux's own accounting while a
//! calibration runs (`capsim calibrate --endpoint` on a server of this machine): the server's
//! processes (the one listening on the endpoint's port and every process below it, Triton's
//! Python-backend stubs among them) and the load generator's own, each run's CPU time against
//! its requests and the model's compute in it.
//!
//! A run's server CPU is `per_request * requests + compute_cores * compute`: the work each
//! request costs around the model (HTTP, (de)serialising, the backend's hand-over) and the cores
//! the model's compute keeps busy while it runs (about 1 for ONNX Runtime on one thread, about 0
//! for a model that sleeps or waits for a GPU). Runs whose batches differ in size (a closed loop
//! at one client and one at a full batch) tell the two apart; [`fit_host_cpu`] fits them by
//! least squares.

use std::collections::HashMap;
use std::path::Path;

/// Linux reports a process's CPU time in `/proc/PID/stat` in clock ticks of `USER_HZ`, which
/// is 100 on every architecture the kernel's user ABI fixes it for (x86, arm, riscv): 10 ms.
const TICK_NS: u64 = 10_000_000;

/// A server process on this machine, found by the port it listens on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerProcess {
    /// The listening process.
    pub pid: u32,
    /// The CPUs it may run on (its affinity, `Cpus_allowed_list`).
    pub cores: u32,
}

impl ServerProcess {
    /// The process listening on TCP `port` of this machine, when `/proc` shows one this user
    /// may see; `None` where none does (a server elsewhere, another user's, or no `/proc`).
    pub fn listening_on(port: u16) -> Option<ServerProcess> {
        let inodes: Vec<u64> = ["/proc/net/tcp", "/proc/net/tcp6"]
            .iter()
            .filter_map(|f| std::fs::read_to_string(f).ok())
            .flat_map(|text| listening_inodes(&text, port))
            .collect();
        let pid = inodes.iter().find_map(|&inode| pid_of_socket(inode))?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let cores = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .and_then(|list| count_cpu_list(list.trim()))?;
        Some(ServerProcess { pid, cores })
    }

    /// CPU time (user and system) of this process and every process below it, so far, in ns
    /// (10 ms ticks); `None` once the process is gone.
    pub fn tree_cpu_ns(&self) -> Option<u64> {
        let mut parent = HashMap::new();
        let mut cpu = HashMap::new();
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Some(stat) = read_stat(&entry.path().join("stat")) else {
                continue;
            };
            parent.insert(pid, stat.ppid);
            cpu.insert(pid, stat.ticks);
        }
        cpu.get(&self.pid)?;
        let below = |mut pid: u32| loop {
            if pid == self.pid {
                return true;
            }
            match parent.get(&pid) {
                Some(&p) if p != 0 && p != pid => pid = p,
                _ => return false,
            }
        };
        let ticks: u64 = cpu
            .iter()
            .filter(|&(&pid, _)| below(pid))
            .map(|(_, &t)| t)
            .sum();
        Some(ticks * TICK_NS)
    }
}

/// CPU time this process (the load generator) has used so far, in ns (10 ms ticks).
pub fn own_cpu_ns() -> Option<u64> {
    read_stat(Path::new("/proc/self/stat")).map(|s| s.ticks * TICK_NS)
}

/// One run's CPU: what the server's processes and the load generator used over it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunCpu {
    /// Requests the server answered in the run.
    pub requests: f64,
    /// The model's compute over the run, ns (every batch's, once: Triton's per-batch-size
    /// statistics).
    pub compute_ns: f64,
    /// The server's processes' CPU time over the run, ns.
    pub server_ns: f64,
    /// The load generator's CPU time over the run, ns.
    pub client_ns: f64,
}

/// The host CPU per request, fitted to a calibration's runs ([`fit_host_cpu`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostCpu {
    /// The server's CPUs (its affinity).
    pub cores: u32,
    /// The server's CPU per request outside the model's compute, ns.
    pub server_per_request_ns: f64,
    /// Cores the model's compute keeps busy while it runs (its CPU time over its wall time).
    pub compute_cores: f64,
    /// The load generator's CPU per request, ns (it runs on the same host).
    pub client_per_request_ns: f64,
    /// Runs fitted.
    pub runs: usize,
}

/// How far from collinear the runs' requests and compute must be for [`fit_host_cpu`] to tell
/// the per-request work from the compute's (1 - their squared correlation). A fixed-time model
/// that never batches ran 2.63-2.83 ms of compute a request in each of six runs (1 - r² below
/// 0.001), and its fit put all the server's CPU in the compute's 0.15 cores.
pub const MIN_INDEPENDENCE: f64 = 0.01;

/// Fits `server_ns = per_request * requests + compute_cores * compute_ns` over `runs` by least
/// squares (both terms at least 0), and the load generator's CPU per request as its CPU over
/// all runs' requests. `None` with fewer than two runs, or runs whose compute per request does
/// not vary (the two terms cannot be told apart).
pub fn fit_host_cpu(cores: u32, runs: &[RunCpu]) -> Option<HostCpu> {
    let runs: Vec<&RunCpu> = runs.iter().filter(|r| r.requests > 0.0).collect();
    if runs.len() < 2 {
        return None;
    }
    let (mut nn, mut nc, mut cc, mut ny, mut cy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for r in &runs {
        nn += r.requests * r.requests;
        nc += r.requests * r.compute_ns;
        cc += r.compute_ns * r.compute_ns;
        ny += r.requests * r.server_ns;
        cy += r.compute_ns * r.server_ns;
    }
    // 1 - det / (nn cc) is the runs' (uncentred) squared correlation of requests and compute:
    // near 1 when every run computes about as long per request (a model that never batches),
    // and the two terms cannot be told apart. 0.01 is a spread of compute per request of
    // about 10% (coefficient of variation) over runs of equal size.
    let det = nn * cc - nc * nc;
    if det < MIN_INDEPENDENCE * nn * cc {
        return None;
    }
    let (mut a, mut c) = ((ny * cc - cy * nc) / det, (cy * nn - ny * nc) / det);
    // A term fitted below zero is none: refit the other alone.
    if a < 0.0 {
        (a, c) = (0.0, (cy / cc).max(0.0));
    } else if c < 0.0 {
        (a, c) = ((ny / nn).max(0.0), 0.0);
    }
    let requests: f64 = runs.iter().map(|r| r.requests).sum();
    let client: f64 = runs.iter().map(|r| r.client_ns).sum();
    Some(HostCpu {
        cores,
        server_per_request_ns: a,
        compute_cores: c,
        client_per_request_ns: client / requests,
        runs: runs.len(),
    })
}

/// A process's parent and CPU ticks (user + system) from its `stat` file.
struct Stat {
    ppid: u32,
    ticks: u64,
}

fn read_stat(path: &Path) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(path).ok()?)
}

/// Parses `/proc/PID/stat`: the command name (field 2) is in parentheses and may hold spaces
/// and parentheses, so the fields are counted after its last `)`: state, ppid, ..., utime
/// (field 14), stime (field 15).
fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    Some(Stat {
        ppid: field(4)? as u32,
        ticks: field(14)? + field(15)?,
    })
}

/// The socket inodes listening on `port` in a `/proc/net/tcp` (or `tcp6`) table.
fn listening_inodes(table: &str, port: u16) -> Vec<u64> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local_port = f.get(1)?.rsplit_once(':')?.1;
            let listening = *f.get(3)? == "0A";
            (listening && u16::from_str_radix(local_port, 16).ok()? == port)
                .then(|| f.get(9)?.parse().ok())
                .flatten()
        })
        .collect()
}

/// The process holding socket `inode` open, if this user may see it.
fn pid_of_socket(inode: u64) -> Option<u32> {
    let target = format!("socket:[{inode}]");
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let fds = std::fs::read_dir(entry.path().join("fd")).ok()?;
            fds.flatten()
                .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == &*target))
                .then_some(pid)
        })
}

/// The CPUs in a list such as `0-3,6,8-9` (10 here); `None` when it does not parse.
fn count_cpu_list(list: &str) -> Option<u32> {
    let mut n = 0;
    for part in list.split(',') {
        n += match part.split_once('-') {
            Some((lo, hi)) => hi.parse::<u32>().ok()?.checked_sub(lo.parse().ok()?)? + 1,
            None => {
                part.parse::<u32>().ok()?;
                1
            }
        };
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_count_after_the_commands_last_parenthesis() {
        let text = "4242 (my (odd) cmd) S 17 4242 4242 0 -1 4194560 500 0 0 0 123 45 0 0 20 0 \
                    3 0 100 1000 50";
        let stat = parse_stat(text).unwrap();
        assert_eq!(stat.ppid, 17);
        assert_eq!(stat.ticks, 168);
    }

    #[test]
    fn the_listening_socket_of_a_port_is_found_in_the_tcp_table() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
            0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 31337 1 0 100 0 0 10 0\n\
            1: 0100007F:1F40 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 31338 1 0 100 0 0 10 0\n\
            2: 0100007F:1F41 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 31339 1 0 100 0 0 10 0\n";
        assert_eq!(listening_inodes(table, 8000), vec![31337]);
        assert_eq!(listening_inodes(table, 8001), vec![31339]);
        assert!(listening_inodes(table, 9000).is_empty());
    }

    #[test]
    fn cpu_lists_count_ranges_and_singles() {
        assert_eq!(count_cpu_list("0-1"), Some(2));
        assert_eq!(count_cpu_list("0-3,6,8-9"), Some(7));
        assert_eq!(count_cpu_list("5"), Some(1));
        assert_eq!(count_cpu_list("x"), None);
    }

    #[test]
    fn the_fit_recovers_the_per_request_and_compute_terms() {
        // 0.3 ms a request around the model, one core while it computes, 0.1 ms of client.
        let run = |requests: f64, compute_ms: f64| RunCpu {
            requests,
            compute_ns: compute_ms * 1e6,
            server_ns: (0.3 * requests + compute_ms) * 1e6,
            client_ns: 0.1e6 * requests,
        };
        let runs = [run(400.0, 400.0), run(400.0, 120.0), run(800.0, 500.0)];
        let fit = fit_host_cpu(2, &runs).unwrap();
        assert!((fit.server_per_request_ns - 0.3e6).abs() < 1.0, "{fit:?}");
        assert!((fit.compute_cores - 1.0).abs() < 1e-6, "{fit:?}");
        assert!((fit.client_per_request_ns - 0.1e6).abs() < 1e-6, "{fit:?}");
        // Compute per request that never varies cannot be told from the per-request work,
        // nor one that varies by 2% (a model that never batches).
        assert_eq!(
            fit_host_cpu(2, &[run(400.0, 400.0), run(800.0, 800.0)]),
            None
        );
        assert_eq!(
            fit_host_cpu(2, &[run(400.0, 1050.0), run(400.0, 1030.0)]),
            None
        );
    }

    #[test]
    fn a_model_that_holds_no_core_fits_zero_compute_cores() {
        // A model that sleeps: its compute costs no CPU; noise pulls the free fit below zero.
        let runs = [
            RunCpu {
                requests: 400.0,
                compute_ns: 1.0e9,
                server_ns: 0.121e9,
                client_ns: 0.0,
            },
            RunCpu {
                requests: 400.0,
                compute_ns: 0.3e9,
                server_ns: 0.122e9,
                client_ns: 0.0,
            },
        ];
        let fit = fit_host_cpu(2, &runs).unwrap();
        assert_eq!(fit.compute_cores, 0.0);
        assert!(
            (fit.server_per_request_ns - 0.30375e6).abs() < 1.0,
            "{fit:?}"
        );
    }

    #[test]
    fn this_process_has_a_cpu_time_and_a_listener_of_no_port_is_none() {
        assert!(own_cpu_ns().is_some());
        // Port 1 needs root to listen on and nothing here does.
        assert_eq!(ServerProcess::listening_on(1), None);
    }
}
