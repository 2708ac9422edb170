//! Wall-clock time as the pipeline stores it: Unix milliseconds in an `i64`.
//!
//! Tokens, claim records, delay-queue scores and dead letters all carry times in this
//! one unit, so they compare across processes and machines (to within their clocks'
//! skew). Durations inside one process use `std::time::Instant` instead.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in Unix milliseconds: 0 when the clock reads before 1970, `i64::MAX` past the
/// year 292 million. Never panics.
///
/// ```
/// let t = reward_runtime::clock::now_ms();
/// assert!(t > 1_700_000_000_000);
/// ```
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses a UTC instant written `YYYY-MM-DDTHH:MM:SSZ` (RFC 3339, UTC only, no
/// fraction) into Unix milliseconds, as operators write deadlines in config files.
///
/// ```
/// use reward_runtime::clock::{format_utc, parse_utc};
/// assert_eq!(parse_utc("1970-01-02T00:00:01Z"), Some(86_401_000));
/// assert_eq!(parse_utc("2027-02-30T00:00:00Z"), None);
/// assert_eq!(format_utc(1_800_000_000_000), "2027-01-15T08:00:00Z");
/// ```
pub fn parse_utc(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() != 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't')
        || b[13] != b':'
        || b[16] != b':'
        || !matches!(b[19], b'Z' | b'z')
    {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        let s = text.get(from..to)?;
        if !s.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    let (y, mo, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (h, mi, s) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    let max_day = *month_days.get(usize::try_from(mo - 1).ok()?)?;
    if !(1..=max_day).contains(&d) || h > 23 || mi > 59 || s > 59 {
        return None;
    }
    let days = days_from_civil(y, mo, d);
    Some(((days * 24 + h) * 60 + mi) * 60_000 + s * 1000)
}

/// Writes Unix milliseconds as `YYYY-MM-DDTHH:MM:SSZ` (milliseconds dropped).
pub fn format_utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn utc_text_round_trips_over_centuries() {
        let mut ms = -2_000_000_000_000i64;
        while ms < 10_000_000_000_000 {
            let t = ms - ms.rem_euclid(1000);
            let text = format_utc(t);
            assert_eq!(parse_utc(&text), Some(t), "{text}");
            ms += 7_777_777_777;
        }
        assert_eq!(parse_utc("2024-02-29T23:59:59Z"), Some(1_709_251_199_000));
        for bad in [
            "2023-02-29T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01 00:00:00Z",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00+01:00",
            "+024-01-01T00:00:00Z",
            "",
        ] {
            assert_eq!(parse_utc(bad), None, "{bad}");
        }
    }
}
