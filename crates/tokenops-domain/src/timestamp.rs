//! The one canonical timestamp: microseconds since the Unix epoch, UTC, stored as a 64-bit
//! integer on both stores and rendered in the spec's two textual forms.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use time::format_description::well_known::Rfc3339;
use time::macros::format_description;
use time::{OffsetDateTime, UtcOffset};

/// A UTC instant with microsecond precision. Ordering equals chronological order.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(i64);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("not an ISO 8601 timestamp with a time zone (for example 2026-01-31T12:00:00Z)")]
pub struct TimestampParseError;

impl Timestamp {
    pub const fn from_micros(micros: i64) -> Self {
        Self(micros)
    }

    pub const fn as_micros(self) -> i64 {
        self.0
    }

    /// Reads the system clock. Only the `SystemClock` adapter calls this (hence crate-private);
    /// everything else asks the `Clock` port so that tests can move time.
    pub(crate) fn system_now() -> Self {
        Self::from_datetime(OffsetDateTime::now_utc())
    }

    pub fn from_datetime(dt: OffsetDateTime) -> Self {
        let nanos = dt.unix_timestamp_nanos();
        // i64 microseconds cover ±292,000 years; saturate rather than wrap for absurd inputs.
        let micros = (nanos / 1_000).clamp(i64::MIN as i128, i64::MAX as i128) as i64;
        Self(micros)
    }

    pub fn to_datetime(self) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp_nanos(self.0 as i128 * 1_000).unwrap_or(OffsetDateTime::UNIX_EPOCH)
    }

    pub fn plus_millis(self, millis: i64) -> Self {
        Self(self.0.saturating_add(millis.saturating_mul(1_000)))
    }

    pub fn minus_millis(self, millis: i64) -> Self {
        self.plus_millis(millis.saturating_neg())
    }

    /// Whole milliseconds from `self` until `later`, zero if `later` is not after `self`.
    pub fn millis_until(self, later: Timestamp) -> i64 {
        (later.0.saturating_sub(self.0) / 1_000).max(0)
    }

    /// ISO 8601 in UTC with millisecond precision and a trailing `Z`: the form most of the API uses.
    pub fn to_iso8601(self) -> String {
        let dt = self.to_datetime();
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            dt.year(),
            dt.month() as u8,
            dt.day(),
            dt.hour(),
            dt.minute(),
            dt.second(),
            dt.millisecond()
        )
    }

    /// `yyyy-MM-dd HH:mm:ss.SSS` in UTC: the form of the webhook, delivery history and some
    /// identity areas of the spec.
    pub fn to_spaced_utc(self) -> String {
        let fmt = format_description!("[year]-[month]-[day] [hour]:[minute]:[second].[subsecond digits:3]");
        self.to_datetime().format(&fmt).unwrap_or_default()
    }

    /// Parses an RFC 3339 / ISO 8601 timestamp carrying an offset (`Z` or `±hh:mm`).
    pub fn parse_iso8601(text: &str) -> Result<Self, TimestampParseError> {
        let dt = OffsetDateTime::parse(text.trim(), &Rfc3339).map_err(|_| TimestampParseError)?;
        Ok(Self::from_datetime(dt.to_offset(UtcOffset::UTC)))
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_iso8601())
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_iso8601())
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_iso8601())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse_iso8601(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_both_forms_of_the_spec() {
        let t = Timestamp::parse_iso8601("2026-11-21T06:02:42.123456Z").expect("valid");
        assert_eq!(t.to_iso8601(), "2026-11-21T06:02:42.123Z");
        assert_eq!(t.to_spaced_utc(), "2026-11-21 06:02:42.123");
        assert_eq!(t.as_micros() % 1_000_000, 123_456);
    }

    #[test]
    fn offsets_are_normalised_to_utc() {
        let t = Timestamp::parse_iso8601("2026-11-21T08:00:00+02:00").expect("valid");
        assert_eq!(t.to_iso8601(), "2026-11-21T06:00:00.000Z");
    }

    #[test]
    fn text_without_offset_is_refused() {
        assert!(Timestamp::parse_iso8601("2026-11-21T08:00:00").is_err());
        assert!(Timestamp::parse_iso8601("yesterday").is_err());
    }

    #[test]
    fn millis_until_is_never_negative() {
        let t = Timestamp::from_micros(5_000_000);
        assert_eq!(t.millis_until(t.plus_millis(1_500)), 1_500);
        assert_eq!(t.plus_millis(10).millis_until(t), 0);
    }
}
