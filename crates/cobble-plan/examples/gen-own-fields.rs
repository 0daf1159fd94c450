//! Rewrites the generated list of cobble's own layer fields in each Markdown page named on
//! the command line (paths from the repository's top, run from there): `scripts/gen-docs`
//! runs it on every page that has the list's markers.

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut status = ExitCode::SUCCESS;
    for path in std::env::args().skip(1) {
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) => {
                eprintln!("{path}: {e}");
                status = ExitCode::FAILURE;
                continue;
            }
        };
        let Some(fresh) = cobble_plan::fields::refresh_own_fields(&path, &text) else {
            eprintln!("{path}: no generated list of cobble's own fields in it");
            status = ExitCode::FAILURE;
            continue;
        };
        if fresh != text
            && let Err(e) = std::fs::write(&path, fresh)
        {
            eprintln!("{path}: {e}");
            status = ExitCode::FAILURE;
        }
    }
    status
}
