//! CPU counters the benches and the replay's cost section read: a process's CPU time
//! (`/proc/PID/stat`), the whole machine's busy time (`/proc/stat`) and a Redis's own
//! (`INFO cpu`). One reader of each, so every figure of CPU per reward is counted the
//! same way.

use fred::prelude::*;

/// Ticks per second of `/proc` CPU times (`USER_HZ`, 100 on Linux).
pub const USER_HZ: f64 = 100.0;

/// `utime + stime` of `pid`, ticks; `None` when it is gone.
pub fn proc_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_proc_ticks(&stat)
}

/// `utime + stime` from a `/proc/PID/stat` line (fields 14 and 15; the command name
/// in parentheses may hold spaces, so fields are counted after its closing `)`).
pub fn parse_proc_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Busy ticks of the whole machine (`/proc/stat`'s `cpu` line).
pub fn machine_busy_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_machine_busy(&stat)
}

/// Busy ticks from `/proc/stat`'s text: user, nice, system, irq, softirq and steal of
/// the `cpu` line (idle and iowait are not busy; a field that does not read counts 0).
pub fn parse_machine_busy(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    Some(at(0) + at(1) + at(2) + at(5) + at(6) + at(7))
}

/// `used_cpu_sys + used_cpu_user` of an `INFO cpu` text, seconds (the children's
/// lines, a fork's CPU, are not the server's).
pub fn parse_redis_cpu(info: &str) -> f64 {
    info.lines()
        .filter_map(|l| {
            let l = l.trim();
            l.strip_prefix("used_cpu_sys:")
                .or_else(|| l.strip_prefix("used_cpu_user:"))
        })
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .sum()
}

/// The CPU a Redis server has used since it started, seconds (`INFO cpu`).
pub async fn redis_cpu(client: &Client) -> Result<f64, fred::error::Error> {
    let info: String = client.info(Some(fred::types::InfoKind::Cpu)).await?;
    Ok(parse_redis_cpu(&info))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_proc_and_redis_counters() {
        let stat = "4242 (my (odd) name) S 1 2 3 4 5 6 7 8 9 10 130 27 0 0 20 0";
        assert_eq!(parse_proc_ticks(stat), Some(157));
        assert_eq!(parse_proc_ticks("garbage"), None);
        assert_eq!(parse_proc_ticks("1 (x) S 1 2"), None);
        assert_eq!(
            parse_machine_busy("cpu  10 1 5 1000 7 2 3 4 0 0\ncpu0 1 1 1 1\n"),
            Some(10 + 1 + 5 + 2 + 3 + 4)
        );
        assert!(
            (parse_redis_cpu(
                "used_cpu_sys:1.5\r\nused_cpu_user:2.25\r\nused_cpu_sys_children:9\r\n"
            ) - 3.75)
                .abs()
                < 1e-9
        );
        let own = proc_ticks(std::process::id());
        assert!(own.is_some(), "this process's own stat reads");
    }
}
