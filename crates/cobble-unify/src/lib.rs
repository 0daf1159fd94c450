//! Nothing to call: this crate exists for its `Cargo.toml`, which requests for the `cobble`
//! binary every feature another workspace member enables in a shared dependency, so that
//! each documented way of building cobble resolves the same features and gives every function
//! the same symbol name (see the manifest, and `crates/cobble/symbol-order.txt`).
#![forbid(unsafe_code)]
