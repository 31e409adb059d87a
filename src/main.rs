//! The `ledger` binary: the command line, and the subcommands it dispatches to.

mod commands;

use std::process::ExitCode;

use clap::{Parser as _, Subcommand};
use ledger::config::{self, Cli};
use ledger_devtools::bench;

/// The service's subcommands (`ledger::config`), and `bench`, which is not part of
/// the service and so joins them only here, in the binary.
#[derive(Debug, Subcommand)]
enum Command {
    #[command(flatten)]
    Service(config::Command),
    /// Load a running server over gRPC and report throughput and latency
    Bench(bench::BenchArgs),
}

fn main() -> ExitCode {
    memory::settle();
    memory::return_freed_pages();
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(run()),
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> ExitCode {
    let cli = match Cli::<Command>::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    ledger::telemetry::init(cli.log_format);
    let result = match &cli.command {
        Command::Service(command) => match command {
            config::Command::Serve(args) => commands::serve(args).await,
            config::Command::Migrate(args) => commands::migrate(args).await,
            config::Command::Audit(args) => commands::audit(args).await,
            config::Command::Purge(args) => commands::purge(args).await,
            config::Command::Healthcheck(args) => return commands::healthcheck(args).await,
        },
        Command::Bench(args) => bench::run(args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `--help` and `--version` print as usual; a bad flag or value stops with its one
/// line, not clap's usage block.
fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    let rendered = e.render().to_string();
    let message: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.is_empty() && !l.starts_with("Usage:"))
        .collect();
    eprintln!("{}", message.join(" "));
    ExitCode::from(2)
}

/// The process's memory settings, made before any thread starts (docs/operations.md,
/// "Memory").
#[allow(unsafe_code)]
mod memory {
    /// mysql_async keeps up to `MYSQL_ASYNC_BUFFER_POOL_CAP` packet buffers for
    /// the whole process, each up to `MYSQL_ASYNC_BUFFER_SIZE_CAP` (by default 128
    /// of 4 MiB, which a burst of large posts fills for good); it reads both once,
    /// at its first connection. An operator's values stand.
    const MYSQL_BUFFERS: [(&str, &str); 2] = [
        ("MYSQL_ASYNC_BUFFER_POOL_CAP", "64"),
        ("MYSQL_ASYNC_BUFFER_SIZE_CAP", "65536"),
    ];

    pub(super) fn settle() {
        for (name, value) in MYSQL_BUFFERS {
            if std::env::var_os(name).is_none() {
                // SAFETY: called first in `main`, before the runtime or any other
                // thread exists, so nothing reads the environment meanwhile.
                unsafe { std::env::set_var(name, value) };
            }
        }
    }

    /// glibc's malloc returns the pages of a freed block to the system only from
    /// the top of a heap, and above a threshold that grows with the largest block
    /// freed (up to 64 MiB): what a burst of calls freed in the middle of its
    /// arenas stays resident after they are answered. A thread looks once a second
    /// at the arenas and, when they hold more than `HELD_FREE` free and anything
    /// was allocated or freed since it last looked, gives the free pages back
    /// (`malloc_trim`, which keeps the blocks, free, without their pages; the
    /// next burst faults them in again). Under steady load the arenas hold a MiB
    /// or two free, so the thread only looks.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    pub(super) fn return_freed_pages() {
        use std::time::Duration;

        const EVERY: Duration = Duration::from_secs(1);
        const HELD_FREE: usize = 4 << 20;

        let spawned = std::thread::Builder::new().name("memory".into()).spawn(|| {
            let mut last = (0, 0);
            loop {
                std::thread::sleep(EVERY);
                // SAFETY: both only read and adjust the allocator's own state,
                // under its locks; neither touches a block in use.
                let arenas = unsafe { libc::mallinfo2() };
                let now = (arenas.fordblks, arenas.uordblks);
                if arenas.fordblks > HELD_FREE && now != last {
                    unsafe { libc::malloc_trim(0) };
                }
                last = now;
            }
        });
        if let Err(e) = spawned {
            eprintln!("warning: freed memory will not be returned: {e}");
        }
    }

    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    pub(super) fn return_freed_pages() {}
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_cli_with_its_tools_is_well_formed() {
        use clap::CommandFactory as _;
        super::Cli::<super::Command>::command().debug_assert();
    }
}
