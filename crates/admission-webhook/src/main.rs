//! `admission-webhook`: see the library docs.

use std::process::ExitCode;

use admission_webhook::activation::{self, Taken};
use admission_webhook::flags::{self, Stop};

fn main() -> ExitCode {
    let mut args = std::env::args();
    let program = args.next().unwrap_or_else(|| "admission-webhook".into());
    let options = match flags::parse(args) {
        Ok(options) => options,
        Err(Stop::Help) => {
            eprint!("{}", flags::usage(&program));
            return ExitCode::SUCCESS;
        }
        Err(Stop::Error(message)) => {
            eprintln!("{message}");
            eprint!("{}", flags::usage(&program));
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                // kube logs every failed request once more; the webhook already logs the
                // error that denied the pod.
                .unwrap_or_else(|_| {
                    tracing_subscriber::EnvFilter::new("info,kube_client::client::builder=off")
                }),
        )
        .init();
    // Before the runtime: the process has one thread until then, and taking the passed
    // sockets changes the environment (see `activation::take`).
    let passed = match activation::take(options.listen_fd_name.as_deref()) {
        Ok(Taken::Nothing) => {
            if let Some(name) = &options.listen_fd_name {
                tracing::info!(
                    "no sockets passed (LISTEN_FDS) to take {name:?} from; listening on -webhookPort"
                );
            }
            None
        }
        Ok(Taken::ForAnotherProcess {
            listen_pid,
            own_pid,
        }) => {
            tracing::warn!(
                "ignoring the sockets in LISTEN_FDS: LISTEN_PID is {listen_pid}, not this process ({own_pid}); listening on -webhookPort"
            );
            None
        }
        Ok(Taken::Listener(passed)) => {
            tracing::info!(
                "using listening socket {:?} (fd {}) passed by the service manager",
                passed.name,
                passed.fd
            );
            Some(passed)
        }
        Err(err) => {
            tracing::error!("{err}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            tracing::error!("cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(admission_webhook::run(options, passed));
    // A LIST or a configuration read may still be on a blocking thread: do not wait for it.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            tracing::error!("{message}");
            ExitCode::FAILURE
        }
    }
}
