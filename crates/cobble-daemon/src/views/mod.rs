//! The views tier: answers that join several managers, so that none of them has to know
//! about the others. The services listing (the plan, the supervisor and the checks) and the
//! metrics (services, checks and log forwarding).

pub(crate) mod listing;
pub(crate) mod metrics;
