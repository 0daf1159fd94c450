use jiff::civil::{DateTime, date};

use super::*;

fn at(text: &str) -> DateTime {
    text.parse().unwrap()
}

/// The next `n` event starts after `from`, each found after the one before.
fn runs(schedule: &str, from: &str, n: usize) -> Vec<String> {
    let schedule = Schedule::parse(schedule).unwrap();
    let mut after = at(from);
    let mut out = Vec::new();
    for _ in 0..n {
        let next = schedule.next_after(after).unwrap();
        out.push(next.start.to_string());
        after = next.start;
    }
    out
}

fn error(text: &str) -> String {
    Schedule::parse(text).unwrap_err()
}

#[test]
fn a_day_split_into_parts_runs_at_the_start_of_each() {
    assert_eq!(
        runs("00:00-24:00/96", "2026-12-04T23:50:00", 3),
        [
            "2026-12-05T00:00:00",
            "2026-12-05T00:15:00",
            "2026-12-05T00:30:00"
        ]
    );
    // Every minute: a run at each minute boundary, never at the one just passed.
    assert_eq!(
        runs("00:00-24:00/1440", "2026-12-04T10:00:00", 2),
        ["2026-12-04T10:01:00", "2026-12-04T10:02:00"]
    );
    assert_eq!(
        runs("00:00-24:00/1440", "2026-12-04T10:00:59.999", 1),
        ["2026-12-04T10:01:00"]
    );
    // 12:00-13:00/12 is every five minutes from 12:00 to 12:55.
    assert_eq!(
        runs("12:00-13:00/12", "2026-12-04T12:50:00", 2),
        ["2026-12-04T12:55:00", "2026-12-05T12:00:00"]
    );
}

#[test]
fn a_time_or_a_span_without_parts_runs_once_a_day() {
    assert_eq!(
        runs("23:00", "2026-12-04T23:00:00", 2),
        ["2026-12-05T23:00:00", "2026-12-06T23:00:00"]
    );
    assert_eq!(
        runs("9:00-11:00", "2026-12-04T08:00:00", 2),
        ["2026-12-04T09:00:00", "2026-12-05T09:00:00"]
    );
    // 24:00 alone is the end of the day: midnight.
    assert_eq!(
        runs("24:00", "2026-12-04T12:00:00", 1),
        ["2026-12-05T00:00:00"]
    );
}

#[test]
fn weekdays_select_days_and_no_time_means_midnight() {
    // 2026-12-04 is a Friday.
    assert_eq!(date(2026, 12, 4).weekday(), Weekday::Friday);
    assert_eq!(
        runs("mon,10:00", "2026-12-04T12:00:00", 2),
        ["2026-12-07T10:00:00", "2026-12-14T10:00:00"]
    );
    assert_eq!(
        runs("mon,wed", "2026-12-04T12:00:00", 3),
        [
            "2026-12-07T00:00:00",
            "2026-12-09T00:00:00",
            "2026-12-14T00:00:00"
        ]
    );
    assert_eq!(
        runs("mon-fri,9:00-17:00/8", "2026-12-04T16:30:00", 3),
        [
            "2026-12-07T09:00:00",
            "2026-12-07T10:00:00",
            "2026-12-07T11:00:00"
        ]
    );
    // A span of days wraps around the week's end.
    assert_eq!(
        runs("sat-mon,12:00", "2026-12-04T12:00:00", 4),
        [
            "2026-12-05T12:00:00",
            "2026-12-06T12:00:00",
            "2026-12-07T12:00:00",
            "2026-12-12T12:00:00"
        ]
    );
    assert_eq!(
        runs("mon,fri,10:00,15:00", "2026-12-04T12:00:00", 3),
        [
            "2026-12-04T15:00:00",
            "2026-12-07T10:00:00",
            "2026-12-07T15:00:00"
        ]
    );
}

#[test]
fn event_sets_are_combined() {
    assert_eq!(
        runs("mon,10:00,,fri,15:00", "2026-12-04T12:00:00", 3),
        [
            "2026-12-04T15:00:00",
            "2026-12-07T10:00:00",
            "2026-12-11T15:00:00"
        ]
    );
    // The same time from two sets is one run.
    assert_eq!(
        runs("10:00,,10:00", "2026-12-04T12:00:00", 2),
        ["2026-12-05T10:00:00", "2026-12-06T10:00:00"]
    );
}

#[test]
fn a_span_across_midnight_belongs_to_the_day_it_starts() {
    // The last Friday of the month, 23:00 to 01:00 in four parts: the parts after midnight
    // are on Saturday.
    assert_eq!(
        runs("fri5,23:00-01:00/4", "2026-12-20T00:00:00", 5),
        [
            "2026-12-25T23:00:00",
            "2026-12-25T23:30:00",
            "2026-12-26T00:00:00",
            "2026-12-26T00:30:00",
            "2027-01-29T23:00:00"
        ]
    );
    // Found from just after midnight too (the span began the day before).
    assert_eq!(
        runs("fri,23:00-01:00/2", "2026-12-04T23:59:00", 1),
        ["2026-12-05T00:00:00"]
    );
    assert_eq!(
        runs("fri,23:00-01:00/2", "2026-12-05T00:00:00", 1)[0],
        "2026-12-11T23:00:00"
    );
}

#[test]
fn weeks_of_the_month_cross_month_and_year_ends() {
    // First Monday: 2026-12-07, 2027-01-04, 2027-02-01.
    assert_eq!(
        runs("mon1", "2026-12-01T00:00:00", 3),
        [
            "2026-12-07T00:00:00",
            "2027-01-04T00:00:00",
            "2027-02-01T00:00:00"
        ]
    );
    // Last Monday, in months with four and with five.
    assert_eq!(
        runs("mon5,8:00", "2027-01-01T00:00:00", 3),
        [
            "2027-01-25T08:00:00",
            "2027-02-22T08:00:00",
            "2027-03-29T08:00:00"
        ]
    );
    // The fourth Sunday of February 2026 (28 days, starting on a Sunday) is its last.
    assert_eq!(
        runs("sun4", "2026-02-01T00:00:00", 1),
        ["2026-02-22T00:00:00"]
    );
    assert_eq!(
        runs("sun5", "2026-02-01T00:00:00", 1),
        ["2026-02-22T00:00:00"]
    );
    // The second Monday and the days up to the Wednesday after it; the days from the
    // Monday before the second Wednesday up to it.
    assert_eq!(
        runs("mon2-wed,6:00", "2026-12-01T00:00:00", 4),
        [
            "2026-12-14T06:00:00",
            "2026-12-15T06:00:00",
            "2026-12-16T06:00:00",
            "2027-01-11T06:00:00"
        ]
    );
    assert_eq!(
        runs("mon-wed2,6:00", "2026-12-01T00:00:00", 4),
        [
            "2026-12-07T06:00:00",
            "2026-12-08T06:00:00",
            "2026-12-09T06:00:00",
            "2027-01-11T06:00:00"
        ]
    );
    // The last Friday through the Monday after it runs into the next month.
    assert_eq!(
        runs("fri5-mon,12:00", "2027-01-28T00:00:00", 4),
        [
            "2027-01-29T12:00:00",
            "2027-01-30T12:00:00",
            "2027-01-31T12:00:00",
            "2027-02-01T12:00:00"
        ]
    );
    // Leap day.
    assert_eq!(
        runs("thu5,12:00", "2028-02-01T00:00:00", 1),
        ["2028-02-24T12:00:00"]
    );
    assert_eq!(
        runs("tue5", "2028-02-01T00:00:00", 1),
        ["2028-02-29T00:00:00"]
    );
}

#[test]
fn a_spread_event_falls_inside_its_part() {
    let schedule = Schedule::parse("mon,9:00~11:00").unwrap();
    let next = schedule.next_after(at("2026-12-04T12:00:00")).unwrap();
    assert_eq!(next.start, at("2026-12-07T09:00:00"));
    assert_eq!(next.end, at("2026-12-07T11:00:00"));
    assert_eq!(next.at(0), at("2026-12-07T09:00:00"));
    assert_eq!(next.at(3599), at("2026-12-07T09:59:59"));
    assert_eq!(next.at(7200 + 60), at("2026-12-07T09:01:00"));
    // Split and spread: each part's own window.
    let schedule = Schedule::parse("00:00~24:00/24").unwrap();
    let next = schedule.next_after(at("2026-12-04T12:00:00")).unwrap();
    assert_eq!(
        (next.start, next.end),
        (at("2026-12-04T13:00:00"), at("2026-12-04T14:00:00"))
    );
    // A fixed time has no window.
    let next = Schedule::parse("10:00")
        .unwrap()
        .next_after(at("2026-12-04T12:00:00"))
        .unwrap();
    assert_eq!(next.at(12345), next.start);
}

#[test]
fn the_search_starts_strictly_after_the_given_time() {
    // Nothing at the time itself: a schedule added at 10:00 runs first at the next time.
    assert_eq!(
        runs("10:00", "2026-12-04T10:00:00", 1),
        ["2026-12-05T10:00:00"]
    );
    assert_eq!(
        runs("10:00", "2026-12-04T09:59:59", 1),
        ["2026-12-04T10:00:00"]
    );
    // A window already open is not the next one.
    let next = Schedule::parse("9:00~11:00")
        .unwrap()
        .next_after(at("2026-12-04T09:30:00"))
        .unwrap();
    assert_eq!(next.start, at("2026-12-05T09:00:00"));
}

#[test]
fn uneven_parts_round_down_to_the_minute() {
    // Seven parts of an hour: every 8 4/7 minutes, on whole minutes.
    assert_eq!(
        runs("10:00-11:00/7", "2026-12-04T09:00:00", 8),
        [
            "2026-12-04T10:00:00",
            "2026-12-04T10:08:00",
            "2026-12-04T10:17:00",
            "2026-12-04T10:25:00",
            "2026-12-04T10:34:00",
            "2026-12-04T10:42:00",
            "2026-12-04T10:51:00",
            "2026-12-05T10:00:00"
        ]
    );
}

#[test]
fn the_examples_of_the_format_parse() {
    for text in [
        "00:00-24:00/24",
        "00:00-24:00/48",
        "00:00-24:00/96",
        "00:00-24:00/1440",
        "12:00-13:00/12",
        "23:00",
        "mon,10:00,,fri,15:00",
        "mon,fri,10:00,15:00",
        "mon-wed,fri,9:00-11:00/2",
        "mon,9:00~11:00,,wed,22:00~23:00",
        "mon,wed",
        "mon,,wed",
        "mon2-wed2,23:00-24:00",
        "mon2-wed,23:00-24:00",
        "fri5,23:00-01:00",
        "sun",
        "0:00",
        "24:00-00:00/2",
    ] {
        assert!(
            Schedule::parse(text).is_ok(),
            "{text}: {:?}",
            Schedule::parse(text)
        );
    }
}

#[test]
fn bad_schedules_are_refused_saying_what_is_wrong() {
    for (text, message) in [
        ("", "empty"),
        ("10", "cannot parse \"10\": \"10\" is not a valid weekday"),
        (
            "monday",
            "cannot parse \"monday\": \"monday\" is not a valid weekday",
        ),
        (
            "Mon",
            "cannot parse \"Mon\": \"Mon\" is not a valid weekday",
        ),
        (
            "mon6",
            "cannot parse \"mon6\": invalid week number in \"mon6\" (1 to 4, or 5 for the last)",
        ),
        (
            "mon0",
            "cannot parse \"mon0\": invalid week number in \"mon0\" (1 to 4, or 5 for the last)",
        ),
        (
            "mon-tue-wed",
            "cannot parse \"mon-tue-wed\": invalid week span",
        ),
        (
            "mon1-wed2",
            "cannot parse \"mon1-wed2\": the two days name different weeks",
        ),
        ("25:00", "cannot parse \"25:00\": not a valid time"),
        ("24:01", "cannot parse \"24:01\": not a valid time"),
        ("10:60", "cannot parse \"10:60\": not a valid time"),
        ("10:0", "cannot parse \"10:0\": not a valid time"),
        ("100:00", "cannot parse \"100:00\": not a valid time"),
        ("+1:00", "cannot parse \"+1:00\": not a valid time"),
        ("10:00-", "cannot parse \"10:00-\": not a valid time"),
        (
            "10:00-11:00-12:00",
            "cannot parse \"10:00-11:00-12:00\": not a valid interval",
        ),
        (
            "10:00~11:00-12:00",
            "cannot parse \"10:00~11:00-12:00\": not a valid interval",
        ),
        (
            "10:00-11:00/0",
            "cannot parse \"10:00-11:00/0\": not a valid event count",
        ),
        (
            "10:00-11:00/",
            "cannot parse \"10:00-11:00/\": not a valid event count",
        ),
        (
            "10:00-11:00/x",
            "cannot parse \"10:00-11:00/x\": not a valid event count",
        ),
        (
            "10:00-11:00/-1",
            "cannot parse \"10:00-11:00/-1\": not a valid event count",
        ),
        (
            "10:00-11:00/99999999999",
            "cannot parse \"10:00-11:00/99999999999\": not a valid event count",
        ),
        (
            "10:00-11:00/2/2",
            "cannot parse \"10:00-11:00/2/2\": not a valid event count",
        ),
        (
            "10:00/2",
            "cannot parse \"10:00/2\": an event count needs a span of time",
        ),
        (
            "10:00-10:00/2",
            "cannot parse \"10:00-10:00/2\": an event count needs a span of time",
        ),
        (
            "10:00-11:00/61",
            "cannot parse \"10:00-11:00/61\": more events than the span has minutes",
        ),
        (
            "00:00-24:00/2880",
            "cannot parse \"00:00-24:00/2880\": more events than the span has minutes",
        ),
        (
            "10:00,mon",
            "cannot parse \"mon\": days must come before times",
        ),
        ("mon,,", "cannot parse \"\": not a valid fragment"),
        (",,mon", "cannot parse \"\": not a valid fragment"),
        ("mon,", "cannot parse \"mon,\": not a valid fragment"),
        ("mon,,,fri", "cannot parse \",fri\": not a valid fragment"),
        (
            " mon",
            "cannot parse \" mon\": \" mon\" is not a valid weekday",
        ),
        ("mon, 10:00", "cannot parse \" 10:00\": not a valid time"),
        (
            "m\u{e9}n",
            "cannot parse \"m\u{e9}n\": \"m\u{e9}n\" is not a valid weekday",
        ),
    ] {
        assert_eq!(error(text), message, "{text}");
    }
}

#[test]
fn hostile_schedules_are_bounded() {
    let long = "mon,".repeat(200);
    assert_eq!(error(&long), format!("longer than {MAX_LEN} bytes"));
    let many = vec!["10:00"; MAX_SPANS + 1].join(",");
    assert!(many.len() <= MAX_LEN);
    assert_eq!(
        error(&many),
        format!("more than {MAX_SPANS} days and times")
    );
    let sets = vec!["mon"; MAX_SPANS + 1].join(",,");
    assert_eq!(
        error(&sets),
        format!("more than {MAX_SPANS} days and times")
    );
    // The most a schedule may hold is still quick to search: 64 spans of 1440 events.
    let most = vec!["00:00-24:00/1440"; 30].join(",");
    let schedule = Schedule::parse(&most).unwrap();
    assert_eq!(
        schedule
            .next_after(at("2026-12-04T23:59:00"))
            .unwrap()
            .start,
        at("2026-12-05T00:00:00")
    );
    let max = vec!["mon5"; MAX_SPANS].join(",");
    assert!(
        Schedule::parse(&max)
            .unwrap()
            .next_after(at("2026-12-04T00:00:00"))
            .is_some()
    );
}

#[test]
fn the_end_of_the_calendar_has_no_next_run() {
    let schedule = Schedule::parse("10:00").unwrap();
    assert_eq!(schedule.next_after(at("9999-12-31T10:00:00")), None);
    assert_eq!(
        schedule
            .next_after(at("9999-12-30T10:00:00"))
            .unwrap()
            .start,
        at("9999-12-31T10:00:00")
    );
}
