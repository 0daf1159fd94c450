//! The managers tier: each owns one part of what the daemon knows or does (the state and its
//! persistence, the plan, service output, checks, supervision, exec, files, identities) and
//! is driven through its own handle. A manager may use the base tier and the managers it
//! names, never a view, the API or the daemon.

pub mod checks;
pub mod exec;
pub mod files;
pub mod identities;
pub mod layers;
pub mod logs;
pub mod services;
pub mod state;
