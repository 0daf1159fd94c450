//! `schedule:`, when the daemon starts a service by itself (cobble extension), in snapd's
//! timer string format.
//!
//! A schedule is one or more event sets separated by `,,`. An event set is a comma-separated
//! list of days, then of times, either of which may be left out:
//!
//! - a day is a weekday (`mon` ... `sun`), a span of weekdays that may wrap around the week
//!   (`mon-fri`, `fri-mon`), or a weekday of a given week of the month: `mon1` to `mon4` the
//!   first to fourth Monday, `mon5` the last; `mon2-wed` the second Monday and the days up to
//!   the Wednesday after it, `mon-wed2` the days from the Monday before the second Wednesday
//!   up to it. No days means every day.
//! - a time is `9:00` or `09:00` (24-hour clock), an event at that minute; a span `9:00-17:00`
//!   (which may cross midnight, `23:00-01:00`; `24:00` is the end of the day) is an event at
//!   its start, and `9:00-17:00/8` splits it into eight equal parts with an event at the start
//!   of each. With `~` in place of `-` each event falls at a random point of its part instead
//!   of its start. No times means midnight.
//!
//! So `00:00-24:00/96` is every fifteen minutes, `mon,10:00` Mondays at 10:00,
//! `mon-fri,9:00-17:00/8` every hour of a working day, `mon,9:00~11:00,,wed,22:00` some time
//! between 9 and 11 on Mondays and 22:00 on Wednesdays. The granularity is a minute: a span
//! cannot hold more events than it has minutes.
//!
//! [`Schedule::next_after`] is pure: it works on the civil (wall-clock) date and time of
//! whatever time zone the caller reads them in, and the caller turns the answer back into an
//! instant (where a time zone's change skips or repeats an hour, that is its choice). Input is
//! bounded: at most [`MAX_LEN`] bytes and [`MAX_SPANS`] days and times in all.

use jiff::civil::{Date, DateTime, Time, Weekday};
use jiff::{Span, ToSpan};

/// The longest schedule text accepted, in bytes.
pub const MAX_LEN: usize = 512;
/// The most days and times a schedule may list, over all its event sets.
pub const MAX_SPANS: usize = 64;
/// Minutes in a day; `24:00` is this minute.
const DAY: u32 = 24 * 60;
/// How far ahead an occurrence is looked for. Every set of days matches at least once a
/// month (each month has a first to fourth and a last of every weekday), so this is never
/// reached by a valid schedule short of the end of the calendar.
const SEARCH_DAYS: i32 = 400;

/// A parsed `schedule:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    sets: Vec<EventSet>,
}

/// One event set: on these days (every day when empty), at these times (midnight when
/// empty).
#[derive(Debug, Clone, PartialEq, Eq)]
struct EventSet {
    days: Vec<DaySpan>,
    times: Vec<ClockSpan>,
}

/// A set of days.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DaySpan {
    /// From `start` to `end`, wrapping around the week when `end` comes before `start`.
    Weekdays { start: Weekday, end: Weekday },
    /// The days around the `nth` (1-4, or 5 for the last) `anchor` of a month: from `before`
    /// days before it to `after` days after it.
    OfMonth {
        anchor: Weekday,
        nth: u8,
        before: i8,
        after: i8,
    },
}

/// A time, or a span of time split into `count` parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ClockSpan {
    /// Minute of the day, 0 to 1439.
    start: u32,
    /// Minutes in the span: 0 for a single time, up to a whole day.
    length: u32,
    /// Parts of the span, each with one event (1 for a time); at most `length`.
    count: u32,
    /// `~`: each event at a random point of its part.
    spread: bool,
}

/// The next event of a schedule: at `start`, or at a random point from `start` up to `end`
/// for a spread one (`~`); civil times of the zone the schedule was evaluated in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Occurrence {
    /// When the event's window opens.
    pub start: DateTime,
    /// When it closes; `start` for an event at a fixed time.
    pub end: DateTime,
}

impl Occurrence {
    /// The time of the event: `start`, or for a window, `jitter` seconds into it (modulo its
    /// length), so the caller's random number places it.
    pub fn at(&self, jitter: u64) -> DateTime {
        let seconds = self
            .end
            .duration_since(self.start)
            .as_secs()
            .max(0)
            .unsigned_abs();
        if seconds == 0 {
            return self.start;
        }
        let offset = i64::try_from(jitter % seconds).unwrap_or(0);
        self.start
            .checked_add(offset.seconds())
            .unwrap_or(self.start)
    }
}

impl Schedule {
    /// Parses a schedule; the error says what is wrong with which part of it, in snapd's
    /// words where snapd has them (`cannot parse "xyz": ...`).
    pub fn parse(text: &str) -> Result<Schedule, String> {
        if text.len() > MAX_LEN {
            return Err(format!("longer than {MAX_LEN} bytes"));
        }
        if text.is_empty() {
            return Err("empty".into());
        }
        let mut sets = Vec::new();
        let mut spans = 0;
        for set in text.split(",,") {
            let fragments: Vec<&str> = set.split(',').collect();
            spans += fragments.len();
            if spans > MAX_SPANS {
                return Err(format!("more than {MAX_SPANS} days and times"));
            }
            let mut days = Vec::new();
            let mut times = Vec::new();
            for fragment in fragments {
                if fragment.is_empty() {
                    return Err(format!("cannot parse {}: not a valid fragment", quote(set)));
                }
                if fragment.contains(':') {
                    times.push(parse_clock_span(fragment)?);
                } else if times.is_empty() {
                    days.push(parse_day_span(fragment)?);
                } else {
                    return Err(format!(
                        "cannot parse {}: days must come before times",
                        quote(fragment)
                    ));
                }
            }
            sets.push(EventSet { days, times });
        }
        Ok(Schedule { sets })
    }

    /// The first event whose window opens strictly after `after`; `None` only past the end
    /// of the calendar.
    pub fn next_after(&self, after: DateTime) -> Option<Occurrence> {
        let mut best: Option<Occurrence> = None;
        // A span that started the day before may still have events after midnight.
        for offset in -1..=SEARCH_DAYS {
            let Ok(day) = after.date().checked_add(offset.days()) else {
                continue;
            };
            if best.is_some_and(|b| b.start < day.to_datetime(Time::midnight())) {
                break;
            }
            for set in &self.sets {
                if !set.days.is_empty() && !set.days.iter().any(|d| d.matches(day)) {
                    continue;
                }
                let midnight = [ClockSpan {
                    start: 0,
                    length: 0,
                    count: 1,
                    spread: false,
                }];
                let times = if set.times.is_empty() {
                    &midnight[..]
                } else {
                    &set.times[..]
                };
                for span in times {
                    if let Some(found) = span.first_after(day, after)
                        && best.is_none_or(|b| found.start < b.start)
                    {
                        best = Some(found);
                    }
                }
            }
        }
        best
    }
}

impl DaySpan {
    fn matches(self, day: Date) -> bool {
        match self {
            DaySpan::Weekdays { start, end } => {
                let from = start.to_monday_zero_offset();
                let to = end.to_monday_zero_offset();
                let wd = day.weekday().to_monday_zero_offset();
                if from <= to {
                    (from..=to).contains(&wd)
                } else {
                    wd >= from || wd <= to
                }
            }
            DaySpan::OfMonth {
                anchor,
                nth,
                before,
                after,
            } => (-i32::from(after)..=i32::from(before)).any(|offset| {
                day.checked_add(offset.days())
                    .is_ok_and(|a| a.weekday() == anchor && is_nth(a, nth))
            }),
        }
    }
}

/// Whether `day` is the `nth` of its weekday in its month (5: the last).
fn is_nth(day: Date, nth: u8) -> bool {
    let week = (day.day() - 1) / 7 + 1;
    if nth == 5 {
        day.day() + 7 > day.days_in_month()
    } else {
        week == i8::try_from(nth).unwrap_or(0)
    }
}

impl ClockSpan {
    /// The minute of the day (from the day's midnight, past 1440 for a span that crosses
    /// midnight) where part `i` starts.
    fn part_start(self, i: u32) -> u32 {
        let offset = u64::from(i) * u64::from(self.length) / u64::from(self.count);
        self.start + u32::try_from(offset).unwrap_or(DAY)
    }

    /// The first event of this span on `day` whose window opens after `after`.
    fn first_after(self, day: Date, after: DateTime) -> Option<Occurrence> {
        let midnight = day.to_datetime(Time::midnight());
        let at = |minute: u32| midnight.checked_add(Span::new().minutes(minute)).ok();
        // The parts' starts rise with `i`: find the first after `after`.
        let (mut low, mut high) = (0, self.count);
        while low < high {
            let mid = low + (high - low) / 2;
            match at(self.part_start(mid)) {
                Some(t) if t > after => high = mid,
                Some(_) => low = mid + 1,
                None => high = mid,
            }
        }
        if low == self.count {
            return None;
        }
        let start = at(self.part_start(low))?;
        let end = if self.spread {
            at(self.part_start(low + 1))?
        } else {
            start
        };
        Some(Occurrence { start, end })
    }
}

/// `text` quoted as Go's `%q` quotes it (the parts of a schedule are plain ASCII or not
/// valid anyway).
fn quote(text: &str) -> String {
    crate::duration::go_quote(text)
}

const WEEKDAYS: [(&str, Weekday); 7] = [
    ("mon", Weekday::Monday),
    ("tue", Weekday::Tuesday),
    ("wed", Weekday::Wednesday),
    ("thu", Weekday::Thursday),
    ("fri", Weekday::Friday),
    ("sat", Weekday::Saturday),
    ("sun", Weekday::Sunday),
];

/// `mon`, or `mon1` to `mon5`: the weekday and its week of the month, if given.
fn parse_weekday(span: &str, text: &str) -> Result<(Weekday, Option<u8>), String> {
    let (name, number) = match text.len() {
        3 => (text, None),
        4 if text.is_char_boundary(3) => (&text[..3], Some(&text[3..])),
        _ => {
            return Err(format!(
                "cannot parse {}: {} is not a valid weekday",
                quote(span),
                quote(text)
            ));
        }
    };
    let Some((_, weekday)) = WEEKDAYS.iter().find(|(n, _)| *n == name) else {
        return Err(format!(
            "cannot parse {}: {} is not a valid weekday",
            quote(span),
            quote(text)
        ));
    };
    let nth = match number {
        None => None,
        Some(n @ ("1" | "2" | "3" | "4" | "5")) => Some(n.as_bytes()[0] - b'0'),
        Some(_) => {
            return Err(format!(
                "cannot parse {}: invalid week number in {} (1 to 4, or 5 for the last)",
                quote(span),
                quote(text)
            ));
        }
    };
    Ok((*weekday, nth))
}

/// `mon`, `mon-fri`, `mon2`, `mon2-wed`, `mon-wed2`.
fn parse_day_span(text: &str) -> Result<DaySpan, String> {
    let mut parts = text.split('-');
    let first = parts.next().unwrap_or_default();
    let second = parts.next();
    if parts.next().is_some() {
        return Err(format!("cannot parse {}: invalid week span", quote(text)));
    }
    let (start, start_nth) = parse_weekday(text, first)?;
    let Some(second) = second else {
        return Ok(match start_nth {
            None => DaySpan::Weekdays { start, end: start },
            Some(nth) => DaySpan::OfMonth {
                anchor: start,
                nth,
                before: 0,
                after: 0,
            },
        });
    };
    let (end, end_nth) = parse_weekday(text, second)?;
    // Days from `start` to `end`, going forward through the week.
    let distance = (end.to_monday_zero_offset() - start.to_monday_zero_offset()).rem_euclid(7);
    Ok(match (start_nth, end_nth) {
        (None, None) => DaySpan::Weekdays { start, end },
        // The deprecated `mon2-wed2` reads as `mon2-wed`.
        (Some(nth), None) => DaySpan::OfMonth {
            anchor: start,
            nth,
            before: 0,
            after: distance,
        },
        (Some(nth), Some(other)) if nth == other => DaySpan::OfMonth {
            anchor: start,
            nth,
            before: 0,
            after: distance,
        },
        (None, Some(nth)) => DaySpan::OfMonth {
            anchor: end,
            nth,
            before: distance,
            after: 0,
        },
        (Some(_), Some(_)) => {
            return Err(format!(
                "cannot parse {}: the two days name different weeks",
                quote(text)
            ));
        }
    })
}

/// `9:00` or `09:00`, 0:00 to 24:00, as a minute of the day.
fn parse_clock(span: &str, text: &str) -> Result<u32, String> {
    let invalid = || format!("cannot parse {}: not a valid time", quote(span));
    let (hour, minute) = text.split_once(':').ok_or_else(invalid)?;
    let digits =
        |s: &str, lens: &[usize]| lens.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(hour, &[1, 2]) || !digits(minute, &[2]) {
        return Err(invalid());
    }
    let hour: u32 = hour.parse().map_err(|_| invalid())?;
    let minute: u32 = minute.parse().map_err(|_| invalid())?;
    if minute > 59 || hour > 24 || (hour == 24 && minute != 0) {
        return Err(invalid());
    }
    Ok(hour * 60 + minute)
}

/// `10:00`, `9:00-11:00`, `9:00~11:00`, either span with `/count`.
fn parse_clock_span(text: &str) -> Result<ClockSpan, String> {
    let (span, count) = match text.split_once('/') {
        None => (text, None),
        Some((span, count)) => {
            let valid =
                !count.is_empty() && count.len() <= 10 && count.bytes().all(|b| b.is_ascii_digit());
            match count.parse::<u32>() {
                Ok(n) if valid && n > 0 => (span, Some(n)),
                _ => {
                    return Err(format!(
                        "cannot parse {}: not a valid event count",
                        quote(text)
                    ));
                }
            }
        }
    };
    let separators = span.bytes().filter(|b| *b == b'-' || *b == b'~').count();
    if separators > 1 {
        return Err(format!(
            "cannot parse {}: not a valid interval",
            quote(text)
        ));
    }
    let Some(at) = span.find(['-', '~']) else {
        if count.is_some() {
            return Err(format!(
                "cannot parse {}: an event count needs a span of time",
                quote(text)
            ));
        }
        return Ok(ClockSpan {
            start: parse_clock(text, span)? % DAY,
            length: 0,
            count: 1,
            spread: false,
        });
    };
    let spread = span.as_bytes()[at] == b'~';
    let start = parse_clock(text, &span[..at])?;
    let end = parse_clock(text, &span[at + 1..])?;
    let length = if start == end {
        0
    } else {
        match (end + DAY - start % DAY) % DAY {
            0 => DAY,
            n => n,
        }
    };
    let count = count.unwrap_or(1);
    if length == 0 && count > 1 {
        return Err(format!(
            "cannot parse {}: an event count needs a span of time",
            quote(text)
        ));
    }
    if length > 0 && count > length {
        return Err(format!(
            "cannot parse {}: more events than the span has minutes",
            quote(text)
        ));
    }
    Ok(ClockSpan {
        start: start % DAY,
        length,
        count,
        spread,
    })
}

#[cfg(test)]
mod tests;
