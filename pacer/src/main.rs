//! The `pacer` binary: a thin wrapper over `pacer::cli`.

use clap::Parser;

fn main() {
    let run_start = std::time::Instant::now();
    let cli = match pacer::cli::Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let args: Vec<String> = std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            let e = pacer::cli::with_subcommand_hint(e, &args);
            // Usage errors are "bad input" (clap's own exit code for them is
            // 2 too); --help/--version exit 0.
            let code = if e.use_stderr() {
                pacer::output::EXIT_BAD_INPUT
            } else {
                0
            };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    // Messages go to stderr: warnings and errors always, information unless
    // -q, debug with -v, trace with -vv. RUST_LOG still wins.
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => "warn",
        (false, 0) => "info",
        (false, 1) => "debug",
        (false, _) => "trace",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level))
        .format_timestamp(None)
        .format_target(false)
        .init();
    std::process::exit(pacer::cli::main_with(cli, run_start));
}
