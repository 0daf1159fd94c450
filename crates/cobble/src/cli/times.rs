//! How Pebble's CLI shows times: relative ("today at 15:04 UTC") unless `--abs-time` asks
//! for RFC 3339.

use jiff::fmt::temporal::{DateTimeParser, PiecesOffset};
use jiff::tz::{Offset, TimeZone};
use jiff::{Timestamp, ZonedDateTime as Zoned};

/// How far from today relative dates are used; beyond it, just the date.
const CUTOFF_DAYS: i64 = 60;

/// Formats the RFC 3339 times the API returns, for one command's output.
#[derive(Debug, Clone)]
pub(super) struct TimeFormatter {
    /// `--abs-time`: print RFC 3339 with seconds, in the offset the daemon sent.
    absolute: bool,
    /// The present, in the local time zone; relative days are counted from its date.
    now: Zoned,
}

impl TimeFormatter {
    /// A formatter relative to the current time in the system time zone.
    pub(super) fn new(absolute: bool) -> Self {
        TimeFormatter {
            absolute,
            now: Zoned::now(),
        }
    }

    /// A formatter with a fixed present, for tests.
    #[cfg(test)]
    pub(super) fn at(absolute: bool, now: Zoned) -> Self {
        TimeFormatter { absolute, now }
    }

    /// Formats one API time; text that is not RFC 3339 is shown unchanged.
    pub(super) fn format(&self, rfc3339: &str) -> String {
        let formatted = if self.absolute {
            absolute(rfc3339)
        } else {
            rfc3339
                .parse::<Timestamp>()
                .ok()
                .map(|then| human(then, &self.now))
        };
        formatted.unwrap_or_else(|| rfc3339.to_string())
    }
}

/// RFC 3339 at second precision, keeping the offset the time was written with (`Z` for UTC),
/// like Go's `t.Format(time.RFC3339)` on a parsed time.
pub(super) fn rfc3339_seconds(rfc3339: &str) -> Option<String> {
    absolute(rfc3339)
}

fn absolute(rfc3339: &str) -> Option<String> {
    let timestamp: Timestamp = rfc3339.parse().ok()?;
    let pieces = DateTimeParser::new().parse_pieces(rfc3339).ok()?;
    let offset = match pieces.offset()? {
        PiecesOffset::Zulu => return Some(timestamp.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
        PiecesOffset::Numeric(numeric) => numeric.offset(),
        _ => Offset::UTC,
    };
    let zoned = timestamp.to_zoned_datetime(TimeZone::fixed(offset));
    Some(if offset == Offset::UTC {
        zoned.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    } else {
        zoned.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string()
    })
}

/// "today at 15:04 UTC", "yesterday at ...", "3 days ago, at ...", "in 2 days, at ...", or
/// the date alone beyond 60 days either way.
fn human(then: Timestamp, now: &Zoned) -> String {
    let then = then.to_zoned_datetime(now.time_zone().clone());
    let days = now
        .date()
        .until(then.date())
        .map(|span| i64::from(span.get_days()))
        .unwrap_or(i64::MAX);
    let clock = then.strftime("%H:%M %Z");
    match days {
        d if (-CUTOFF_DAYS..-1).contains(&d) => format!("{} days ago, at {clock}", -d),
        -1 => format!("yesterday at {clock}"),
        0 => format!("today at {clock}"),
        1 => format!("tomorrow at {clock}"),
        d if (2..=CUTOFF_DAYS).contains(&d) => format!("in {d} days, at {clock}"),
        _ => then.strftime("%Y-%m-%d").to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Zoned {
        "2024-06-28T12:00:00Z"
            .parse::<Timestamp>()
            .unwrap()
            .to_zoned_datetime(TimeZone::UTC)
    }

    fn relative(t: &str) -> String {
        TimeFormatter::at(false, now()).format(t)
    }

    #[test]
    fn relative_days() {
        assert_eq!(relative("2024-06-28T02:20:03.346Z"), "today at 02:20 UTC");
        assert_eq!(relative("2024-06-27T23:59:00Z"), "yesterday at 23:59 UTC");
        assert_eq!(relative("2024-06-29T00:01:00Z"), "tomorrow at 00:01 UTC");
        assert_eq!(relative("2024-06-25T08:00:00Z"), "3 days ago, at 08:00 UTC");
        assert_eq!(relative("2024-07-01T08:00:00Z"), "in 3 days, at 08:00 UTC");
    }

    #[test]
    fn relative_uses_the_local_zone_not_the_sent_offset() {
        // 23:30 at +08:00 is 15:30 UTC the day before.
        assert_eq!(relative("2024-06-28T23:30:00+08:00"), "today at 15:30 UTC");
    }

    #[test]
    fn relative_switches_to_dates_beyond_sixty_days() {
        assert_eq!(
            relative("2024-04-29T12:00:00Z"),
            "60 days ago, at 12:00 UTC"
        );
        assert_eq!(relative("2024-04-28T12:00:00Z"), "2024-04-28");
        assert_eq!(relative("2025-01-01T00:00:00Z"), "2025-01-01");
    }

    #[test]
    fn relative_in_a_fixed_zone() {
        let tz = TimeZone::fixed(jiff::tz::offset(13));
        let now = "2024-06-28T12:00:00Z"
            .parse::<Timestamp>()
            .unwrap()
            .to_zoned_datetime(tz);
        let formatter = TimeFormatter::at(false, now);
        // 12:00 UTC is 01:00 the next day at +13, which is "today" there.
        assert!(
            formatter
                .format("2024-06-28T12:00:00Z")
                .starts_with("today at 01:00 ")
        );
    }

    #[test]
    fn absolute_keeps_offset_and_drops_fraction() {
        let formatter = TimeFormatter::at(true, now());
        assert_eq!(
            formatter.format("2016-04-21T01:02:03Z"),
            "2016-04-21T01:02:03Z"
        );
        assert_eq!(
            formatter.format("2024-12-27T12:31:26.673297951+08:00"),
            "2024-12-27T12:31:26+08:00"
        );
        assert_eq!(
            formatter.format("2024-12-27T12:31:26+00:00"),
            "2024-12-27T12:31:26Z"
        );
    }

    #[test]
    fn unparsable_times_pass_through() {
        assert_eq!(relative("yesterday-ish"), "yesterday-ish");
    }
}
