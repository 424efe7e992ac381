//! What the kernel says a process costs: CPU time from the process's CPU clock (all threads, to the
//! nanosecond; `/proc/<pid>/stat`'s utime + stime where it cannot be read) and resident memory from
//! `/proc/<pid>/status` (`VmRSS`), and how busy the whole machine was (`/proc/stat`). Every process
//! in a run — voxgate, the bare relay, the echo and the load generator itself — is read the same
//! way, so their figures compare.

use std::time::{Duration, Instant};

/// CPU time (user + system, all threads) a process has used so far: the kernel's CPU clock of the
/// process, which sums its threads' run times to the nanosecond. `/proc/<pid>/stat` counts in clock
/// ticks (10 ms), ± 1.4 % of a 4 s window at N = 100; it is the fallback where the clock cannot
/// be read.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    process_clock(pid).or_else(|| stat_cpu_time(pid))
}

/// The process's CPU clock (`clock_getcpuclockid`, then `clock_gettime`).
fn process_clock(pid: u32) -> Option<Duration> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: the call writes one clockid_t through a pointer to a local.
    if unsafe { libc::clock_getcpuclockid(pid, &mut clock) } != 0 {
        return None;
    }
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: the call writes one timespec through a pointer to a local.
    if unsafe { libc::clock_gettime(clock, &mut now) } != 0 {
        return None;
    }
    Some(Duration::new(u64::try_from(now.tv_sec).ok()?, u32::try_from(now.tv_nsec).ok()?))
}

/// utime + stime from `/proc/<pid>/stat`, in clock ticks.
fn stat_cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses; the fields after its last ')' are fixed.
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the name: state is field 3, so utime (14) and stime (15) are at 11 and 12 here.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(ticks(utime + stime))
}

/// Resident set size in bytes.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A reading of the whole machine's idle time (all cores, from `/proc/stat`) and when it was taken.
pub struct MachineIdle {
    at: Instant,
    idle: Duration,
    cores: usize,
}

/// The whole machine's idle time now: idle + iowait of `/proc/stat`'s `cpu` line.
///
/// Busy time is derived from it (wall time × cores − idle), not read from the busy fields: those
/// are sampled at the scheduler tick, and with tickless idle a core that idles between short
/// bursts of work may meet no tick while busy. On the machine of docs/performance.md they read
/// 0.01 cores busy for a phase that used 0.55 (the processes' own CPU clocks), and 0.95 for the
/// same load a minute later. The idle time is measured at each idle entry and exit.
pub fn machine_idle() -> Option<MachineIdle> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let at = Instant::now();
    let mut lines = stat.lines();
    let line = lines.next()?.strip_prefix("cpu ")?;
    let values: Vec<u64> = line.split_whitespace().filter_map(|v| v.parse().ok()).collect();
    let idle = values.get(3)? + values.get(4)?;
    let cores = lines.take_while(|l| l.starts_with("cpu")).count();
    Some(MachineIdle { at, idle: ticks(idle), cores })
}

impl MachineIdle {
    /// Cores busy on average from this reading to `later`.
    pub fn busy_cores_until(&self, later: &MachineIdle) -> f64 {
        let wall = later.at.saturating_duration_since(self.at).as_secs_f64();
        if wall <= 0.0 {
            return f64::NAN;
        }
        let idle = later.idle.saturating_sub(self.idle).as_secs_f64();
        (self.cores as f64 - idle / wall).max(0.0)
    }
}

fn ticks(n: u64) -> Duration {
    // SAFETY: sysconf only reads a constant of the running system.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let per_second = if per_second > 0 { per_second as u64 } else { 100 };
    Duration::from_nanos(n.saturating_mul(1_000_000_000) / per_second)
}

/// A processor description for the report: `nproc` and the model name.
pub fn machine() -> String {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string()))
        .unwrap_or_else(|| "unknown CPU".into());
    format!("{cpus} × {model}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_cpu_time_and_memory() {
        let pid = std::process::id();
        // Spin until this process has used 30 ms of CPU (not of wall time: on a loaded machine the
        // two differ), within a generous wall-clock bound.
        let before = process_clock(pid).unwrap();
        let spin = std::time::Instant::now();
        let mut x = 0u64;
        while process_clock(pid).unwrap() < before + Duration::from_millis(30) && spin.elapsed() < Duration::from_secs(20) {
            for _ in 0..10_000 {
                x = x.wrapping_add(std::hint::black_box(1));
            }
        }
        std::hint::black_box(x);
        let exact = process_clock(pid).unwrap();
        let ticked = stat_cpu_time(pid).unwrap();
        assert!(exact >= before + Duration::from_millis(30), "{exact:?} from {before:?}");
        // The two count the same time; the ticks lag by at most a few of their 10 ms.
        assert!(exact.abs_diff(ticked) < Duration::from_millis(50), "{exact:?} against {ticked:?}");
        assert!(cpu_time(pid).unwrap() >= exact);
        assert!(rss_bytes(pid).unwrap() > 1024 * 1024);
    }

    #[test]
    fn a_spinning_thread_keeps_at_least_one_core_busy() {
        let before = machine_idle().unwrap();
        let spin = std::time::Instant::now();
        while spin.elapsed() < Duration::from_millis(300) {
            std::hint::black_box(0u64);
        }
        let busy = before.busy_cores_until(&machine_idle().unwrap());
        // One core spun the whole time (the idle counters move in 10 ms steps); others may work too.
        assert!(busy >= 0.85 && busy <= before.cores as f64, "{busy} of {} cores", before.cores);
    }

    #[test]
    fn another_process_has_its_own_cpu_clock() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; cat > /dev/null"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        // The child counts, then waits on its stdin: its clock stops short of the loop's cost.
        let mut last = Duration::ZERO;
        while std::time::Instant::now() < deadline {
            let now = process_clock(pid).unwrap();
            if now > Duration::from_millis(20) && now == last {
                break;
            }
            last = now;
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(last > Duration::from_millis(20), "{last:?}");
        assert!(last.abs_diff(stat_cpu_time(pid).unwrap()) < Duration::from_millis(50));
        drop(child.stdin.take());
        assert!(child.wait().unwrap().success());
    }
}
