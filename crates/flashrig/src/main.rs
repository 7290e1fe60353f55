//! The `flashrig` command.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use flashrig::config::Config;
use flashrig::error::Error;
use flashrig::run::render_summary;
use flashrig_runtime::RuntimeKind;

#[derive(Parser)]
#[command(
    name = "flashrig",
    version,
    about = "Emulated SSDs, all-flash-array engines, and the workloads that measure them",
    long_about = "flashrig runs storage engines (RAID, two-phase write, ScalaAFA, ...) over RAM, \
                  files or emulated SSDs, on a deterministic simulated runtime or on real \
                  threads, and reports throughput, latency and every layer's counters."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a closed-loop workload against a device stack (the built-in default without a file).
    Run {
        /// Configuration file (TOML). See `flashrig config show` for every option.
        config: Option<PathBuf>,
        /// Override the configuration's seed.
        #[arg(long)]
        seed: Option<u64>,
        /// Override the configuration's runtime.
        #[arg(long, value_enum)]
        runtime: Option<RuntimeArg>,
        /// Write the versioned JSON result file here.
        #[arg(long, short = 'o')]
        json: Option<PathBuf>,
        /// Print nothing but errors.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Inspect configurations.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Measure flashrig's own speed on this machine (see docs/benchmarks.md).
    Bench {
        /// Which benchmarks: sim, messages, or all.
        #[arg(value_enum, default_value = "all")]
        which: BenchArg,
        /// Smaller runs, for a quick look.
        #[arg(long)]
        quick: bool,
    },
    /// Tools for flashrig's own tests.
    #[command(hide = true)]
    Debug {
        #[command(subcommand)]
        command: DebugCommand,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print the effective configuration, defaults filled in.
    Show {
        /// Configuration file (TOML); the built-in default without one.
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum DebugCommand {
    /// Write self-describing blocks to the configuration's stack until killed, printing every
    /// acknowledgement (used by the crash tests).
    CrashWriter {
        config: PathBuf,
        #[arg(long, default_value_t = 8)]
        iodepth: usize,
        #[arg(long, default_value_t = 64)]
        flush_every: u64,
        #[arg(long, default_value_t = u64::MAX)]
        max_writes: u64,
    },
    /// Print what a stack holds, one line per block: `<lba> zero|corrupt|<lba>:<version>`.
    Dump { config: PathBuf },
}

#[derive(Clone, Copy, ValueEnum)]
enum RuntimeArg {
    Sim,
    Real,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum BenchArg {
    Sim,
    Messages,
    All,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flashrig: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

fn load(config: Option<&PathBuf>) -> Result<Config, Error> {
    match config {
        Some(p) => Config::load(p),
        None => Ok(Config::builtin()),
    }
}

fn dispatch(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Run { config, seed, runtime, json, quiet } => {
            let mut cfg = load(config.as_ref())?;
            if let Some(s) = seed {
                cfg.seed = s;
            }
            if let Some(r) = runtime {
                cfg.runtime = match r {
                    RuntimeArg::Sim => RuntimeKind::Sim,
                    RuntimeArg::Real => RuntimeKind::Real,
                };
            }
            let out = flashrig::run(&cfg)?;
            if let Some(path) = json {
                std::fs::write(&path, out.result.to_json_pretty())
                    .map_err(|e| Error::Io(format!("cannot write {}: {e}", path.display())))?;
            }
            if !quiet {
                print!("{}", render_summary(&cfg, &out.summary));
            }
            if out.summary.errors > 0 {
                return Err(Error::Run(format!("{} requests failed", out.summary.errors)));
            }
            Ok(())
        }
        Command::Config { command: ConfigCommand::Show { config } } => {
            let cfg = load(config.as_ref())?;
            print!("{}", cfg.to_toml());
            Ok(())
        }
        Command::Bench { which, quick } => {
            let scale = if quick { 10 } else { 1 };
            let mut results = Vec::new();
            if which == BenchArg::Sim || which == BenchArg::All {
                results.push(flashrig::bench::sim_events(10_000, 2_000 / scale));
            }
            if which == BenchArg::Messages || which == BenchArg::All {
                results.push(flashrig::bench::real_messages(20_000_000 / scale));
                results.push(flashrig::bench::real_ping_pong(200_000 / scale));
            }
            print!("{}", flashrig::bench::render(&results));
            Ok(())
        }
        Command::Debug { command } => debug(command),
    }
}

fn debug(cmd: DebugCommand) -> Result<(), Error> {
    match cmd {
        DebugCommand::CrashWriter { config, iodepth, flush_every, max_writes } => {
            let cfg = Config::load(&config)?;
            let seed = cfg.seed;
            let (res, _) = flashrig_runtime::run(cfg.runtime, 1, move || async move {
                let dev = flashrig::stack::build(&cfg.device)?;
                flashrig::crashcheck::writer(dev, seed, iodepth, flush_every.max(1), max_writes)
                    .await;
                Ok::<(), Error>(())
            });
            res
        }
        DebugCommand::Dump { config } => {
            let cfg = Config::load(&config)?;
            let interactive = std::io::stdout().is_terminal();
            let (res, _) = flashrig_runtime::run(cfg.runtime, 1, move || async move {
                let dev = flashrig::stack::build(&cfg.device)?;
                let bs = dev.info().block_size as usize;
                let mut buf = vec![0u8; bs];
                let mut out = String::new();
                for lba in 0..dev.info().num_blocks {
                    dev.read(lba, &mut buf, None)
                        .await
                        .map_err(|e| Error::Run(format!("read {lba}: {e}")))?;
                    use flashrig::crashcheck::{decode_block, BlockState};
                    let s = match decode_block(&buf) {
                        BlockState::Zero => "zero".to_string(),
                        BlockState::Corrupt => "corrupt".to_string(),
                        BlockState::Valid { lba, version } => format!("{lba}:{version}"),
                    };
                    out.push_str(&format!("{lba} {s}\n"));
                }
                Ok::<String, Error>(out)
            });
            let text = res?;
            let _ = interactive;
            print!("{text}");
            Ok(())
        }
    }
}
