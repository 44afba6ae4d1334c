//! A SCHEDULED automation's cron expression and its time zone: parsing, and the next run after
//! an instant. The grammar is the classic five fields, `minute hour day-of-month month
//! day-of-week`, each `*`, a number, a range `a-b`, a step `*/n` or `a-b/n`, or a comma list of
//! those; months and days may be named (`JAN`, `MON`); day-of-week 0 and 7 are Sunday. As in
//! Vixie cron, when both day fields are restricted a day matching either runs. Local times that
//! a clock change skips run at the first instant after the gap; those it repeats run once, at
//! the earlier.

use crate::Timestamp;
use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;

/// A parsed cron expression with its time zone.
#[derive(Debug, Clone)]
pub struct Schedule {
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
    days_restricted: bool,
    weekdays_restricted: bool,
    zone: TimeZone,
}

const MONTHS: [&str; 12] = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];
const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

impl Schedule {
    /// The IANA zone `name`, which a schedule's times are read in.
    pub fn time_zone(name: &str) -> Result<TimeZone, String> {
        TimeZone::get(name).map_err(|_| format!("unknown time zone {name:?}"))
    }

    /// Parses `cron` in the IANA zone `time_zone`; the error says which part is wrong.
    pub fn parse(cron: &str, time_zone: &str) -> Result<Self, String> {
        let zone = Self::time_zone(time_zone)?;
        let fields: Vec<&str> = cron.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = fields[..] else {
            return Err(format!(
                "a cron expression has five fields (minute hour day-of-month month day-of-week), not {}",
                fields.len()
            ));
        };
        let mut weekdays = field(weekday, "day-of-week", 0, 7, &WEEKDAYS, 0)?;
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays | 1) & !(1 << 7);
        }
        Ok(Self {
            minutes: field(minute, "minute", 0, 59, &[], 0)?,
            hours: field(hour, "hour", 0, 23, &[], 0)?,
            days: field(day, "day-of-month", 1, 31, &[], 0)?,
            months: field(month, "month", 1, 12, &MONTHS, 1)?,
            weekdays,
            days_restricted: day != "*",
            weekdays_restricted: weekday != "*",
            zone,
        })
    }

    /// The first run strictly after `after`, within the next five years (a schedule that never
    /// fires there, such as `0 0 31 2 *`, has none).
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        let instant = jiff::Timestamp::from_microsecond(after.as_micros()).ok()?;
        let local = instant.to_zoned(self.zone.clone()).datetime();
        let mut date = local.date();
        let last = date.checked_add(jiff::Span::new().years(5)).ok()?;
        while date <= last {
            if self.runs_on(date) {
                for hour in bits(self.hours) {
                    for minute in bits(self.minutes) {
                        let at = DateTime::new(date.year(), date.month(), date.day(), hour as i8, minute as i8, 0, 0)
                            .ok()?;
                        // The zone's compatible choice: a skipped time moves forward by the gap,
                        // a repeated one takes the earlier instant.
                        let zoned = at.to_zoned(self.zone.clone()).ok()?;
                        let micros = zoned.timestamp().as_microsecond();
                        if micros > after.as_micros() {
                            return Some(Timestamp::from_micros(micros));
                        }
                    }
                }
            }
            date = date.tomorrow().ok()?;
        }
        None
    }

    fn runs_on(&self, date: Date) -> bool {
        if self.months & (1 << date.month()) == 0 {
            return false;
        }
        let day = self.days & (1 << date.day()) != 0;
        let weekday = self.weekdays & (1 << date.weekday().to_sunday_zero_offset()) != 0;
        match (self.days_restricted, self.weekdays_restricted) {
            (true, true) => day || weekday,
            _ => day && weekday,
        }
    }
}

/// The set bits of `set`, lowest first.
fn bits(set: u64) -> impl Iterator<Item = u32> {
    (0..64).filter(move |bit| set & (1 << bit) != 0)
}

/// One field as a bit set of the values it allows. `names` spell values from `first_name` on.
fn field(text: &str, what: &str, low: u32, high: u32, names: &[&str], first_name: u32) -> Result<u64, String> {
    let value = |part: &str| -> Result<u32, String> {
        let upper = part.to_ascii_uppercase();
        if let Some(i) = names.iter().position(|n| *n == upper) {
            return Ok(first_name + i as u32);
        }
        let n: u32 = part.parse().map_err(|_| format!("{what}: {part:?} is not a number"))?;
        if n < low || n > high {
            return Err(format!("{what}: {n} is outside {low}-{high}"));
        }
        Ok(n)
    };
    let mut set = 0u64;
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => {
                let step: u32 = step.parse().map_err(|_| format!("{what}: step {step:?} is not a number"))?;
                if step == 0 {
                    return Err(format!("{what}: a step of 0"));
                }
                (range, step)
            }
            None => (item, 1),
        };
        let (from, to) = if range == "*" {
            (low, high)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a)?, value(b)?)
        } else {
            let v = value(range)?;
            (v, if step > 1 { high } else { v })
        };
        if from > to {
            return Err(format!("{what}: range {from}-{to} is inverted"));
        }
        let mut v = from;
        while v <= to {
            set |= 1 << v;
            v += step;
        }
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        Timestamp::parse_iso8601(text).expect("instant")
    }

    fn next(cron: &str, zone: &str, after: &str) -> String {
        Schedule::parse(cron, zone).expect("parses").next_after(at(after)).expect("a next run").to_iso8601()
    }

    #[test]
    fn the_next_run_is_strictly_after_the_instant() {
        assert_eq!(next("0 17 * * *", "UTC", "2026-03-02T10:00:00Z"), "2026-03-02T17:00:00.000Z");
        assert_eq!(next("0 17 * * *", "UTC", "2026-03-02T17:00:00Z"), "2026-03-03T17:00:00.000Z");
        assert_eq!(next("*/15 * * * *", "UTC", "2026-03-02T10:07:30Z"), "2026-03-02T10:15:00.000Z");
        assert_eq!(next("30 9 1 * *", "UTC", "2026-12-05T00:00:00Z"), "2027-01-01T09:30:00.000Z");
    }

    #[test]
    fn the_time_zone_places_the_local_time() {
        // 17:00 in Paris is 16:00 UTC in winter and 15:00 UTC in summer.
        assert_eq!(next("0 17 * * *", "Europe/Paris", "2026-01-10T00:00:00Z"), "2026-01-10T16:00:00.000Z");
        assert_eq!(next("0 17 * * *", "Europe/Paris", "2026-07-10T00:00:00Z"), "2026-07-10T15:00:00.000Z");
    }

    #[test]
    fn clock_changes_neither_skip_nor_repeat_a_run() {
        // 2026-03-29 02:30 does not exist in Paris: the run is moved forward by the gap (03:30 local).
        assert_eq!(next("30 2 * * *", "Europe/Paris", "2026-03-29T00:00:00Z"), "2026-03-29T01:30:00.000Z");
        // 2026-10-25 02:30 happens twice: once, at the earlier.
        let first = next("30 2 * * *", "Europe/Paris", "2026-10-24T23:00:00Z");
        assert_eq!(first, "2026-10-25T00:30:00.000Z");
        assert_eq!(next("30 2 * * *", "Europe/Paris", &first), "2026-10-26T01:30:00.000Z");
    }

    #[test]
    fn days_and_names() {
        // Weekdays by name; Monday 2026-03-02.
        assert_eq!(next("0 8 * * MON-FRI", "UTC", "2026-03-06T09:00:00Z"), "2026-03-09T08:00:00.000Z");
        assert_eq!(next("0 8 * * 7", "UTC", "2026-03-02T00:00:00Z"), "2026-03-08T08:00:00.000Z", "7 is Sunday");
        // Both day fields restricted: either.
        assert_eq!(next("0 0 15 * MON", "UTC", "2026-03-03T00:00:00Z"), "2026-03-09T00:00:00.000Z");
        assert_eq!(next("0 0 1 jan,jul *", "UTC", "2026-03-03T00:00:00Z"), "2026-07-01T00:00:00.000Z");
        assert!(Schedule::parse("0 0 31 2 *", "UTC").expect("parses").next_after(at("2026-01-01T00:00:00Z")).is_none());
    }

    #[test]
    fn errors_say_what_is_wrong() {
        for (cron, zone, says) in [
            ("0 17 * *", "UTC", "five fields"),
            ("60 * * * *", "UTC", "minute: 60"),
            ("* 24 * * *", "UTC", "hour: 24"),
            ("* * 0 * *", "UTC", "day-of-month: 0"),
            ("* * * 13 *", "UTC", "month: 13"),
            ("* * * * 8", "UTC", "day-of-week: 8"),
            ("*/0 * * * *", "UTC", "step of 0"),
            ("5-1 * * * *", "UTC", "inverted"),
            ("x * * * *", "UTC", "not a number"),
            ("* * * * *", "Mars/Olympus", "unknown time zone"),
        ] {
            let error = Schedule::parse(cron, zone).expect_err(cron);
            assert!(error.contains(says), "{cron} in {zone}: {error}");
        }
    }
}
