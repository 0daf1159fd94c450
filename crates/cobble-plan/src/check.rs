//! Health checks and log targets: the other two kinds of plan entry.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::duration::GoDuration;
use crate::service::{Override, Startup, merge_map, merge_option, merge_string};

/// How often a check runs unless `period` is set.
pub const DEFAULT_CHECK_PERIOD: Duration = Duration::from_secs(10);
/// How long one run may take unless `timeout` is set (never more than the period).
pub const DEFAULT_CHECK_TIMEOUT: Duration = Duration::from_secs(3);
/// Consecutive failures before a check is "down" unless `threshold` is set.
pub const DEFAULT_CHECK_THRESHOLD: u32 = 3;

/// `level:` of a check, used to filter checks and by the health endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CheckLevel {
    /// Not given.
    #[default]
    Unset,
    /// `alive`.
    Alive,
    /// `ready` (which implies alive).
    Ready,
}

impl CheckLevel {
    /// The YAML spelling (`""` when unset).
    pub fn as_str(self) -> &'static str {
        match self {
            CheckLevel::Unset => "",
            CheckLevel::Alive => "alive",
            CheckLevel::Ready => "ready",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<CheckLevel> {
        Some(match text {
            "" => CheckLevel::Unset,
            "alive" => CheckLevel::Alive,
            "ready" => CheckLevel::Ready,
            _ => return None,
        })
    }
}

/// One health check. As for services, empty means "not set" and defaults live in accessors.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Check {
    /// The key under `checks:`.
    pub name: String,
    /// How this entry combines with earlier layers.
    pub override_: Override,
    /// Filtering level.
    pub level: CheckLevel,
    /// Whether the check runs at startup; unset means enabled.
    pub startup: Startup,
    /// Time between runs.
    pub period: Option<GoDuration>,
    /// Time allowed for one run. In a combined plan a value above the period is already
    /// lowered to the period, as Pebble does.
    pub timeout: Option<GoDuration>,
    /// Consecutive failures before the check is down; 0 means unset.
    pub threshold: u32,
    /// An HTTP GET that must answer 2xx.
    pub http: Option<HttpCheck>,
    /// A TCP connect that must succeed.
    pub tcp: Option<TcpCheck>,
    /// A command that must exit 0.
    pub exec: Option<ExecCheck>,
}

/// `http:` of a check.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HttpCheck {
    /// The URL to GET.
    pub url: String,
    /// Extra request headers.
    pub headers: BTreeMap<String, String>,
}

/// `tcp:` of a check.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TcpCheck {
    /// The port; 0 means unset. Not range-checked, like Pebble (a bad port fails the dial).
    pub port: u32,
    /// The host; `localhost` when empty.
    pub host: String,
}

/// `exec:` of a check.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecCheck {
    /// The command line, split like a service's but with no `[ ]` group.
    pub command: String,
    /// A service whose environment, user, group and working directory the command inherits
    /// (the fields below override them).
    pub service_context: String,
    /// Extra environment, merged over the context service's.
    pub environment: BTreeMap<String, String>,
    /// Numeric user to run as.
    pub user_id: Option<u32>,
    /// User name to run as.
    pub user: String,
    /// Numeric group to run as.
    pub group_id: Option<u32>,
    /// Group name to run as.
    pub group: String,
    /// Working directory.
    pub working_dir: String,
    /// The `rlimits` of the `service-context` service, filled in when the check is merged
    /// with its context (a layer cannot set them on a check).
    pub rlimits: crate::Rlimits,
}

impl Check {
    /// The time between runs (10s unless set).
    pub fn period(&self) -> Duration {
        self.period.map_or(DEFAULT_CHECK_PERIOD, |d| d.as_std())
    }

    /// The time allowed for one run (3s unless set), never more than the period.
    pub fn timeout(&self) -> Duration {
        self.timeout
            .map_or(DEFAULT_CHECK_TIMEOUT, |d| d.as_std())
            .min(self.period())
    }

    /// Consecutive failures before the check is down (3 unless set).
    pub fn threshold(&self) -> u32 {
        if self.threshold == 0 {
            DEFAULT_CHECK_THRESHOLD
        } else {
            self.threshold
        }
    }

    /// Whether the check runs at startup and on replan (unset counts as enabled).
    pub fn is_enabled(&self) -> bool {
        self.startup != Startup::Disabled
    }

    /// Applies a `merge` entry. The type sections merge field by field, so a check can end
    /// up with two types; plan validation rejects that.
    ///
    /// Every field is named, and every name must be used: a field added to [`Check`] does not
    /// compile until its merge rule is written here.
    #[deny(unused_variables)]
    pub(crate) fn merge(&mut self, other: &Check) {
        let Check {
            name: _,
            override_: _,
            level,
            startup,
            period,
            timeout,
            threshold,
            http,
            tcp,
            exec,
        } = other;
        if *level != CheckLevel::Unset {
            self.level = *level;
        }
        if *startup != Startup::Unknown {
            self.startup = startup.clone();
        }
        merge_option(&mut self.period, *period);
        merge_option(&mut self.timeout, *timeout);
        if *threshold != 0 {
            self.threshold = *threshold;
        }
        if let Some(other) = http {
            let http = self.http.get_or_insert_with(HttpCheck::default);
            merge_string(&mut http.url, &other.url);
            merge_map(&mut http.headers, &other.headers);
        }
        if let Some(other) = tcp {
            let tcp = self.tcp.get_or_insert_with(TcpCheck::default);
            if other.port != 0 {
                tcp.port = other.port;
            }
            merge_string(&mut tcp.host, &other.host);
        }
        if let Some(other) = exec {
            let exec = self.exec.get_or_insert_with(ExecCheck::default);
            merge_string(&mut exec.command, &other.command);
            merge_string(&mut exec.service_context, &other.service_context);
            merge_map(&mut exec.environment, &other.environment);
            merge_option(&mut exec.user_id, other.user_id);
            merge_string(&mut exec.user, &other.user);
            merge_option(&mut exec.group_id, other.group_id);
            merge_string(&mut exec.group, &other.group);
            merge_string(&mut exec.working_dir, &other.working_dir);
        }
    }
}

/// A remote destination for service logs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogTarget {
    /// The key under `log-targets:`.
    pub name: String,
    /// How this entry combines with earlier layers.
    pub override_: Override,
    /// `loki`, `opentelemetry` or `syslog`.
    pub type_: String,
    /// Where to send logs.
    pub location: String,
    /// Which services' logs to send: names, `all`, and `-name`/`-all` to remove; appended on
    /// merge and read from the end (see [`crate::Service::logs_to`]).
    pub services: Vec<String>,
    /// Extra labels; values may reference `$VARS` of the service's environment.
    pub labels: BTreeMap<String, String>,
}

impl LogTarget {
    /// Applies a `merge` entry. Every field is named, so a field added to [`LogTarget`] does
    /// not compile until its merge rule is written here.
    #[deny(unused_variables)]
    pub(crate) fn merge(&mut self, other: &LogTarget) {
        let LogTarget {
            name: _,
            override_: _,
            type_,
            location,
            services,
            labels,
        } = other;
        merge_string(&mut self.type_, type_);
        merge_string(&mut self.location, location);
        self.services.extend(services.iter().cloned());
        merge_map(&mut self.labels, labels);
    }
}

/// The log target types cobble can forward to.
pub(crate) const LOG_TARGET_TYPES: [&str; 3] = ["loki", "opentelemetry", "syslog"];

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: i64) -> Option<GoDuration> {
        Some(GoDuration(n * 1_000_000_000))
    }

    #[test]
    fn defaults_and_timeout_clamp() {
        let mut check = Check::default();
        assert_eq!(check.period(), Duration::from_secs(10));
        assert_eq!(check.timeout(), Duration::from_secs(3));
        assert_eq!(check.threshold(), 3);
        assert!(check.is_enabled());
        check.period = secs(1);
        assert_eq!(check.timeout(), Duration::from_secs(1));
        check.timeout = secs(5);
        assert_eq!(check.timeout(), Duration::from_secs(1));
        check.threshold = 7;
        check.startup = Startup::Disabled;
        assert_eq!(check.threshold(), 7);
        assert!(!check.is_enabled());
    }

    #[test]
    fn merge_nested_types_field_by_field() {
        let mut base = Check {
            period: secs(1),
            tcp: Some(TcpCheck {
                port: 0,
                host: "foobar".into(),
            }),
            exec: Some(ExecCheck {
                working_dir: "/root".into(),
                ..ExecCheck::default()
            }),
            http: Some(HttpCheck {
                url: "http://a".into(),
                headers: [("A".to_string(), "1".to_string())].into(),
            }),
            ..Check::default()
        };
        let over = Check {
            timeout: secs(7),
            threshold: 5,
            level: CheckLevel::Ready,
            tcp: Some(TcpCheck {
                port: 80,
                host: String::new(),
            }),
            exec: Some(ExecCheck {
                command: "sleep 2".into(),
                environment: [("FOO".to_string(), "bar".to_string())].into(),
                ..ExecCheck::default()
            }),
            http: Some(HttpCheck {
                url: String::new(),
                headers: [("B".to_string(), "2".to_string())].into(),
            }),
            ..Check::default()
        };
        base.merge(&over);
        assert_eq!(base.period, secs(1));
        assert_eq!(base.timeout, secs(7));
        assert_eq!(base.threshold, 5);
        assert_eq!(base.level, CheckLevel::Ready);
        let tcp = base.tcp.as_ref().unwrap();
        assert_eq!((tcp.port, tcp.host.as_str()), (80, "foobar"));
        let exec = base.exec.as_ref().unwrap();
        assert_eq!(exec.command, "sleep 2");
        assert_eq!(exec.working_dir, "/root");
        assert_eq!(exec.environment["FOO"], "bar");
        let http = base.http.as_ref().unwrap();
        assert_eq!(http.url, "http://a");
        assert_eq!(http.headers.len(), 2);
        // A zero threshold cannot be merged in.
        base.merge(&Check::default());
        assert_eq!(base.threshold, 5);
    }
}
