//! CPU time of processes over a window, from `/proc/PID/stat`: what `ledger bench`
//! reports per measured call for the service, its database and itself, over the
//! measured calls only (after the set-up and the warm-up).

use std::time::Duration;

use anyhow::Context as _;
use tokio::time::Instant;

/// Clock ticks per second of `/proc/PID/stat` (`USER_HZ`): 100 on every Linux
/// architecture this runs on.
const TICKS_PER_SECOND: f64 = 100.0;

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
    tokio::time::sleep_until(from).await;
    let before = sample(&watched)?;
    tokio::time::sleep_until(to).await;
    let after = sample(&watched)?;
    Ok(watched
        .into_iter()
        .zip(before.into_iter().zip(after))
        .map(|(w, (b, a))| {
            let ticks = Duration::from_secs(a.saturating_sub(b));
            (w.name, ticks.div_f64(TICKS_PER_SECOND))
        })
        .collect())
}

fn sample(watched: &[Watched]) -> anyhow::Result<Vec<u64>> {
    watched.iter().map(|w| ticks(w.pid)).collect()
}

/// utime + stime, in clock ticks.
fn ticks(pid: Option<u32>) -> anyhow::Result<u64> {
    let path = pid.map_or_else(
        || "/proc/self/stat".to_owned(),
        |p| format!("/proc/{p}/stat"),
    );
    let stat = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    parse_ticks(&stat).with_context(|| format!("unexpected {path}: {stat}"))
}

/// Fields 14 and 15 of `stat`, counted after the command name, which may hold
/// spaces and parentheses (it ends at the last `)`).
fn parse_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_and_system_time_are_read_after_the_command_name() {
        let stat = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 1 0 0 0 1234 56 0 0 20 0 1 0";
        assert_eq!(parse_ticks(stat), Some(1290));
        assert_eq!(parse_ticks("4242 (x) S 1"), None);
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
