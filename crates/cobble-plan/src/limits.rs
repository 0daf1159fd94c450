//! What a service may use (cobble extensions): `rlimits:`, the kernel's per-process limits
//! set on the service's process before it runs, and `resources:`, the limits of the cgroup
//! the daemon gives the service where it can have one.
//!
//! Both are parsed from the text of the layer's scalars, so `nofile: 1024` and
//! `nofile: "1024"` mean the same, and both print back in one canonical spelling.

use std::collections::BTreeMap;
use std::fmt;

/// A resource `rlimits:` can limit, named as `prlimit(1)` names it. Declared in the order of
/// their names, so a map of them prints sorted as the plan prints every map.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rlimit {
    /// `RLIMIT_AS`: address space, bytes.
    As,
    /// `RLIMIT_CORE`: core file size, bytes.
    Core,
    /// `RLIMIT_CPU`: CPU time, seconds.
    Cpu,
    /// `RLIMIT_DATA`: data segment, bytes.
    Data,
    /// `RLIMIT_FSIZE`: size of files written, bytes.
    Fsize,
    /// `RLIMIT_LOCKS`: file locks.
    Locks,
    /// `RLIMIT_MEMLOCK`: locked memory, bytes.
    Memlock,
    /// `RLIMIT_MSGQUEUE`: POSIX message queues, bytes.
    Msgqueue,
    /// `RLIMIT_NICE`: the ceiling of the nice value, as `20 - nice`.
    Nice,
    /// `RLIMIT_NOFILE`: open file descriptors.
    Nofile,
    /// `RLIMIT_NPROC`: processes of the user.
    Nproc,
    /// `RLIMIT_RSS`: resident set (ignored by Linux since 2.6, kept for completeness).
    Rss,
    /// `RLIMIT_RTPRIO`: real-time priority.
    Rtprio,
    /// `RLIMIT_RTTIME`: real-time CPU time without a blocking call, microseconds.
    Rttime,
    /// `RLIMIT_SIGPENDING`: queued signals.
    Sigpending,
    /// `RLIMIT_STACK`: stack size, bytes.
    Stack,
}

impl Rlimit {
    /// Every resource, in name order.
    pub const ALL: [Rlimit; 16] = [
        Rlimit::As,
        Rlimit::Core,
        Rlimit::Cpu,
        Rlimit::Data,
        Rlimit::Fsize,
        Rlimit::Locks,
        Rlimit::Memlock,
        Rlimit::Msgqueue,
        Rlimit::Nice,
        Rlimit::Nofile,
        Rlimit::Nproc,
        Rlimit::Rss,
        Rlimit::Rtprio,
        Rlimit::Rttime,
        Rlimit::Sigpending,
        Rlimit::Stack,
    ];

    /// The name, lower case, as a layer writes it.
    pub fn name(self) -> &'static str {
        match self {
            Rlimit::As => "as",
            Rlimit::Core => "core",
            Rlimit::Cpu => "cpu",
            Rlimit::Data => "data",
            Rlimit::Fsize => "fsize",
            Rlimit::Locks => "locks",
            Rlimit::Memlock => "memlock",
            Rlimit::Msgqueue => "msgqueue",
            Rlimit::Nice => "nice",
            Rlimit::Nofile => "nofile",
            Rlimit::Nproc => "nproc",
            Rlimit::Rss => "rss",
            Rlimit::Rtprio => "rtprio",
            Rlimit::Rttime => "rttime",
            Rlimit::Sigpending => "sigpending",
            Rlimit::Stack => "stack",
        }
    }

    /// The resource called `name`.
    pub fn from_name(name: &str) -> Option<Rlimit> {
        Rlimit::ALL.into_iter().find(|r| r.name() == name)
    }
}

impl fmt::Display for Rlimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One side of a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitValue {
    /// A number in the resource's unit.
    Value(u64),
    /// No limit (`RLIM_INFINITY`).
    Unlimited,
}

impl LimitValue {
    fn parse(text: &str) -> Option<LimitValue> {
        match text {
            "unlimited" | "infinity" => Some(LimitValue::Unlimited),
            _ if text.bytes().all(|b| b.is_ascii_digit()) => {
                text.parse().ok().map(LimitValue::Value)
            }
            _ => None,
        }
    }

    /// The value `setrlimit(2)` takes: `RLIM_INFINITY` (all ones) for no limit.
    pub fn as_raw(self) -> u64 {
        match self {
            LimitValue::Value(v) => v,
            LimitValue::Unlimited => u64::MAX,
        }
    }

    /// Orders values with no limit above every number.
    fn above(self, other: LimitValue) -> bool {
        match (self, other) {
            (LimitValue::Unlimited, LimitValue::Unlimited) => false,
            (LimitValue::Unlimited, _) => true,
            (LimitValue::Value(_), LimitValue::Unlimited) => false,
            (LimitValue::Value(a), LimitValue::Value(b)) => a > b,
        }
    }
}

impl fmt::Display for LimitValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitValue::Value(v) => write!(f, "{v}"),
            LimitValue::Unlimited => f.write_str("unlimited"),
        }
    }
}

/// The value of one `rlimits:` entry: a soft and a hard limit. A side left out (`"1024:"`,
/// `":4096"`) keeps what the service would inherit from the daemon, as `prlimit(1)` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RlimitValue {
    /// The limit the kernel enforces; the process may raise it up to `hard`.
    pub soft: Option<LimitValue>,
    /// The ceiling of `soft`; only a privileged process may raise it.
    pub hard: Option<LimitValue>,
}

impl RlimitValue {
    /// Parses `N`, `unlimited` (both limits) or `SOFT:HARD` (either side may be empty, not
    /// both). The error says what the value must be.
    pub fn parse(text: &str) -> Result<RlimitValue, String> {
        let text = text.trim();
        let must =
            || "must be an integer, \"unlimited\" or \"SOFT:HARD\" (for example \"1024:4096\")";
        let value = match text.split_once(':') {
            None => {
                let value = LimitValue::parse(text).ok_or_else(|| must().to_owned())?;
                RlimitValue {
                    soft: Some(value),
                    hard: Some(value),
                }
            }
            Some((soft, hard)) => {
                let side = |s: &str| -> Result<Option<LimitValue>, String> {
                    if s.is_empty() {
                        Ok(None)
                    } else {
                        LimitValue::parse(s)
                            .map(Some)
                            .ok_or_else(|| must().to_owned())
                    }
                };
                let value = RlimitValue {
                    soft: side(soft.trim())?,
                    hard: side(hard.trim())?,
                };
                if value.soft.is_none() && value.hard.is_none() {
                    return Err(must().to_owned());
                }
                value
            }
        };
        if let (Some(soft), Some(hard)) = (value.soft, value.hard)
            && soft.above(hard)
        {
            return Err(format!(
                "the soft limit {soft} is greater than the hard limit {hard}"
            ));
        }
        Ok(value)
    }
}

impl fmt::Display for RlimitValue {
    /// The canonical spelling: one value when both sides are the same, `SOFT:HARD` otherwise.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.soft, self.hard) {
            (Some(soft), Some(hard)) if soft == hard => write!(f, "{soft}"),
            (soft, hard) => {
                if let Some(soft) = soft {
                    write!(f, "{soft}")?;
                }
                f.write_str(":")?;
                if let Some(hard) = hard {
                    write!(f, "{hard}")?;
                }
                Ok(())
            }
        }
    }
}

/// A service's `rlimits:`, by resource.
pub type Rlimits = BTreeMap<Rlimit, RlimitValue>;

/// A size in bytes, or no limit (`max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryLimit {
    /// At most this many bytes.
    Bytes(u64),
    /// No limit.
    Max,
}

impl MemoryLimit {
    /// Parses bytes (`67108864`), a number with a binary unit (`64M`, `64Mi`, `64MiB`; K, M,
    /// G and T, each 1024 times the one before, as systemd and cgroups read them) or `max`.
    pub fn parse(text: &str) -> Option<MemoryLimit> {
        let text = text.trim();
        if matches!(text, "max" | "unlimited" | "infinity") {
            return Some(MemoryLimit::Max);
        }
        let digits = text.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let number: u64 = text[..digits].parse().ok()?;
        let shift = match text[digits..].trim_start() {
            "" | "B" => 0,
            "K" | "Ki" | "KiB" | "k" => 10,
            "M" | "Mi" | "MiB" => 20,
            "G" | "Gi" | "GiB" => 30,
            "T" | "Ti" | "TiB" => 40,
            _ => return None,
        };
        number.checked_mul(1 << shift).map(MemoryLimit::Bytes)
    }
}

impl fmt::Display for MemoryLimit {
    /// The largest unit that divides the size exactly (`64M`, `1536K`, `1000`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            MemoryLimit::Max => f.write_str("max"),
            MemoryLimit::Bytes(0) => f.write_str("0"),
            MemoryLimit::Bytes(bytes) => {
                for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
                    if bytes % (1u64 << shift) == 0 {
                        return write!(f, "{}{unit}", bytes >> shift);
                    }
                }
                write!(f, "{bytes}")
            }
        }
    }
}

/// A count, or no limit (`max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CountLimit {
    /// At most this many.
    Count(u64),
    /// No limit.
    Max,
}

impl CountLimit {
    fn parse(text: &str) -> Option<CountLimit> {
        let text = text.trim();
        match text {
            "max" | "unlimited" | "infinity" => Some(CountLimit::Max),
            _ if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => {
                text.parse().ok().map(CountLimit::Count)
            }
            _ => None,
        }
    }
}

impl fmt::Display for CountLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CountLimit::Count(n) => write!(f, "{n}"),
            CountLimit::Max => f.write_str("max"),
        }
    }
}

/// The CPU period used when `cpu-max` gives a fraction of a CPU: 100 ms, the kernel's
/// default.
pub const DEFAULT_CPU_PERIOD_US: u64 = 100_000;

/// `cpu-max`: at most `quota` microseconds of CPU time in every `period` microseconds (a
/// quota above the period lets the service use more than one CPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CpuMax {
    /// CPU time per period, microseconds; `None` for no limit.
    pub quota_us: Option<u64>,
    /// The period, microseconds.
    pub period_us: u64,
}

impl CpuMax {
    /// Parses `QUOTA/PERIOD` in microseconds (`50000/100000`, or `max/100000`), a fraction of
    /// one CPU (`0.5`, `2`) or a percentage of one (`50%`, `150%`). The kernel's bounds apply:
    /// a quota of at least 1 ms, a period from 1 ms to 1 s.
    pub fn parse(text: &str) -> Result<CpuMax, String> {
        let text = text.trim();
        let must = "must be \"QUOTA/PERIOD\" in microseconds, a fraction of a CPU such as 0.5, or a percentage such as \"50%\"";
        let value = if let Some((quota, period)) = text.split_once('/') {
            let period_us: u64 = parse_uint(period).ok_or(must)?;
            let quota_us = match quota.trim() {
                "max" => None,
                quota => Some(parse_uint(quota).ok_or(must)?),
            };
            CpuMax {
                quota_us,
                period_us,
            }
        } else {
            let (number, scale) = match text.strip_suffix('%') {
                Some(percent) => (percent.trim(), 100.0),
                None => (text, 1.0),
            };
            let cpus: f64 = number
                .parse()
                .ok()
                .filter(|n: &f64| n.is_finite() && *n > 0.0)
                .ok_or(must)?;
            let quota = (cpus / scale * DEFAULT_CPU_PERIOD_US as f64).round();
            CpuMax {
                quota_us: Some(quota as u64),
                period_us: DEFAULT_CPU_PERIOD_US,
            }
        };
        if !(1_000..=1_000_000).contains(&value.period_us) {
            return Err(format!(
                "the period must be from 1000 to 1000000 microseconds, not {}",
                value.period_us
            ));
        }
        if let Some(quota) = value.quota_us.filter(|q| *q < 1_000) {
            return Err(format!(
                "the quota must be at least 1000 microseconds, not {quota}"
            ));
        }
        Ok(value)
    }
}

fn parse_uint(text: &str) -> Option<u64> {
    let text = text.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

impl fmt::Display for CpuMax {
    /// `QUOTA/PERIOD` in microseconds, as cgroup v2's `cpu.max` holds it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.quota_us {
            Some(quota) => write!(f, "{quota}/{}", self.period_us),
            None => write!(f, "max/{}", self.period_us),
        }
    }
}

/// A service's `resources:`: the limits of its cgroup. Each field is unset when `None`, and
/// a `merge` layer changes only the fields it sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Resources {
    /// `memory-max`: the hard ceiling; past it the kernel's OOM killer ends a process of
    /// the service.
    pub memory_max: Option<MemoryLimit>,
    /// `memory-high`: the throttle; past it the service's memory is reclaimed hard and it
    /// slows down, but nothing is killed. (cgroup v1 has no such limit: there it is the
    /// soft limit, applied under memory pressure.)
    pub memory_high: Option<MemoryLimit>,
    /// `pids-max`: processes and threads of the service together.
    pub pids_max: Option<CountLimit>,
    /// `cpu-max`: CPU time per period.
    pub cpu_max: Option<CpuMax>,
}

impl Resources {
    /// Whether no field is set.
    pub fn is_empty(&self) -> bool {
        *self == Resources::default()
    }

    /// Sets what `other` sets.
    pub(crate) fn merge(&mut self, other: &Resources) {
        crate::service::merge_option(&mut self.memory_max, other.memory_max);
        crate::service::merge_option(&mut self.memory_high, other.memory_high);
        crate::service::merge_option(&mut self.pids_max, other.pids_max);
        crate::service::merge_option(&mut self.cpu_max, other.cpu_max);
    }

    /// Parses the text of field `field` (`memory-max`, `memory-high`, `pids-max` or `cpu-max`)
    /// into it; the error says what the value must be. Panics on any other field name.
    pub fn parse_field(&mut self, field: &str, text: &str) -> Result<(), String> {
        let memory = |text: &str| {
            MemoryLimit::parse(text).ok_or_else(|| {
                "must be a size in bytes, optionally with a unit K, M, G or T (1024 each), or \"max\""
                    .to_owned()
            })
        };
        match field {
            "memory-max" => self.memory_max = Some(memory(text)?),
            "memory-high" => self.memory_high = Some(memory(text)?),
            "pids-max" => {
                self.pids_max = Some(
                    CountLimit::parse(text)
                        .ok_or_else(|| "must be an integer or \"max\"".to_owned())?,
                )
            }
            "cpu-max" => self.cpu_max = Some(CpuMax::parse(text)?),
            _ => unreachable!("the layer's decoder knows only these fields"),
        }
        Ok(())
    }

    /// The fields that are set, as `(name, value)` in the order a layer lists them.
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        let mut fields = Vec::new();
        if let Some(v) = self.memory_max {
            fields.push(("memory-max", v.to_string()));
        }
        if let Some(v) = self.memory_high {
            fields.push(("memory-high", v.to_string()));
        }
        if let Some(v) = self.pids_max {
            fields.push(("pids-max", v.to_string()));
        }
        if let Some(v) = self.cpu_max {
            fields.push(("cpu-max", v.to_string()));
        }
        fields
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rlimit_names_are_prlimits_and_sorted() {
        let names: Vec<&str> = Rlimit::ALL.iter().map(|r| r.name()).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
        for r in Rlimit::ALL {
            assert_eq!(Rlimit::from_name(r.name()), Some(r));
        }
        assert_eq!(Rlimit::from_name("NOFILE"), None);
        assert_eq!(Rlimit::from_name("files"), None);
    }

    #[test]
    fn rlimit_values_parse_and_print_back() {
        use LimitValue::{Unlimited, Value};
        /// (text, the soft and hard limits it sets or none if refused, how it prints)
        type Case<'a> = (
            &'a str,
            Option<(Option<LimitValue>, Option<LimitValue>)>,
            &'a str,
        );
        let table: &[Case<'_>] = &[
            ("1024", Some((Some(Value(1024)), Some(Value(1024)))), "1024"),
            ("0", Some((Some(Value(0)), Some(Value(0)))), "0"),
            (
                "unlimited",
                Some((Some(Unlimited), Some(Unlimited))),
                "unlimited",
            ),
            (
                "infinity",
                Some((Some(Unlimited), Some(Unlimited))),
                "unlimited",
            ),
            (
                "1024:4096",
                Some((Some(Value(1024)), Some(Value(4096)))),
                "1024:4096",
            ),
            (
                "1024:unlimited",
                Some((Some(Value(1024)), Some(Unlimited))),
                "1024:unlimited",
            ),
            (
                "4096:4096",
                Some((Some(Value(4096)), Some(Value(4096)))),
                "4096",
            ),
            ("1024:", Some((Some(Value(1024)), None)), "1024:"),
            (":4096", Some((None, Some(Value(4096)))), ":4096"),
            (" 8 : 9 ", Some((Some(Value(8)), Some(Value(9)))), "8:9"),
            (":", None, ""),
            ("", None, ""),
            ("-1", None, ""),
            ("1k", None, ""),
            ("1.5", None, ""),
            ("lots", None, ""),
            ("1:2:3", None, ""),
            ("18446744073709551616", None, ""),
            ("4096:1024", None, ""),
            ("unlimited:1024", None, ""),
        ];
        for &(text, want, printed) in table {
            let got = RlimitValue::parse(text);
            match want {
                Some((soft, hard)) => {
                    let value = got.unwrap_or_else(|e| panic!("{text}: {e}"));
                    assert_eq!((value.soft, value.hard), (soft, hard), "{text}");
                    assert_eq!(value.to_string(), printed, "{text}");
                    assert_eq!(RlimitValue::parse(printed), Ok(value), "{text} again");
                }
                None => assert!(got.is_err(), "{text} should be refused, got {got:?}"),
            }
        }
        assert_eq!(
            RlimitValue::parse("4096:1024").unwrap_err(),
            "the soft limit 4096 is greater than the hard limit 1024"
        );
        assert_eq!(Unlimited.as_raw(), u64::MAX);
    }

    #[test]
    fn memory_limits_parse_binary_units() {
        let table: &[(&str, Option<MemoryLimit>, &str)] = &[
            ("67108864", Some(MemoryLimit::Bytes(64 << 20)), "64M"),
            ("64M", Some(MemoryLimit::Bytes(64 << 20)), "64M"),
            ("64Mi", Some(MemoryLimit::Bytes(64 << 20)), "64M"),
            ("64MiB", Some(MemoryLimit::Bytes(64 << 20)), "64M"),
            ("1536K", Some(MemoryLimit::Bytes(1536 << 10)), "1536K"),
            ("2G", Some(MemoryLimit::Bytes(2 << 30)), "2G"),
            ("1T", Some(MemoryLimit::Bytes(1 << 40)), "1T"),
            ("1000", Some(MemoryLimit::Bytes(1000)), "1000"),
            ("0", Some(MemoryLimit::Bytes(0)), "0"),
            ("max", Some(MemoryLimit::Max), "max"),
            ("64 M", Some(MemoryLimit::Bytes(64 << 20)), "64M"),
            ("64MB", None, ""),
            ("1.5G", None, ""),
            ("M", None, ""),
            ("-1", None, ""),
            ("", None, ""),
            ("99999999999T", None, ""),
        ];
        for &(text, want, printed) in table {
            let got = MemoryLimit::parse(text);
            assert_eq!(got, want, "{text}");
            if let Some(value) = got {
                assert_eq!(value.to_string(), printed, "{text}");
                assert_eq!(MemoryLimit::parse(printed), Some(value));
            }
        }
    }

    #[test]
    fn cpu_max_takes_a_quota_a_fraction_or_a_percentage() {
        let cpu = |quota, period| CpuMax {
            quota_us: quota,
            period_us: period,
        };
        let table: &[(&str, Option<CpuMax>, &str)] = &[
            (
                "50000/100000",
                Some(cpu(Some(50_000), 100_000)),
                "50000/100000",
            ),
            ("max/100000", Some(cpu(None, 100_000)), "max/100000"),
            ("0.5", Some(cpu(Some(50_000), 100_000)), "50000/100000"),
            ("2", Some(cpu(Some(200_000), 100_000)), "200000/100000"),
            ("50%", Some(cpu(Some(50_000), 100_000)), "50000/100000"),
            ("150%", Some(cpu(Some(150_000), 100_000)), "150000/100000"),
            ("0.001", None, ""),
            ("500/100000", None, ""),
            ("1000/999", None, ""),
            ("1000/1000001", None, ""),
            ("0", None, ""),
            ("-1", None, ""),
            ("half", None, ""),
            ("NaN", None, ""),
            ("inf", None, ""),
            ("1/2/3", None, ""),
        ];
        for &(text, want, printed) in table {
            let got = CpuMax::parse(text);
            match want {
                Some(want) => {
                    assert_eq!(got, Ok(want), "{text}");
                    assert_eq!(want.to_string(), printed);
                    assert_eq!(CpuMax::parse(printed), Ok(want));
                }
                None => assert!(got.is_err(), "{text} should be refused, got {got:?}"),
            }
        }
    }

    #[test]
    fn resources_merge_per_field() {
        let mut base = Resources::default();
        base.parse_field("memory-max", "64M").unwrap();
        base.parse_field("pids-max", "100").unwrap();
        let mut over = Resources::default();
        over.parse_field("pids-max", "max").unwrap();
        over.parse_field("cpu-max", "0.5").unwrap();
        base.merge(&over);
        assert_eq!(
            base.fields(),
            vec![
                ("memory-max", "64M".to_owned()),
                ("pids-max", "max".to_owned()),
                ("cpu-max", "50000/100000".to_owned()),
            ]
        );
        assert!(Resources::default().is_empty());
        assert!(!base.is_empty());
    }
}
