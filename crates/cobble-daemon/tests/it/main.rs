//! The daemon crate's integration tests: checks on the crate as a whole.

mod module_graph;
