//! Go's time formats, as Pebble clients see them: the daemon writes its answers, its log and
//! service output with them, and the CLI prints times the same way.

use jiff::Timestamp;
use jiff::tz::TimeZone;

/// The local zone, read once: containers rarely change zones while running.
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
    let mut out = Vec::with_capacity(24);
    append_utc_millis(&mut out, t);
    String::from_utf8(out).expect("digits and punctuation")
}

/// Appends [`format_utc_millis`]'s text to `out`. Every line of service output and of the
/// daemon log starts with one, so the date is worked out from the day number directly
/// (the proleptic Gregorian calendar, years 0 to 9999) rather than through a time zone.
pub fn append_utc_millis(out: &mut Vec<u8>, t: Timestamp) {
    let millis = t.as_millisecond();
    let (days, ms_of_day) = (millis.div_euclid(86_400_000), millis.rem_euclid(86_400_000));
    // Days since 0000-03-01, in 400-year eras of 146097 days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = (year_of_era + era * 400 + i64::from(month <= 2)).clamp(0, 9999);
    let (hour, minute) = (ms_of_day / 3_600_000, ms_of_day / 60_000 % 60);
    let (second, milli) = (ms_of_day / 1000 % 60, ms_of_day % 1000);
    let digit = |n: i64| b'0' + (n % 10) as u8;
    out.extend_from_slice(&[
        digit(year / 1000),
        digit(year / 100),
        digit(year / 10),
        digit(year),
        b'-',
        digit(month / 10),
        digit(month),
        b'-',
        digit(day / 10),
        digit(day),
        b'T',
        digit(hour / 10),
        digit(hour),
        b':',
        digit(minute / 10),
        digit(minute),
        b':',
        digit(second / 10),
        digit(second),
        b'.',
        digit(milli / 100),
        digit(milli / 10),
        digit(milli),
        b'Z',
    ]);
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
    fn utc_millis_agrees_with_the_calendar_across_centuries() {
        // Leap days, century rules and the edges of a day, against jiff's calendar.
        let mut seconds: i64 = -2_208_988_800; // 1900-01-01
        while seconds < 7_258_118_400 {
            // 2200-01-01
            for millis in [0, 999] {
                let t = Timestamp::from_millisecond(seconds * 1000 + millis).unwrap();
                let dt = t.to_zoned_datetime(TimeZone::UTC).datetime();
                let expected = format!(
                    "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
                    dt.year(),
                    dt.month(),
                    dt.day(),
                    dt.hour(),
                    dt.minute(),
                    dt.second(),
                    dt.subsec_nanosecond() / 1_000_000
                );
                assert_eq!(format_utc_millis(t), expected);
            }
            seconds += 86_399 * 7 + 12_345;
        }
    }

    #[test]
    fn utc_secs_drops_the_fraction() {
        assert_eq!(
            format_utc_secs(ts("2024-06-28T02:20:03.999Z")),
            "2024-06-28T02:20:03Z"
        );
    }
}
