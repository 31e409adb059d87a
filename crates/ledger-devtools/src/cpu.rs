//! CPU time of processes over a window, from `/proc/PID/stat`: what `ledger bench`
//! reports per measured call for the service, its database and itself, over the
//! measured calls only (after the set-up and the warm-up).

use std::time::Duration;

use anyhow::Context as _;
use tokio::time::Instant;

/// A process to sample, by the name it is reported under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    pub name: String,
    /// `None`: this process.
    pub pid: Option<u32>,
}

impl std::str::FromStr for Watched {
    type Err = String;

    /// `NAME=PID`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (name, pid) = s
            .split_once('=')
            .ok_or_else(|| format!("expected NAME=PID, not {s:?}"))?;
        let pid = pid
            .parse()
            .map_err(|_| format!("{pid:?} is not a process id"))?;
        if name.is_empty() {
            return Err("the name is empty".to_owned());
        }
        Ok(Self {
            name: name.to_owned(),
            pid: Some(pid),
        })
    }
}

/// Every process's user + system CPU time between `from` and `to`, in seconds,
/// in the order given.
pub async fn over(
    watched: Vec<Watched>,
    from: Instant,
    to: Instant,
) -> anyhow::Result<Vec<(String, Duration)>> {
    // Clock ticks per second of `/proc/PID/stat` (`USER_HZ`), as the kernel says.
    let per_second = u32::try_from(procfs::ticks_per_second())?;
    tokio::time::sleep_until(from).await;
    let before = sample(&watched)?;
    tokio::time::sleep_until(to).await;
    let after = sample(&watched)?;
    Ok(watched
        .into_iter()
        .zip(before.into_iter().zip(after))
        .map(|(w, (b, a))| {
            let ticks = Duration::from_secs(a.saturating_sub(b));
            (w.name, ticks / per_second)
        })
        .collect())
}

fn sample(watched: &[Watched]) -> anyhow::Result<Vec<u64>> {
    watched.iter().map(|w| ticks(w.pid)).collect()
}

/// utime + stime, in clock ticks.
fn ticks(pid: Option<u32>) -> anyhow::Result<u64> {
    let process = match pid {
        None => procfs::process::Process::myself(),
        Some(pid) => procfs::process::Process::new(i32::try_from(pid)?),
    };
    let stat = process
        .and_then(|p| p.stat())
        .with_context(|| format!("cannot read the CPU time of process {pid:?}"))?;
    Ok(stat.utime + stat.stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_used_some_cpu_time() {
        let burnt: u64 = (0..50_000_000_u64).fold(0, |a, b| a ^ b.wrapping_mul(31));
        assert!(ticks(None).unwrap() > 0, "{burnt}");
    }

    #[test]
    fn a_watched_process_is_a_name_and_a_pid() {
        assert_eq!(
            "database=17".parse::<Watched>(),
            Ok(Watched {
                name: "database".to_owned(),
                pid: Some(17)
            })
        );
        assert!("17".parse::<Watched>().is_err());
        assert!("=17".parse::<Watched>().is_err());
        assert!("db=x".parse::<Watched>().is_err());
    }
}
