//! Keeping the live replay's client off its server's CPUs. In production the clients run on
//! other machines; in the in-process live replay the arrival timer shares the machine, and the
//! scheduler moves a model instance's thread between CPUs to make room for it, so a batch can
//! start on a cold core. Pinning the client to one CPU and the model instances to the others
//! keeps the server's cores to the server. Linux only; elsewhere nothing is pinned.
//!
//! Measured on the 2-core test VM (validate at 30% load, runs where the machine kept its
//! calibrated speed): p50 errors of -5.4%, -6.0%, -7.0% and -14.0% pinned against -5.0%, -9.2%,
//! -9.4% and -12.4% unpinned; no clear difference on so noisy a machine. It is kept for the
//! reason above, not for a measured gain.

/// The CPUs this process may run on, in increasing order (empty where unknown).
pub fn allowed_cpus() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `set` is a plain bit set that sched_getaffinity fills for the calling thread;
        // CPU_ISSET only reads it, with indices below CPU_SETSIZE.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
                return Vec::new();
            }
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
                .collect()
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        Vec::new()
    }
}

/// Restricts the calling thread to `cpus`; false when that is not possible (or `cpus` is
/// empty), in which case the thread runs where the scheduler puts it.
pub fn pin_current_thread(cpus: &[usize]) -> bool {
    #[cfg(target_os = "linux")]
    {
        if cpus.is_empty() {
            return false;
        }
        // SAFETY: `set` is a plain bit set written with CPU_SET below CPU_SETSIZE and passed by
        // reference with its size; pid 0 is the calling thread.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &cpu in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
                libc::CPU_SET(cpu, &mut set);
            }
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cpus;
        false
    }
}

/// Where the live replay's threads run: the client (arrival timer) on the first allowed CPU, the
/// model instances' threads on the others, one CPU each in turn. With fewer than 2 CPUs nothing
/// is pinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The client's CPU, when pinned.
    pub client: Option<usize>,
    /// CPUs the model instances' threads take in turn (empty: not pinned).
    pub servers: Vec<usize>,
}

impl Placement {
    /// The placement over `cpus` (as from [`allowed_cpus`]).
    pub fn over(cpus: &[usize]) -> Placement {
        match cpus {
            [client, servers @ ..] if !servers.is_empty() => Placement {
                client: Some(*client),
                servers: servers.to_vec(),
            },
            _ => Placement {
                client: None,
                servers: Vec::new(),
            },
        }
    }

    /// The CPU of model instance `index`, when pinned.
    pub fn server(&self, index: usize) -> Option<usize> {
        (!self.servers.is_empty()).then(|| self.servers[index % self.servers.len()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_takes_the_first_cpu_and_servers_share_the_rest() {
        let p = Placement::over(&[2, 3, 5]);
        assert_eq!(p.client, Some(2));
        assert_eq!(
            (0..4).map(|i| p.server(i)).collect::<Vec<_>>(),
            vec![Some(3), Some(5), Some(3), Some(5)]
        );
        let single = Placement::over(&[4]);
        assert_eq!((single.client, single.server(0)), (None, None));
        assert_eq!(Placement::over(&[]).server(1), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_thread_pinned_to_an_allowed_cpu_reports_only_that_cpu() {
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty(), "Linux reports the allowed CPUs");
        let last = *cpus.last().unwrap();
        let seen = std::thread::spawn(move || {
            assert!(pin_current_thread(&[last]));
            allowed_cpus()
        })
        .join()
        .unwrap();
        assert_eq!(seen, vec![last]);
    }
}
