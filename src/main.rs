//! The `etch` command line: inspect, run, benchmark, lower and generate with ExecuTorch
//! programs. Each subcommand lives in `cli/`; `etch help COMMAND` (or `--help`) describes
//! its options.

mod cli;

use clap::{Parser, Subcommand};

/// etch: run ExecuTorch programs (.pte)
#[derive(Parser, Debug)]
#[command(name = "etch", version, arg_required_else_help = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print a program's methods, inputs, outputs, operators, delegates and planned buffers
    #[command(args_override_self = true)]
    Inspect(cli::inspect::InspectArgs),
    /// Run a method and print (or write) its outputs
    #[command(args_override_self = true)]
    Run(cli::run::RunArgs),
    /// Time a method: load, first run, median/min/max over iterations, peak memory
    #[command(args_override_self = true)]
    Bench(cli::bench::BenchArgs),
    /// Lower a program for a device: delegates, host<->device copies, per-device plans
    #[command(args_override_self = true, long_about = cli::lower::LONG_ABOUT)]
    Lower(cli::lower::LowerArgs),
    /// Generate text with an LLM program (ExecuTorch's runner convention or etch's
    /// prefill/decode convention)
    #[command(args_override_self = true, long_about = cli::generate::LONG_ABOUT)]
    Generate(Box<cli::generate::GenerateArgs>),
    /// Run the test cases of a bundled program (.bpte) and compare every output with the
    /// expected one; exits with 1 when a case fails
    #[command(args_override_self = true)]
    Test(cli::test::TestArgs),
    /// List the portable CPU operators
    Ops,
    /// List the CPU and the CUDA devices (or why there is none)
    Devices,
}

fn main() {
    // Output piped into a command that stops reading (`etch inspect m.pte | head`) ends the
    // process quietly, as command-line tools do, instead of failing a write.
    #[cfg(unix)]
    // SAFETY: restores the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // Errors are reported as messages; a panic would be a bug, reported without a backtrace.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("etch: internal error: {info}");
    }));
    // Usage errors (unknown options, bad values, missing arguments) are clap's: a message
    // with the usage line on stderr, exit code 2. `--help` and `--version` exit 0.
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Inspect(a) => cli::inspect::cmd_inspect(a),
        Command::Run(a) => cli::run::cmd_run(a),
        Command::Bench(a) => cli::bench::cmd_bench(a),
        Command::Lower(a) => cli::lower::cmd_lower(a),
        Command::Generate(a) => cli::generate::cmd_generate(a),
        Command::Test(a) => match cli::test::cmd_test(a) {
            Ok(true) => Ok(()),
            // The report names the failing cases.
            Ok(false) => std::process::exit(1),
            Err(e) => Err(e),
        },
        Command::Ops => cli::devices::cmd_ops(),
        Command::Devices => cli::devices::cmd_devices(),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
