//! Black-box tests of the `admission-webhook` binary: real processes, real TLS, a fake API
//! server over HTTPS on loopback, certificate files in a temporary directory.

mod activation;
mod certificates;
mod cli;
mod end_to_end;
mod support;
