//! The managers tier: each owns one part of what the daemon knows or does (the state and its
//! persistence, the plan, service output, checks, supervision, exec, files, identities) and
//! is driven through its own handle. A manager may use the base tier and the managers it
//! names, never a view, the API or the daemon.

pub(crate) mod checks;
pub(crate) mod exec;
pub(crate) mod files;
pub(crate) mod identities;
pub(crate) mod layers;
pub(crate) mod logs;
pub(crate) mod services;
pub(crate) mod state;
