//! Go's time formats, as Pebble clients see them.

use jiff::Timestamp;
use jiff::tz::TimeZone;

/// The daemon's local zone, read once: containers rarely change zones while running.
fn local_zone() -> &'static TimeZone {
    static ZONE: std::sync::OnceLock<TimeZone> = std::sync::OnceLock::new();
    ZONE.get_or_init(TimeZone::system)
}

/// Go's `time.RFC3339Nano` in the local zone: nanoseconds with trailing zeros trimmed, `Z` for a
/// zero offset (e.g. `2024-12-27T12:31:26.673297951+08:00`).
pub fn format_rfc3339_nano(t: Timestamp) -> String {
    format_in(t, local_zone(), true)
}

/// Go's `time.RFC3339Nano` in UTC, the times of notices.
pub fn format_rfc3339_nano_utc(t: Timestamp) -> String {
    format_in(t, &TimeZone::UTC, true)
}

/// Go's `time.RFC3339` (whole seconds) in the local zone.
pub fn format_rfc3339_secs(t: Timestamp) -> String {
    format_in(t, local_zone(), false)
}

/// UTC with exactly three fractional digits: `2006-01-02T15:04:05.000Z`, the daemon log and
/// service log format.
pub fn format_utc_millis(t: Timestamp) -> String {
    let dt = t.to_zoned_datetime(TimeZone::UTC).datetime();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        dt.year(),
        dt.month(),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second(),
        dt.subsec_nanosecond() / 1_000_000
    )
}

/// Go's `time.RFC3339` in UTC: `2006-01-02T15:04:05Z`, the `datetime` of security events.
pub fn format_utc_secs(t: Timestamp) -> String {
    format_in(t, &TimeZone::UTC, false)
}

fn format_in(t: Timestamp, zone: &TimeZone, nanos: bool) -> String {
    let zoned = t.to_zoned_datetime(zone.clone());
    let dt = zoned.datetime();
    let mut out = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        dt.year(),
        dt.month(),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second()
    );
    let frac = dt.subsec_nanosecond();
    if nanos && frac != 0 {
        let digits = format!("{frac:09}");
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
    let offset = zoned.offset().seconds();
    if offset == 0 {
        out.push('Z');
    } else {
        let sign = if offset < 0 { '-' } else { '+' };
        let abs = offset.unsigned_abs();
        out.push_str(&format!("{sign}{:02}:{:02}", abs / 3600, (abs % 3600) / 60));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn rfc3339_nano_trims_trailing_zeros() {
        let utc = TimeZone::UTC;
        assert_eq!(
            format_in(ts("2024-12-27T04:31:26.6732Z"), &utc, true),
            "2024-12-27T04:31:26.6732Z"
        );
        assert_eq!(
            format_in(ts("2024-12-27T04:31:26Z"), &utc, true),
            "2024-12-27T04:31:26Z"
        );
        assert_eq!(
            format_in(ts("2024-12-27T04:31:26.000000001Z"), &utc, true),
            "2024-12-27T04:31:26.000000001Z"
        );
    }

    #[test]
    fn offsets_print_like_go() {
        let tz = TimeZone::fixed(jiff::tz::offset(8));
        assert_eq!(
            format_in(ts("2024-12-27T04:31:26.5Z"), &tz, true),
            "2024-12-27T12:31:26.5+08:00"
        );
        let tz = TimeZone::fixed(jiff::tz::Offset::from_seconds(-(3 * 3600 + 30 * 60)).unwrap());
        assert_eq!(
            format_in(ts("2024-12-27T04:31:26Z"), &tz, false),
            "2024-12-27T01:01:26-03:30"
        );
    }

    #[test]
    fn utc_millis_always_has_three_digits() {
        assert_eq!(
            format_utc_millis(ts("2024-06-28T02:20:03Z")),
            "2024-06-28T02:20:03.000Z"
        );
        assert_eq!(
            format_utc_millis(ts("2024-06-28T02:20:03.3469Z")),
            "2024-06-28T02:20:03.346Z"
        );
    }

    #[test]
    fn utc_secs_drops_the_fraction() {
        assert_eq!(
            format_utc_secs(ts("2024-06-28T02:20:03.999Z")),
            "2024-06-28T02:20:03Z"
        );
    }
}
