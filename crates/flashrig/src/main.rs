//! The `flashrig` command.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use flashrig::config::Config;
use flashrig::error::Error;
use flashrig::run::render_summary;
use flashrig_runtime::RuntimeKind;

/// mimalloc instead of the system allocator: the simulated engines allocate per I/O (request
/// buffers, per-read tables), and glibc's malloc spent 12-15% of a FusionRAID trace replay's
/// wall time in `_int_malloc` and `malloc_consolidate` (docs/benchmarks.md, "reproduce
/// scalaafa"). Results do not depend on the allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "flashrig",
    version,
    about = "Emulated SSDs, all-flash-array engines, and the workloads that measure them",
    long_about = "flashrig runs block-device stacks (engines built on RAM disks, files, remote \
                  NBD exports or emulated SSDs) on a deterministic simulated runtime or on real \
                  threads, and reports throughput, latency and every layer's counters. Devices: \
                  ram, file, nbd and the emulated SSD (`type = \"ssd\"` with a preset, see \
                  `flashrig ssd presets`); engines: stripe, concat, raid, twophase and scala. \
                  See README.md for each command."
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
        /// Take the workload from an fio job file (the configuration supplies the stack).
        #[command(flatten)]
        fio: FioArgs,
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
    /// Run an experiment: a configuration with a `[sweep]` table of settings to vary; every
    /// combination runs and the table compares them (configs/experiments/).
    Sweep {
        /// The experiment file.
        experiment: PathBuf,
        /// Directory for the result files (one per run).
        #[arg(long, short = 'o', default_value = "sweep-results")]
        out: PathBuf,
        /// List the runs without running them.
        #[arg(long)]
        list: bool,
        /// Print nothing but the table and errors.
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
        /// The best vector instruction set the WOM-v page passes may use (default: the best
        /// this CPU has), to measure what each gains.
        #[arg(long, value_enum)]
        simd: Option<SimdArg>,
    },
    /// Measure the host cost model's figures on this machine: parity, copy, mapping update,
    /// lock hand-off and hold, and flashrig's own submit cost (docs/cost-model.md).
    Calibrate {
        /// Short runs, for a rough look.
        #[arg(long)]
        quick: bool,
        /// Also write the TOML to this file.
        #[arg(long = "out", short = 'o')]
        out: Option<PathBuf>,
    },
    /// Check models against their analytic values and datasheets and write the report.
    Validate {
        #[command(subcommand)]
        what: ValidateCommand,
    },
    /// Compare result files side by side: a table, optionally a CSV and SVG plots.
    Report {
        /// Result files written by `flashrig run --json`.
        #[arg(required = true)]
        results: Vec<PathBuf>,
        /// Also write the table as CSV here (a row per run and per job).
        #[arg(long)]
        csv: Option<PathBuf>,
        /// Write the per-second time series of every run and job as CSV here.
        #[arg(long)]
        series_csv: Option<PathBuf>,
        /// Draw latency-cdf, throughput and iops plots (SVG and PNG) into this directory.
        #[arg(long)]
        plot: Option<PathBuf>,
    },
    /// Arm, disarm or list the faults of a served stack's `inject` layers through the socket
    /// that `flashrig serve ... --control SOCKET` listens on (docs/inject.md).
    Inject {
        /// The server's control socket.
        socket: PathBuf,
        #[command(subcommand)]
        action: InjectCommand,
    },
    /// File systems under SSD faults (jaffer-thesis-2023 chapter 2): for each file system,
    /// test program, fault kind and structure the program touches, one experiment on a fresh
    /// image through FUSE and a loop device, classified by the thesis' Table 2.4
    /// (docs/fsfault.md). Needs root, /dev/fuse, loop devices and each file system's tools.
    #[command(long_about = "File systems under SSD faults (jaffer-thesis-2023 chapter 2): for \
                      each file system, test program (Table 2.2), fault kind and structure the \
                      program touches (found by a tracing run), one experiment on a fresh copy \
                      of a populated image served through `flashrig serve fuse` with an \
                      `inject` layer and a loop device, classified by the thesis' Table 2.4 \
                      (docs/fsfault.md).\n\n\
                      Results go to --results (observations.jsonl, one line per experiment, \
                      appended as each ends; fsfault.csv) and the report to --out. Run again on \
                      the same folder, it runs only what is missing: an interrupted study \
                      resumes. Needs root, /dev/fuse, loop devices and each file system's mkfs \
                      and checker.")]
    Fsfault {
        #[command(flatten)]
        study: FsfaultArgs,
        /// Where the observations, traces and images go.
        #[arg(long, default_value = "fsfault-results")]
        results: PathBuf,
        /// The report (Markdown) [default: <results>/fsfault.md].
        #[arg(long, short = 'o')]
        out: Option<PathBuf>,
        /// Where to draw the heat maps [default: <results>/figures].
        #[arg(long)]
        plots: Option<PathBuf>,
        /// Experiments in parallel (default: one per CPU).
        #[arg(long, short = 'j')]
        jobs: Option<usize>,
        /// Print nothing but errors.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Serve a device stack to real clients until SIGINT or SIGTERM (the real runtime).
    Serve {
        #[command(subcommand)]
        frontend: ServeCommand,
    },
    /// Reproduce a paper's evaluation at reduced scale and write the comparison document.
    Reproduce {
        #[command(subcommand)]
        paper: ReproduceCommand,
    },
    /// The reliability swarm: seeded runs, each drawing a stack, a workload and a fault
    /// schedule (power cuts at command boundaries, torn unflushed writes, cuts during recovery,
    /// member losses and rebuilds), checked against the reference model (docs/reliability.md).
    Swarm {
        /// The first run's seed (run i has seed N + i).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Stop after this many runs (default: 100, unless --minutes is given).
        #[arg(long)]
        runs: Option<u64>,
        /// Stop after this many minutes of wall time.
        #[arg(long)]
        minutes: Option<f64>,
        /// Only the stack of this name, or stacks whose names start with it (`--list`).
        #[arg(long)]
        stack: Option<String>,
        /// At most this many rounds per run (the shrinker's knob).
        #[arg(long)]
        rounds: Option<usize>,
        /// At most this many commands per round (the shrinker's knob).
        #[arg(long)]
        ops: Option<u64>,
        /// Report a failure as drawn, without shrinking it first.
        #[arg(long)]
        no_shrink: bool,
        /// List the stacks and exit.
        #[arg(long)]
        list: bool,
        /// Plant a bug in twophase (flushes skip a member): the swarm must catch it.
        #[arg(long, hide = true)]
        planted_bug: bool,
    },
    /// Verify every block of a stack's redundant layers (checksums, parity, replicas) and
    /// repair what redundancy allows; the stack is opened as a server opens it (nothing is
    /// formatted). Exit status 1 when blocks stay unrepairable (docs/reliability.md).
    Scrub {
        /// Configuration file (TOML) naming the stack; `[workload]` is ignored.
        config: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Block traces: statistics, format conversion, reduction.
    Trace {
        #[command(subcommand)]
        command: TraceCommand,
    },
    /// The emulated SSD: list presets, show one.
    Ssd {
        #[command(subcommand)]
        command: SsdCommand,
    },
    /// Crash writer and checker, and stamped-block verification (README, "Crash checking").
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
        #[command(flatten)]
        fio: FioArgs,
    },
}

/// A workload from an fio job file.
#[derive(clap::Args)]
struct FioArgs {
    /// An fio job file whose job replaces the configuration's workload.
    #[arg(long, value_name = "JOBFILE")]
    fio: Option<PathBuf>,
    /// The job section to run when the file has several.
    #[arg(long, requires = "fio")]
    section: Option<String>,
}

/// What every `serve` frontend takes.
#[derive(clap::Args)]
struct ServeArgs {
    /// Configuration file (TOML): its device stack is served; `[workload]` is ignored.
    config: PathBuf,
    /// Refuse writes, trims and zeroing.
    #[arg(long)]
    read_only: bool,
    /// Format arrays whose configuration says `start = "create"` (by default a server
    /// recovers what its members hold, and formats only blank members).
    #[arg(long)]
    format: bool,
    /// Print nothing but errors.
    #[arg(long, short)]
    quiet: bool,
    /// When serving stops, write every layer's counters (conversions, GC, grants, the SSDs'
    /// or files' I/O) to this file as JSON.
    #[arg(long, value_name = "FILE")]
    stats: Option<PathBuf>,
    /// Scrub the stack every this many seconds while serving (SIGUSR1 starts one at any
    /// time); each report goes to stderr.
    #[arg(long, value_name = "SECONDS")]
    scrub_every: Option<f64>,
    /// Listen on this Unix socket for `flashrig inject` requests that arm and disarm the
    /// faults of the stack's `inject` layers while it serves.
    #[arg(long, value_name = "SOCKET")]
    control: Option<PathBuf>,
}

#[derive(Subcommand)]
enum InjectCommand {
    /// List the armed faults: layer, id, kind, injections so far.
    List,
    /// Arm a fault, given as the lines of its table in the configuration's TOML form, e.g.
    /// `arm 'kind = "read-error"' 'lba = 5' 'nth = 2'`; prints its id.
    Arm {
        /// The inject layer, when the stack has more than one.
        #[arg(long)]
        layer: Option<String>,
        #[arg(required = true, value_name = "KEY = VALUE")]
        fields: Vec<String>,
    },
    /// Disarm the fault with this id.
    Disarm {
        /// The inject layer, when the stack has more than one.
        #[arg(long)]
        layer: Option<String>,
        id: u64,
    },
}

#[derive(Subcommand)]
enum ServeCommand {
    /// An NBD server (newstyle, fixed): qemu, nbdkit's tools, fio's nbd engine connect to it.
    Nbd {
        #[command(flatten)]
        common: ServeArgs,
        /// Listen on this Unix socket ...
        #[arg(long, conflicts_with = "tcp")]
        socket: Option<PathBuf>,
        /// ... or on TCP at this address (default 127.0.0.1:10809, NBD's port).
        #[arg(long)]
        tcp: Option<String>,
        /// The export's name (clients asking for "" get it too).
        #[arg(long, default_value = "flashrig")]
        name: String,
        /// Also export the device split into N equal partitions, named `<name>-0` ...
        /// `<name>-(N-1)` (LVM-like volumes; CSAL's tenants). The last takes the remainder.
        #[arg(long, default_value_t = 0)]
        partitions: u64,
    },
    /// The stack as one file in a FUSE mount (for a loop device and a kernel file system).
    Fuse {
        #[command(flatten)]
        common: ServeArgs,
        /// An existing empty directory to mount on.
        mountpoint: PathBuf,
        /// The file's name in the mount.
        #[arg(long, default_value = "disk")]
        file_name: String,
    },
}

#[derive(Subcommand)]
enum ReproduceCommand {
    /// ScalaAFA (ATC'24) §6, Figs. 9-16: our engines over emulated FEMU SSDs, in simulation,
    /// the paper's numbers beside ours (docs/reproduce-scalaafa.md).
    #[command(
        long_about = "ScalaAFA (ATC'24) §6, Figs. 9-16: our engines over emulated FEMU SSDs, in \
                      simulation, the paper's numbers beside ours, with whether ours points the \
                      same way (direction) and why where they differ.\n\n\
                      The full run (no flag) writes the committed document \
                      docs/reproduce-scalaafa.md, its plots in docs/figures/scalaafa/ and every \
                      run's result file in reproduce-results/scalaafa/. --quick writes \
                      everything to reproduce-results/scalaafa-quick/ instead, and never \
                      overwrites a document a full run wrote, even when -o names it (exit \
                      status 2)."
    )]
    Scalaafa {
        #[command(flatten)]
        common: ReproduceArgs,
        /// The real traces (MANIFEST.txt and the files it lists).
        #[arg(long, default_value = "../shared/traces")]
        traces: PathBuf,
    },
    /// WAFLASH §2.2 and §5, Figs. 1-2 and 8-16: its buffer and FTL policies in flashrig's
    /// emulated SSD on stand-in traces, the paper's numbers beside ours
    /// (docs/reproduce-waflash.md).
    #[command(
        long_about = "WAFLASH §2.2 and §5, Figs. 1-2 and 8-16: the Baseline, PC-LRU, MV-FTL, \
                      WAFLASH and MCA as firmware policies of flashrig's emulated SSD, replaying \
                      stand-ins of the paper's traces open-loop, the paper's numbers beside ours \
                      with direction and why.\n\n\
                      The full run (no flag) writes the committed document \
                      docs/reproduce-waflash.md, its plots in docs/figures/waflash/ and every \
                      run's result file in reproduce-results/waflash/. --quick writes everything \
                      to reproduce-results/waflash-quick/ instead, and never overwrites a \
                      document a full run wrote (exit status 2)."
    )]
    Waflash {
        #[command(flatten)]
        common: ReproduceArgs,
    },
    /// CSAL §3 and §6, Figs. 3 and 10-19 and Table 4: CSAL and its baselines (raw QLC,
    /// Open-CAS, dm-zoned) as flashrig stacks over the same emulated devices, the paper's
    /// numbers beside ours (docs/reproduce-csal.md).
    #[command(long_about = "CSAL §3 and §6, Figs. 3 and 10-19 and Table 4: the raw QLC SSD, an \
                      Open-CAS-like write-back cache, a dm-zoned-like target, CSAL-BLK and \
                      CSAL-ZNS as flashrig stacks over reduced-scale P5800X, P5316 and ZN540 \
                      presets, eight jobs at QD128, the paper's numbers beside ours with \
                      direction and why.\n\n\
                      The full run (no flag) writes the committed document \
                      docs/reproduce-csal.md, its plots in docs/figures/csal/ and every run's \
                      result file in reproduce-results/csal/. --quick writes everything to \
                      reproduce-results/csal-quick/ instead, and never overwrites a document a \
                      full run wrote (exit status 2).")]
    Csal {
        #[command(flatten)]
        common: ReproduceArgs,
    },
    /// jaffer-thesis-2023 chapter 3, §3.7: WOM-v codes on flashrig's QLC SSD, the
    /// micro-benchmarks and traces of Figs. 3.7-3.14 and the analytic models, the thesis'
    /// numbers beside ours (docs/reproduce-womv.md).
    #[command(long_about = "jaffer-thesis-2023 chapter 3, §3.7: NO_WOM, WOM-v(2,4) and \
                      WOM-v(1,4) with the default GC, GC_OPT and NR mode, and an MLC drive of \
                      the same cells, as firmware of flashrig's emulated QLC SSD (the qlc-femu \
                      preset), on §3.7.1's micro-benchmarks and on the real trace slices and \
                      stand-ins reduced the thesis' way; with `flashrig validate womv`'s \
                      analytic models (Figs. 3.3-3.4, §3.7.7-§3.7.12); the thesis' numbers \
                      beside ours with direction and why.\n\n\
                      The full run (no flag) writes the committed document \
                      docs/reproduce-womv.md, its plots in docs/figures/womv/ and every run's \
                      result file in reproduce-results/womv/. --quick writes everything to \
                      reproduce-results/womv-quick/ instead, and never overwrites a document a \
                      full run wrote (exit status 2).")]
    Womv {
        #[command(flatten)]
        common: ReproduceArgs,
        /// The real traces (MANIFEST.txt and the files it lists); those missing are skipped.
        #[arg(long, default_value = "../shared/traces")]
        traces: PathBuf,
    },
    /// jaffer-thesis-2023 chapter 2: ext4, xfs and btrfs under SSD faults, Tables 2.5/2.6's
    /// shape, the severe outcomes beside the thesis' ~16% (docs/reproduce-fsfault.md).
    /// Needs root, /dev/fuse and loop devices.
    #[command(long_about = "jaffer-thesis-2023 chapter 2: `flashrig fsfault` over ext4, xfs \
                      (in place of f2fs) and btrfs, every program of Table 2.2, the thesis' \
                      five fault modes and the latency study, the thesis' findings beside \
                      ours.\n\n\
                      The full run writes docs/reproduce-fsfault.md, its heat maps in \
                      docs/figures/fsfault/ and the observations in \
                      reproduce-results/fsfault/ (resumable: a second run on the same folder \
                      runs only what is missing). --quick runs ext4 alone with nine programs \
                      and writes to reproduce-results/fsfault-quick/. Needs root, /dev/fuse, \
                      loop devices and the file systems' tools.")]
    Fsfault {
        #[command(flatten)]
        common: ReproduceArgs,
    },
}

/// What a fault study runs (`flashrig fsfault`).
#[derive(clap::Args)]
struct FsfaultArgs {
    /// File systems (comma-separated): ext4, xfs, btrfs.
    #[arg(long = "fs", value_delimiter = ',', default_value = "ext4,xfs,btrfs")]
    file_systems: Vec<String>,
    /// Test programs (comma-separated; default: all of Table 2.2, mount and umount included).
    #[arg(long, value_delimiter = ',')]
    programs: Vec<String>,
    /// Fault kinds (comma-separated): read-error, write-error, corrupt, shorn, lost,
    /// misdirect, stale, delay [default: the thesis' five, read-error to lost].
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<String>,
    /// Only these structures (comma-separated; default: every one a program touches).
    #[arg(long, value_delimiter = ',')]
    structures: Vec<String>,
    /// The study's seed (images' UUIDs, each experiment's corruption).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Seconds a mount, a program or an unmount may take before it counts as hung.
    #[arg(long, default_value_t = 60)]
    deadline_s: u64,
    /// Keep <results>/work/: each worker's last experiment (image, stack, inject log).
    #[arg(long)]
    keep_work: bool,
}

impl FsfaultArgs {
    fn options(
        self,
        results: PathBuf,
        jobs: Option<usize>,
        quiet: bool,
    ) -> Result<flashrig::lab::fsfault::study::Options, Error> {
        use flashrig::lab::fsfault::study::{all_programs, Options, THESIS_KINDS};
        let exe = std::env::current_exe()
            .map_err(|e| Error::Io(format!("cannot find the flashrig binary: {e}")))?;
        let opts = Options {
            exe,
            file_systems: self.file_systems,
            programs: if self.programs.is_empty() { all_programs() } else { self.programs },
            kinds: if self.kinds.is_empty() {
                THESIS_KINDS.iter().map(|k| k.to_string()).collect()
            } else {
                self.kinds
            },
            structures: self.structures,
            seed: self.seed,
            jobs: flashrig::lab::core::schedule::workers(jobs.unwrap_or(0)),
            results,
            deadline_s: self.deadline_s,
            quiet,
            keep_work: self.keep_work,
        };
        opts.check()?;
        Ok(opts)
    }
}

/// What every `flashrig reproduce <paper>` takes.
#[derive(clap::Args)]
struct ReproduceArgs {
    /// Shorter runs (smaller SSDs, shorter traces, fewer cases): minutes on 2 cores. Writes
    /// to reproduce-results/<paper>-quick/ unless told otherwise.
    #[arg(long)]
    quick: bool,
    /// The smallest sizes, for flashrig's own tests; writes to
    /// reproduce-results/<paper>-smoke/ unless told otherwise.
    #[arg(long, hide = true, conflicts_with = "quick")]
    smoke: bool,
    /// The document to write [default: docs/reproduce-<paper>.md; with --quick,
    /// reproduce-results/<paper>-quick/reproduce-<paper>.md]. --quick refuses to overwrite a
    /// full run's document.
    #[arg(long, short = 'o')]
    out: Option<PathBuf>,
    /// Where to draw the plots, SVG and PNG [default: docs/figures/<paper>; with --quick,
    /// reproduce-results/<paper>-quick/figures].
    #[arg(long)]
    plots: Option<PathBuf>,
    /// Where to keep every run's result file and the synthetic traces [default:
    /// reproduce-results/<paper>; with --quick, reproduce-results/<paper>-quick/results].
    #[arg(long)]
    results: Option<PathBuf>,
    /// Runs in parallel (default: one per CPU); results do not depend on it.
    #[arg(long, short = 'j')]
    jobs: Option<usize>,
    /// Print nothing but errors.
    #[arg(long, short)]
    quiet: bool,
    /// Run nothing: write each planned run's configuration to DIR/<label>.toml, to run
    /// alone with `flashrig run` (with one key changed, say). Trace runs read the
    /// synthetic traces this writes under the results folder.
    #[arg(long, value_name = "DIR")]
    dump_configs: Option<PathBuf>,
    /// With --dump-configs: only these runs (comma-separated labels, as the result files
    /// are named, e.g. ScalaAFA-4+1-64k-seq-qd32-t1 or WAFLASH-MSNFS-8k-16m).
    #[arg(long, value_delimiter = ',', requires = "dump_configs")]
    only: Vec<String>,
}

impl ReproduceArgs {
    fn mode(&self) -> flashrig::lab::core::Mode {
        use flashrig::lab::core::Mode;
        if self.smoke {
            Mode::Smoke
        } else if self.quick {
            Mode::Quick
        } else {
            Mode::Full
        }
    }
    fn outputs(&self, paper: &str) -> flashrig::lab::core::Outputs {
        let defaults = flashrig::lab::core::Outputs::defaults(paper, self.mode());
        flashrig::lab::core::Outputs {
            doc: self.out.clone().unwrap_or(defaults.doc),
            plots: self.plots.clone().unwrap_or(defaults.plots),
            results: self.results.clone().unwrap_or(defaults.results),
        }
    }
}

/// Writes the configurations `dump` returns (for --dump-configs) and lists them.
fn print_dumped(written: Vec<String>, dir: &std::path::Path, quiet: bool) {
    if !quiet {
        eprintln!("wrote {} configuration(s) to {}", written.len(), dir.display());
    }
    for label in written {
        println!("{}", dir.join(format!("{label}.toml")).display());
    }
}

/// The end of a reproduction: where the document went, and an error naming failed runs.
fn reproduced(failed: Vec<String>, doc: &std::path::Path, quiet: bool) -> Result<(), Error> {
    if !quiet {
        eprintln!("wrote {}", doc.display());
    }
    if !failed.is_empty() {
        return Err(Error::Run(format!(
            "{} run(s) failed (listed in {}): {}",
            failed.len(),
            doc.display(),
            failed.join("; ")
        )));
    }
    Ok(())
}

#[derive(Subcommand)]
enum ValidateCommand {
    /// The emulated SSD: steady-state write amplification of the FTL beside the Lambert-W
    /// closed form, and the 980 Pro-like preset beside its datasheet (docs/validation.md).
    Ssd {
        /// Where to write the report (Markdown).
        #[arg(long, short = 'o', default_value = "docs/validation.md")]
        out: PathBuf,
        /// Shorter runs (a rough check; the committed report uses the full runs).
        #[arg(long)]
        quick: bool,
    },
    /// WOM-v codes: the thesis' analytic models (jaffer-thesis-2023 §3.4, Figures 3.3-3.5)
    /// beside coded pages written with random data, and the thesis' numbers
    /// (docs/validation-womv.md).
    Womv {
        /// Where to write the report (Markdown).
        #[arg(long, short = 'o', default_value = "docs/validation-womv.md")]
        out: PathBuf,
        /// A user's code as a TOML table (name, data_bits, level_bits, decode: one data value
        /// per level, -1 for a level that is no code-word), compared beside the built-ins;
        /// repeatable.
        #[arg(long = "code")]
        codes: Vec<PathBuf>,
    },
}

/// Options every trace command takes to read its input.
#[derive(clap::Args)]
struct TraceInput {
    /// The trace file.
    trace: PathBuf,
    /// msr, fiu, spc, alibaba, disksim, vscsi, blkparse, or csv (a header naming the columns); detected when absent.
    #[arg(long)]
    format: Option<String>,
    /// Skip malformed lines (and count them) instead of stopping at the first.
    #[arg(long)]
    skip_bad: bool,
    /// Size to assume for MSR records without a size column (e.g. 4KiB).
    #[arg(long)]
    assume_size: Option<String>,
}

#[derive(Subcommand)]
enum TraceCommand {
    /// ScalaAFA Table 2's columns, WAFLASH's unaligned-write ratios, update frequencies.
    Stats {
        #[command(flatten)]
        input: TraceInput,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Rewrite a trace in another format.
    Convert {
        #[command(flatten)]
        input: TraceInput,
        /// Output file.
        #[arg(long, short = 'o')]
        out: PathBuf,
        /// msr or disksim.
        #[arg(long, default_value = "msr")]
        to: String,
    },
    /// Generate a synthetic trace with the read/write mix and mean sizes of a row of
    /// ScalaAFA's Table 2 (proxy0, prn, src2, CFS, DAP, webmail) and, by default, the locality
    /// published for the trace; or a stand-in for a WAFLASH trace (MSNFS, DTR, RA, Ex, Web,
    /// waflash-CFS) with its unaligned-write ratios, or WAFLASH Fig. 2's noise workload
    /// (waflash-noise with --unaligned-percent) (docs/traces.md).
    Synth {
        /// The Table 2 row or WAFLASH trace to imitate, or waflash-noise.
        #[arg(long)]
        like: String,
        /// How many requests (at most 1000000000).
        #[arg(long, default_value_t = 10_000)]
        requests: u64,
        /// Address span (for example 16GiB).
        #[arg(long, default_value = "16GiB")]
        span: String,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Addresses: `published` (working set, hot/cold skew and sequential runs from the
        /// published characterisations, the faithful stand-in) or `none` (uniform over the
        /// span, the first version; same times, kinds and sizes).
        #[arg(long, default_value = "published")]
        locality: String,
        /// For --like waflash-noise only: the percentage of writes that start 1 KiB past an
        /// 8 KiB page (0 to 100; WAFLASH Fig. 2's x axis).
        #[arg(long)]
        unaligned_percent: Option<f64>,
        #[arg(long, short = 'o')]
        out: PathBuf,
        #[arg(long, default_value = "msr")]
        to: String,
    },
    /// Shrink a trace (the thesis' segment- or subset-based method) and check the
    /// update-frequency distribution (r^2).
    Reduce {
        #[command(flatten)]
        input: TraceInput,
        #[arg(long, short = 'o')]
        out: PathBuf,
        /// segment or subset.
        #[arg(long)]
        method: String,
        /// Target footprint (for example 1GiB): the segment's or subset's distinct pages.
        #[arg(long)]
        capacity: Option<String>,
        /// Subset: keep every N-th page by update frequency.
        #[arg(long)]
        factor: Option<u64>,
        #[arg(long, default_value = "msr")]
        to: String,
    },
}

#[derive(Subcommand)]
enum SsdCommand {
    /// List the SSD presets compiled into flashrig.
    Presets,
    /// Print a preset with every value and its sources, as a device configuration.
    Show { preset: String },
}

#[derive(Subcommand)]
enum DebugCommand {
    /// Write self-describing blocks to the configuration's stack, logging every issue,
    /// completion and flush on stdout, until killed or `--max-writes` (used by crash tests).
    CrashWriter {
        config: PathBuf,
        #[arg(long, default_value_t = 8)]
        iodepth: usize,
        #[arg(long, default_value_t = 64)]
        flush_every: u64,
        #[arg(long, default_value_t = u64::MAX)]
        max_writes: u64,
    },
    /// Read every block of the configuration's stack and check that each holds zeros or a
    /// stamped block naming its own address. Exits 1 if one does not.
    VerifyPattern { config: PathBuf },
    /// Check a stack after a crash writer was killed: replay its log into the reference model
    /// and read back every block it wrote. Exits 1 if a block holds what it may not.
    CrashCheck {
        config: PathBuf,
        /// The crash writer's stdout.
        #[arg(long)]
        log: PathBuf,
    },
    /// Fill an empty directory (a fresh file system's root) with what the file-system test
    /// programs work on (jaffer-thesis-2023.txt §2.4.4).
    FsPopulate { root: PathBuf },
    /// Run one test program of the thesis' Table 2.2 on a populated tree; prints each step's
    /// outcome as JSON. Exits 1 if a step failed.
    FsProgram {
        /// open, creat, access, stat, lstat, chmod, chown, utime, rename, read, write,
        /// truncate, readlink, symlink, unlink, chdir, rmdir, mkdir, getdirentries, chroot.
        program: String,
        root: PathBuf,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum RuntimeArg {
    Sim,
    Real,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum SimdArg {
    Scalar,
    Avx2,
    Avx512,
}

#[derive(Clone, Copy, ValueEnum, PartialEq)]
enum BenchArg {
    Sim,
    Messages,
    /// The emulated SSD: simulation speed (tiny preset, steady state) and memory (64 GiB
    /// scalaafa-femu preset in payload mode tag).
    Ssd,
    /// Trace parsing speed (MSR CSV lines per second).
    Trace,
    /// Array engines: raid full-stripe write throughput of one reactor on RAM members, and
    /// parity encoding through our code path beside ISA-L called directly.
    Engines,
    /// The WOM-v FTL: host writes per wall-second with cell-level coding (WOM-v(2,4), default
    /// GC and NR mode with GC_OPT) beside NO_WOM, 4 KiB pages, in the same run.
    Womv,
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

/// `flashrig swarm`: runs seeds until the budget is spent or one fails; a failure prints its
/// (shrunk) replay command and exits with status 1.
#[allow(clippy::too_many_arguments)]
fn swarm(
    seed: u64,
    runs: Option<u64>,
    minutes: Option<f64>,
    stack: Option<String>,
    rounds: Option<usize>,
    ops: Option<u64>,
    shrink: bool,
    list: bool,
    planted_bug: bool,
) -> Result<(), Error> {
    if list {
        for s in flashrig_swarm::catalogue() {
            let p = s.promise();
            println!(
                "{:<24} members {}  tolerates {}  crash-safe parity {}  recovery writes {}  \
                 heals rot {}  catches lost writes {}",
                s.name,
                s.members(),
                p.failures_tolerated,
                p.parity_crash_safe,
                p.recovery_writes,
                p.heals_corruption,
                p.catches_lost_writes
            );
        }
        return Ok(());
    }
    if minutes.is_some_and(|m| !(m > 0.0 && m.is_finite())) {
        return Err(Error::Input("--minutes must be a positive number".into()));
    }
    if rounds == Some(0) || ops == Some(0) {
        return Err(Error::Input("--rounds and --ops must be at least 1".into()));
    }
    let opts = flashrig_swarm::SwarmOptions {
        first_seed: seed,
        runs,
        minutes,
        limits: flashrig_swarm::Limits { stack, rounds, ops, planted_bug },
        shrink,
    };
    let mut last_print = std::time::Instant::now();
    let summary = flashrig_swarm::swarm(&opts, |s| {
        if last_print.elapsed().as_secs_f64() >= 5.0 {
            last_print = std::time::Instant::now();
            eprintln!(
                "swarm: {} runs, {} crash states, {:.0} states/s",
                s.tally.runs,
                s.tally.crash_states,
                s.states_per_s()
            );
        }
    })
    .map_err(|e| Error::Input(format!("--stack: {e}")))?;
    print!("{}", flashrig_swarm::render(&summary));
    match &summary.failure {
        None => Ok(()),
        Some(f) => Err(Error::Run(format!(
            "swarm run with seed {} ({}) failed: {}\nreplay: {}\nas first drawn: {}",
            f.seed, f.stack, f.message, f.replay, f.original
        ))),
    }
}

fn load(config: Option<&PathBuf>) -> Result<Config, Error> {
    match config {
        Some(p) => Config::load(p),
        None => Ok(Config::builtin()),
    }
}

/// Loads the configuration and, with `--fio`, replaces its workload by the job file's.
/// Options the job file names but that mean nothing on a flashrig stack are reported on
/// stderr unless `quiet`.
fn load_with_fio(config: Option<&PathBuf>, fio: &FioArgs, quiet: bool) -> Result<Config, Error> {
    let mut cfg = load(config)?;
    if let Some(path) = &fio.fio {
        if cfg.replay.is_some() {
            return Err(Error::Input(format!(
                "--fio {}: the configuration replays a trace; a job file replaces a workload",
                path.display()
            )));
        }
        let job = flashrig::fiojob::FioJob::load(path, fio.section.as_deref())?;
        if !quiet {
            for n in &job.notes {
                eprintln!("flashrig: note: {n}");
            }
        }
        cfg.workload = job.workload;
        if let Some(s) = job.seed {
            cfg.seed = s;
        }
        cfg.validate().map_err(|message| Error::Config {
            origin: format!("{} [{}]", path.display(), job.name),
            message,
        })?;
    }
    Ok(cfg)
}

/// Where `flashrig run --json <path>` writes: `path` itself, or for a phased run one file per
/// phase beside it, `<stem>.<phase>.json` (`r.json` and phase `randwrite4k`:
/// `r.randwrite4k.json`).
fn result_paths(path: &std::path::Path, cfg: &Config) -> Vec<PathBuf> {
    if cfg.phase.is_empty() {
        return vec![path.to_path_buf()];
    }
    let stem =
        path.file_stem().map_or_else(|| "result".into(), |s| s.to_string_lossy().into_owned());
    cfg.phase.iter().map(|p| path.with_file_name(format!("{stem}.{}.json", p.name))).collect()
}

fn dispatch(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Run { config, fio, seed, runtime, json, quiet } => {
            let mut cfg = load_with_fio(config.as_ref(), &fio, quiet)?;
            if let Some(s) = seed {
                cfg.seed = s;
            }
            if let Some(r) = runtime {
                cfg.runtime = match r {
                    RuntimeArg::Sim => RuntimeKind::Sim,
                    RuntimeArg::Real => RuntimeKind::Real,
                };
            }
            // Open the result files before the run, so a bad path is reported at once rather
            // than after a long run. A phased run writes one per phase, `<stem>.<phase>.json`.
            let mut json_files = Vec::new();
            if let Some(path) = &json {
                for p in result_paths(path, &cfg) {
                    let f = std::fs::File::create(&p).map_err(|e| {
                        Error::Input(format!("--json {}: cannot create the file: {e}", p.display()))
                    })?;
                    json_files.push((f, p));
                }
            }
            let outs = flashrig::run::run_all(&cfg, !quiet)?;
            for ((f, path), out) in json_files.iter_mut().zip(&outs) {
                use std::io::Write;
                f.write_all(out.result.to_json_pretty().as_bytes())
                    .map_err(|e| Error::Io(format!("cannot write {}: {e}", path.display())))?;
            }
            let mut errors = 0;
            for (index, out) in outs.iter().enumerate() {
                if !quiet {
                    if let Some(name) = &out.phase {
                        println!("phase {name} ({} of {}):", index + 1, outs.len());
                    }
                    print!("{}", render_summary(&cfg.for_phase(index), out));
                }
                errors += out.summary.errors;
            }
            if errors > 0 {
                return Err(Error::Run(format!("{errors} requests failed")));
            }
            Ok(())
        }
        Command::Sweep { experiment, out, list, quiet } => {
            let text = std::fs::read_to_string(&experiment).map_err(|e| {
                Error::Input(format!("cannot read experiment {}: {e}", experiment.display()))
            })?;
            let cases = flashrig::sweep::expand(&text, &experiment)?;
            if list {
                for c in &cases {
                    println!("{}", c.label);
                }
                return Ok(());
            }
            print!("{}", flashrig::sweep::run_all(&cases, &out, quiet)?);
            Ok(())
        }
        Command::Swarm {
            seed,
            runs,
            minutes,
            stack,
            rounds,
            ops,
            no_shrink,
            list,
            planted_bug,
        } => swarm(seed, runs, minutes, stack, rounds, ops, !no_shrink, list, planted_bug),
        Command::Scrub { config, json } => {
            let report = flashrig::scrub::scrub(Config::load(&config)?)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report).expect("a report serialises"));
            } else {
                println!("scrub of {}: {}", config.display(), flashrig::scrub::describe(&report));
            }
            if !report.clean() {
                return Err(Error::Run(format!(
                    "{} blocks are damaged beyond the stack's redundancy: reads of them fail",
                    report.unrepairable
                )));
            }
            Ok(())
        }
        Command::Config { command: ConfigCommand::Show { config, fio } } => {
            let cfg = load_with_fio(config.as_ref(), &fio, false)?;
            print!("{}", cfg.to_toml());
            Ok(())
        }
        Command::Bench { which, quick, simd } => {
            let scale = if quick { 10 } else { 1 };
            {
                use flashrig_ssd::firmware::womv::simd::{self, Isa};
                let limit = match simd {
                    None | Some(SimdArg::Avx512) => Isa::Avx512Vbmi,
                    Some(SimdArg::Avx2) => Isa::Avx2,
                    Some(SimdArg::Scalar) => Isa::Scalar,
                };
                // The benchmarks run on this thread (the simulated runtime included).
                simd::set_limit(limit);
                if simd.is_some() && simd::best() < limit {
                    eprintln!(
                        "note: --simd asked for {limit:?}, but this CPU's best is {:?}: \
                         the WOM-v passes use that",
                        simd::best()
                    );
                }
                eprintln!("WOM-v page passes: {:?}", simd::isa());
            }
            let mut results = Vec::new();
            if which == BenchArg::Sim || which == BenchArg::All {
                // 1,000 pending timers is a busy simulated array; 10,000 stresses the queue.
                results.push(flashrig::bench::sim_events(1_000, 20_000 / scale));
                results.push(flashrig::bench::sim_events(10_000, 2_000 / scale));
            }
            if which == BenchArg::Messages || which == BenchArg::All {
                results.push(flashrig::bench::real_messages(20_000_000 / scale));
                results.push(flashrig::bench::real_ping_pong(200_000 / scale));
            }
            print!("{}", flashrig::bench::render(&results));
            if which == BenchArg::Engines || which == BenchArg::All {
                let secs = if quick { 0.3 } else { 2.0 };
                let stripes = 200_000 / scale;
                let mut r = vec![
                    flashrig::bench::raid_full_stripe_write(4, 1, stripes),
                    flashrig::bench::twophase_write(4, 1, if quick { 1 } else { 3 }),
                    flashrig::bench::scala_write(4, 1, if quick { 1 } else { 3 }),
                    flashrig::bench::csal_write(if quick { 1 } else { 2 }),
                    flashrig::bench::scala_manager_messages(3, 200 / scale, 64),
                ];
                r.extend(flashrig::bench::csal_l2p_lookups(200_000 / scale));
                for (k, m) in [(4, 1), (6, 1), (6, 2)] {
                    r.extend(flashrig::bench::parity_encode(k, m, secs));
                }
                print!("{}", flashrig::bench::render(&r));
            }
            if which == BenchArg::Trace || which == BenchArg::All {
                let (lines, secs) = flashrig_trace::bench_parse_msr(5_000_000 / scale as usize);
                println!(
                    "trace-parse: {lines} MSR CSV lines in {secs:.3} s = {:.2} M lines per second",
                    lines as f64 / secs / 1e6
                );
            }
            if which == BenchArg::Ssd || which == BenchArg::All {
                let (ios, secs) = flashrig::ssdlab::bench_sim_speed(4_000_000 / scale);
                println!(
                    "ssd-sim: tiny preset, steady-state QD32 4 KiB random writes, payload none: \
                     {ios} host I/Os in {secs:.3} s = {:.2} M host I/Os per wall-second",
                    ios as f64 / secs / 1e6
                );
                let policies = flashrig::ssdlab::bench_buffer_policies(quick)?;
                let base = policies[0].1 as f64 / policies[0].2;
                for (policy, ios, secs) in &policies {
                    let rate = *ios as f64 / secs;
                    println!(
                        "ssd-firmware-{policy}: micron-waflash, 8 KiB unaligned randrw at QD32 \
                         (configs/examples/waflash-unaligned.toml): {ios} host I/Os in \
                         {secs:.3} s = {:.2} M host I/Os per wall-second, {:.2}x lru",
                        rate / 1e6,
                        rate / base
                    );
                }
                let runs = flashrig::ssdlab::bench_firmware_on_trace(quick)?;
                let base_s = runs[0].2;
                for (firmware, ios, secs) in &runs {
                    println!(
                        "ssd-firmware-trace-{firmware}: micron-waflash, the MSNFS stand-in \
                         replayed open-loop (reproduce waflash's run): {ios} host I/Os in \
                         {secs:.3} s = {:.2} M host I/Os per wall-second, {:.2}x baseline",
                        *ios as f64 / secs / 1e6,
                        base_s / secs
                    );
                }
                if !quick {
                    let (cap, rss, secs) = flashrig::ssdlab::bench_tag_memory("scalaafa-femu");
                    println!(
                        "ssd-memory: scalaafa-femu, payload tag, {:.1} GiB written: peak \
                         resident memory {:.2} GiB ({secs:.1} s)",
                        cap as f64 / (1u64 << 30) as f64,
                        rss as f64 / (1u64 << 30) as f64
                    );
                }
            }
            if which == BenchArg::Womv || which == BenchArg::All {
                // The FTL alone, then the emulated SSD, each beside NO_WOM in the same run.
                let runs = [
                    (
                        "ftl",
                        "4 KiB pages, uniform random writes of random data with GC",
                        flashrig::womvlab::bench_ftl(200_000 / scale),
                        0,
                    ),
                    (
                        "ssd",
                        "QLC SSD (tiny geometry, FEMU QLC timings), QD32 4 KiB random writes of \
                         random data with GC, simulated",
                        flashrig::womvlab::bench_ssd(100_000 / scale),
                        1,
                    ),
                ];
                for (layer, what, rows, no_wom) in runs {
                    let base = rows[no_wom].writes as f64 / rows[no_wom].secs;
                    for r in &rows {
                        let rate = r.writes as f64 / r.secs;
                        println!(
                            "womv-{layer}-{}: {what}: {} host writes ({:.2} page programs each) \
                             in {:.3} s = {:.0} k writes per wall-second, {:.3}x NO_WOM",
                            r.mode,
                            r.writes,
                            r.programs_per_write,
                            r.secs,
                            rate / 1e3,
                            rate / base
                        );
                    }
                }
            }
            Ok(())
        }
        Command::Calibrate { quick, out } => flashrig::calibrate::command(quick, out.as_deref()),
        Command::Validate { what: ValidateCommand::Ssd { out, quick } } => {
            let file = std::fs::File::create(&out).map_err(|e| {
                Error::Input(format!("--out {}: cannot create the file: {e}", out.display()))
            })?;
            let v = flashrig::ssdlab::validate(quick);
            let cmd = if quick { "flashrig validate ssd --quick" } else { "flashrig validate ssd" };
            use std::io::Write;
            let mut f = file;
            f.write_all(flashrig::ssdlab::render(&v, cmd).as_bytes())
                .map_err(|e| Error::Io(format!("cannot write {}: {e}", out.display())))?;
            eprintln!("wrote {}", out.display());
            Ok(())
        }
        Command::Validate { what: ValidateCommand::Womv { out, codes } } => {
            let mut extra = Vec::new();
            for path in &codes {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    Error::Input(format!("--code {}: cannot read the file: {e}", path.display()))
                })?;
                let spec: flashrig_ssd::firmware::womv::WomCodeSpec = toml::from_str(&text)
                    .map_err(|e| Error::Input(format!("--code {}: {e}", path.display())))?;
                let code = flashrig_ssd::firmware::womv::WomCode::new(&spec)
                    .map_err(|e| Error::Input(format!("--code {}: {e}", path.display())))?;
                extra.push(code);
            }
            let v = flashrig::womvlab::validate(extra);
            let mut cmd = String::from("flashrig validate womv");
            for path in &codes {
                cmd.push_str(&format!(" --code {}", path.display()));
            }
            std::fs::write(&out, flashrig::womvlab::render(&v, &cmd))
                .map_err(|e| Error::Io(format!("cannot write {}: {e}", out.display())))?;
            eprintln!("wrote {}", out.display());
            Ok(())
        }
        Command::Trace { command } => trace(command),
        Command::Serve { frontend } => serve(frontend),
        Command::Inject { socket, action } => inject(&socket, action),
        Command::Reproduce { paper: ReproduceCommand::Scalaafa { common, traces } } => {
            use flashrig::lab::scalaafa::{self, Options};
            let opts = Options {
                mode: common.mode(),
                outputs: common.outputs("scalaafa"),
                traces,
                workers: common.jobs.unwrap_or(0),
                quiet: common.quiet,
            };
            if let Some(dir) = &common.dump_configs {
                print_dumped(scalaafa::dump_configs(&opts, dir, &common.only)?, dir, common.quiet);
                return Ok(());
            }
            reproduced(scalaafa::scalaafa(&opts)?, &opts.outputs.doc, common.quiet)
        }
        Command::Reproduce { paper: ReproduceCommand::Waflash { common } } => {
            use flashrig::lab::waflash::{self, Options};
            let opts = Options {
                mode: common.mode(),
                outputs: common.outputs("waflash"),
                workers: common.jobs.unwrap_or(0),
                quiet: common.quiet,
            };
            if let Some(dir) = &common.dump_configs {
                print_dumped(waflash::dump_configs(&opts, dir, &common.only)?, dir, common.quiet);
                return Ok(());
            }
            reproduced(waflash::waflash(&opts)?, &opts.outputs.doc, common.quiet)
        }
        Command::Reproduce { paper: ReproduceCommand::Csal { common } } => {
            use flashrig::lab::csal::{self, Options};
            let opts = Options {
                mode: common.mode(),
                outputs: common.outputs("csal"),
                workers: common.jobs.unwrap_or(0),
                quiet: common.quiet,
            };
            if let Some(dir) = &common.dump_configs {
                print_dumped(csal::dump_configs(&opts, dir, &common.only)?, dir, common.quiet);
                return Ok(());
            }
            reproduced(csal::csal(&opts)?, &opts.outputs.doc, common.quiet)
        }
        Command::Reproduce { paper: ReproduceCommand::Womv { common, traces } } => {
            use flashrig::lab::womv::{self, Options};
            let opts = Options {
                mode: common.mode(),
                outputs: common.outputs("womv"),
                traces,
                workers: common.jobs.unwrap_or(0),
                quiet: common.quiet,
            };
            if let Some(dir) = &common.dump_configs {
                print_dumped(womv::dump_configs(&opts, dir, &common.only)?, dir, common.quiet);
                return Ok(());
            }
            reproduced(womv::womv(&opts)?, &opts.outputs.doc, common.quiet)
        }
        Command::Fsfault { study, results, out, plots, jobs, quiet } => {
            let opts = study.options(results.clone(), jobs, quiet)?;
            let out = out.unwrap_or_else(|| results.join("fsfault.md"));
            let plots = plots.unwrap_or_else(|| results.join("figures"));
            let done = flashrig::lab::fsfault::study::run(&opts)?;
            let command: Vec<String> = std::env::args().collect();
            flashrig::lab::fsfault::report::write(&done, &out, &plots, &command.join(" "))?;
            fsfault_done(&done, &out, quiet)
        }
        Command::Reproduce { paper: ReproduceCommand::Fsfault { common } } => {
            use flashrig::lab::fsfault::{report, study};
            if common.dump_configs.is_some() {
                return Err(Error::Input(
                    "--dump-configs: the fault study runs no configurations of its own to dump; \
                     `flashrig fsfault --programs P --kinds K` runs a part of it"
                        .into(),
                ));
            }
            let mode = common.mode();
            let outputs = common.outputs("fsfault");
            flashrig::lab::core::output::check_overwrite(&outputs.doc, mode)?;
            let quick = mode != flashrig::lab::core::Mode::Full;
            let args = FsfaultArgs {
                file_systems: if quick { vec!["ext4".into()] } else { study::image_names() },
                programs: if quick {
                    study::QUICK_PROGRAMS.iter().map(|p| p.to_string()).collect()
                } else {
                    vec![]
                },
                kinds: study::THESIS_KINDS
                    .iter()
                    .chain(if quick { &[][..] } else { &["delay"][..] })
                    .map(|k| k.to_string())
                    .collect(),
                structures: vec![],
                seed: 1,
                deadline_s: 60,
                keep_work: false,
            };
            let opts = args.options(outputs.results.clone(), common.jobs, common.quiet)?;
            let done = study::run(&opts)?;
            let command = format!("flashrig reproduce fsfault{}", mode.flag());
            report::write(&done, &outputs.doc, &outputs.plots, &command)?;
            fsfault_done(&done, &outputs.doc, common.quiet)
        }
        Command::Report { results, csv, series_csv, plot } => {
            let runs = flashrig::report::load(&results)?;
            print!("{}", flashrig::report::table(&runs));
            if let Some(path) = csv {
                std::fs::write(&path, flashrig::report::csv(&runs))
                    .map_err(|e| Error::Input(format!("--csv {}: {e}", path.display())))?;
            }
            if let Some(path) = series_csv {
                std::fs::write(&path, flashrig::report::series_csv(&runs))
                    .map_err(|e| Error::Input(format!("--series-csv {}: {e}", path.display())))?;
            }
            if let Some(dir) = plot {
                for p in flashrig::report::plots(&runs, &dir)? {
                    eprintln!("wrote {}", p.display());
                }
            }
            Ok(())
        }
        Command::Ssd { command: SsdCommand::Presets } => {
            for name in flashrig_ssd::config::preset_names() {
                let cfg = flashrig_ssd::SsdConfig::preset(name).map_err(Error::Input)?;
                let layout = flashrig_ssd::media::Layout::new(&cfg).map_err(Error::Input)?;
                // A zoned namespace's writable capacity is its zones' capacities (its LBA space
                // also holds the hole past each zone's capacity).
                let (capacity, zones) = match layout.zones {
                    Some(z) => {
                        let bs = cfg.firmware.block_bytes as f64;
                        (
                            z.num_zones as f64 * z.zone_capacity_blocks as f64 * bs,
                            format!(
                                ", {} zones of {}",
                                z.num_zones,
                                flashrig::run::human_bytes(z.zone_capacity_blocks as f64 * bs)
                            ),
                        )
                    }
                    None => (layout.capacity_bytes() as f64, String::new()),
                };
                println!(
                    "{name:18} {:>10} logical, {} {}, {} planes, {} KiB pages, {} KiB IU{zones}",
                    flashrig::run::human_bytes(capacity),
                    cfg.nand.cell.name(),
                    if cfg.firmware.slc_cache_bytes > 0 { "+ SLC cache" } else { "" },
                    layout.planes,
                    cfg.geometry.page_bytes / 1024,
                    cfg.firmware.iu_bytes / 1024
                );
            }
            Ok(())
        }
        Command::Ssd { command: SsdCommand::Show { preset } } => {
            let cfg = flashrig_ssd::SsdConfig::preset(&preset).map_err(Error::Input)?;
            let mut t = toml::Table::new();
            t.insert(
                "device".into(),
                toml::Value::try_from(&cfg).map_err(|e| Error::Input(e.to_string()))?,
            );
            print!("{}", toml::to_string(&t).expect("serialises"));
            Ok(())
        }
        Command::Debug { command } => debug(command),
    }
}

fn size_arg(flag: &str, v: &Option<String>) -> Result<Option<u64>, Error> {
    v.as_deref()
        .map(|s| {
            flashrig::size::parse_size(s).map_err(|e| Error::Input(format!("{flag} {s}: {e}")))
        })
        .transpose()
}

fn trace(cmd: TraceCommand) -> Result<(), Error> {
    use flashrig::tracecmd::{self, Source};
    fn source(i: &TraceInput) -> Result<Source<'_>, Error> {
        Ok(Source {
            path: &i.trace,
            format: i.format.as_deref(),
            skip_bad: i.skip_bad,
            assume_size_bytes: size_arg("--assume-size", &i.assume_size)?,
        })
    }
    match &cmd {
        TraceCommand::Stats { input, json } => {
            print!("{}", tracecmd::stats(&source(input)?, *json)?);
        }
        TraceCommand::Convert { input, out, to } => {
            let (reqs, skipped, from) = source(input)?.read_all()?;
            tracecmd::write_trace(&reqs, out, to)?;
            eprintln!(
                "{} requests from {} ({}, {skipped} lines skipped) written to {} ({to})",
                reqs.len(),
                input.trace.display(),
                from.name(),
                out.display()
            );
        }
        TraceCommand::Synth {
            like,
            requests,
            span,
            seed,
            locality,
            unaligned_percent,
            out,
            to,
        } => {
            let locality = tracecmd::parse_locality(locality)?;
            let span = size_arg("--span", &Some(span.clone()))?.unwrap_or(0);
            let reqs =
                tracecmd::synth_trace(like, *requests, span, *seed, locality, *unaligned_percent)?;
            tracecmd::write_trace(reqs, out, to)?;
        }
        TraceCommand::Reduce { input, out, method, capacity, factor, to } => {
            let cap = size_arg("--capacity", capacity)?;
            print!("{}", tracecmd::reduce(&source(input)?, out, to, method, cap, *factor)?);
        }
    }
    Ok(())
}

fn debug(cmd: DebugCommand) -> Result<(), Error> {
    match cmd {
        DebugCommand::CrashWriter { config, iodepth, flush_every, max_writes } => {
            let cfg = Config::load(&config)?;
            let seed = cfg.seed;
            let (res, _) = flashrig_runtime::run(cfg.runtime, 1, move || async move {
                let dev = flashrig::stack::build(&cfg.device).await?;
                flashrig::crashcheck::writer(dev, seed, iodepth, flush_every.max(1), max_writes)
                    .await
                    .map_err(Error::Run)
            });
            res
        }
        DebugCommand::VerifyPattern { config } => {
            let cfg = Config::load(&config)?;
            let (res, _) = flashrig_runtime::run(cfg.runtime, 1, move || async move {
                let dev = flashrig::stack::build(&cfg.device).await?;
                flashrig::crashcheck::verify_pattern(dev).await.map_err(Error::Run)
            });
            let r = res?;
            println!(
                "{} blocks verified: {} written, {} zero, {} bad",
                r.written + r.zero + r.bad_count,
                r.written,
                r.zero,
                r.bad_count
            );
            for b in &r.bad {
                println!("  {b}");
            }
            if r.bad_count > 0 {
                return Err(Error::Run(format!("{} blocks hold the wrong data", r.bad_count)));
            }
            Ok(())
        }
        DebugCommand::CrashCheck { config, log } => {
            let cfg = Config::load(&config)?;
            let text = std::fs::read_to_string(&log)
                .map_err(|e| Error::Input(format!("cannot read log {}: {e}", log.display())))?;
            let seed = cfg.seed;
            let (res, _) = flashrig_runtime::run(cfg.runtime, 1, move || async move {
                let dev = flashrig::stack::build(&cfg.device).await?;
                let info = dev.info().clone();
                let (model, flushes) = flashrig::crashcheck::replay_log(&text, &info, seed);
                let model = std::sync::Arc::new(parking_lot::Mutex::new(model));
                let blocks =
                    flashrig_check::verify_after_crash(&dev, &model).await.map_err(Error::Run)?;
                Ok::<_, Error>((blocks, flushes))
            });
            let (blocks, flushes) = res?;
            println!("crash check passed: {blocks} blocks hold what they may ({flushes} flushes completed before the crash)");
            Ok(())
        }
        DebugCommand::FsPopulate { root } => flashrig::lab::fsfault::programs::populate(&root)
            .map_err(|e| Error::Io(format!("populating {}: {e}", root.display()))),
        DebugCommand::FsProgram { program, root } => {
            let out =
                flashrig::lab::fsfault::programs::run(&program, &root).map_err(Error::Input)?;
            println!("{}", serde_json::to_string(&out).expect("an outcome serialises"));
            match out.steps.iter().find(|s| s.error.is_some()) {
                None => Ok(()),
                Some(s) => Err(Error::Run(format!(
                    "{program}: {} failed: {}",
                    s.call,
                    s.error.as_deref().unwrap_or_default()
                ))),
            }
        }
    }
}

/// The end of a fault study: where the report went; an error when experiments could not run.
fn fsfault_done(
    done: &flashrig::lab::fsfault::study::Study,
    doc: &std::path::Path,
    quiet: bool,
) -> Result<(), Error> {
    if !quiet {
        eprintln!("wrote {}", doc.display());
    }
    let broken: Vec<&str> = done
        .observations
        .iter()
        .filter(|o| o.harness_error.is_some())
        .map(|o| o.id.as_str())
        .collect();
    if broken.is_empty() {
        return Ok(());
    }
    Err(Error::Run(format!(
        "{} experiment(s) could not run (the harness failed; run again to retry them): {}",
        broken.len(),
        broken.join(", ")
    )))
}

fn inject(socket: &std::path::Path, action: InjectCommand) -> Result<(), Error> {
    use flashrig::faultctl::{request, Request};
    let req = match action {
        InjectCommand::List => Request::List,
        InjectCommand::Arm { layer, fields } => Request::Arm { layer, fault: fields.join("\n") },
        InjectCommand::Disarm { layer, id } => Request::Disarm { layer, id },
    };
    let reply = request(socket, &req)?;
    if let Some(id) = reply.id {
        println!("armed fault {id}");
    }
    for f in reply.faults.unwrap_or_default() {
        println!("{} {} {} fired {}", f.layer, f.id, f.kind, f.fired);
    }
    Ok(())
}

fn serve(frontend: ServeCommand) -> Result<(), Error> {
    use flashrig::serve::{serve, ServeOptions, StartFrontend};
    let (common, start): (ServeArgs, StartFrontend) = match frontend {
        ServeCommand::Nbd { common, socket, tcp, name, partitions } => {
            use flashrig_serve::nbd::{Listen, NbdConfig};
            let listen = match (socket, tcp) {
                (Some(p), _) => Listen::Unix(p),
                (None, t) => {
                    let text = t.unwrap_or_else(|| "127.0.0.1:10809".into());
                    Listen::Tcp(text.parse().map_err(|e| {
                        Error::Input(format!("--tcp {text}: not an address:port ({e})"))
                    })?)
                }
            };
            let description = format!("flashrig {}", common.config.display());
            let cfg = NbdConfig { listen, export_name: name, description, partitions };
            (common, Box::new(move |ex| flashrig_serve::nbd::start(ex, cfg)))
        }
        ServeCommand::Fuse { common, mountpoint, file_name } => {
            use flashrig_serve::fuse::FuseConfig;
            if file_name.is_empty()
                || file_name.contains('/')
                || file_name == "."
                || file_name == ".."
            {
                return Err(Error::Input(format!(
                    "--file-name {file_name:?}: a file name, without '/'"
                )));
            }
            match std::fs::metadata(&mountpoint) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(Error::Input(format!(
                        "mountpoint {}: not a directory",
                        mountpoint.display()
                    )))
                }
                // A FUSE mount whose server died answers ENOTCONN until it is unmounted.
                Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
                    return Err(Error::Input(format!(
                        "mountpoint {}: a dead FUSE mount (its server was killed?): unmount it \
                         first with `umount -l {}`",
                        mountpoint.display(),
                        mountpoint.display()
                    )))
                }
                Err(e) => {
                    return Err(Error::Input(format!("mountpoint {}: {e}", mountpoint.display())))
                }
            }
            let cfg = FuseConfig { mountpoint, file_name };
            (common, Box::new(move |ex| flashrig_serve::fuse::mount(ex, cfg)))
        }
    };
    let cfg = Config::load(&common.config)?;
    let opts = ServeOptions {
        read_only: common.read_only,
        format: common.format,
        quiet: common.quiet,
        stats: common.stats,
        scrub_every_s: common.scrub_every,
        control: common.control,
    };
    serve(cfg, opts, start).map(|_| ())
}
