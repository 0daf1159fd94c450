//! `cobble`: the daemon (`cobble run`) and its command-line client in one binary, speaking
//! Pebble's CLI so that it can stand in for `pebble`.
//!
//! Everything lives in [`cli`]; `main` only hands over and returns the exit code.
#![forbid(unsafe_code)]

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
