//! Wall-clock time in the unit the database stores: milliseconds since the Unix epoch.
//! Pure modules never call this; they take `now` as an argument.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, UTC.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Civil date (year, month, day) and time of day (hour, minute, second) of a millisecond
/// timestamp, in UTC. Hand-rolled (Howard Hinnant's days-from-civil inverse) to avoid a
/// date crate for one conversion.
pub fn civil_utc(ms: i64) -> ((i64, u32, u32), (u32, u32, u32)) {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = if m <= 2 { y + 1 } else { y };
    (
        (y, m, d),
        (
            (sod / 3600) as u32,
            ((sod % 3600) / 60) as u32,
            (sod % 60) as u32,
        ),
    )
}

/// `YYYY-MM-DD` of a millisecond timestamp, UTC.
pub fn date_utc(ms: i64) -> String {
    let ((y, m, d), _) = civil_utc(ms);
    format!("{y:04}-{m:02}-{d:02}")
}

/// `YYYY-MM-DD HH:MM` of a millisecond timestamp, UTC: for people, to the minute.
pub fn minute_utc(ms: i64) -> String {
    let ((y, m, d), (hh, mm, _)) = civil_utc(ms);
    format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}")
}

/// `YYYY-MM-DDTHH:MM:SSZ` of a millisecond timestamp.
pub fn iso_utc(ms: i64) -> String {
    let ((y, m, d), (hh, mm, ss)) = civil_utc(ms);
    format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z")
}

/// Milliseconds since the epoch at midnight UTC of a civil date.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe - 719_468) * 86_400_000
}

/// Parses `YYYY-MM-DD` or `YYYY-MM-DDTHH:MM[:SS][Z]` (UTC) into milliseconds.
pub fn parse_iso_utc(s: &str) -> Option<i64> {
    let s = s.trim().trim_end_matches('Z');
    let (date, time) = match s.split_once(['T', ' ']) {
        Some((d, t)) => (d, Some(t)),
        None => (s, None),
    };
    let mut parts = date.split('-');
    let y: i64 = parts.next()?.parse().ok()?;
    let m: u32 = parts.next()?.parse().ok()?;
    let d: u32 = parts.next()?.parse().ok()?;
    // Years outside 0..=9999 are not dates a person means, and would overflow below.
    if parts.next().is_some()
        || !(0..=9999).contains(&y)
        || !(1..=12).contains(&m)
        || !(1..=31).contains(&d)
    {
        return None;
    }
    let mut ms = days_from_civil(y, m, d);
    if let Some(t) = time {
        let mut f = t.split(':');
        let hh: i64 = f.next()?.parse().ok()?;
        let mm: i64 = f.next()?.parse().ok()?;
        let ss: i64 = match f.next() {
            Some(x) => x.split('.').next()?.parse().ok()?,
            None => 0,
        };
        if hh > 23 || mm > 59 || ss > 60 {
            return None;
        }
        ms += (hh * 3600 + mm * 60 + ss) * 1000;
    }
    Some(ms)
}

/// Parses a duration like `30s`, `15m`, `12h`, `7d`, `2w` into milliseconds.
///
/// ```
/// assert_eq!(cairn_core::clock::parse_duration_ms("15m"), Some(900_000));
/// assert_eq!(cairn_core::clock::parse_duration_ms("soon"), None);
/// ```
pub fn parse_duration_ms(s: &str) -> Option<i64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = s.split_at(split);
    let n: i64 = n.parse().ok()?;
    let unit_ms = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 7 * 86_400_000,
        _ => return None,
    };
    n.checked_mul(unit_ms)
}

/// A duration in words for a message: `45s`, `3m` (`3m 5s` with `minute_seconds`), `2h 5m`,
/// `4d 3h`; a negative duration is `0s`.
pub fn span(ms: i64, minute_seconds: bool) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 if minute_seconds => format!("{}m {}s", s / 60, s % 60),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h {}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d {}h", s / 86_400, (s % 86_400) / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_round_trip() {
        for ms in [
            0,
            86_399_999,
            951_782_400_000,
            1_795_000_000_123,
            -86_400_000,
        ] {
            let ((y, m, d), (hh, mi, ss)) = civil_utc(ms);
            let back = days_from_civil(y, m, d) + ((hh * 3600 + mi * 60 + ss) as i64) * 1000;
            assert_eq!(back, ms - ms.rem_euclid(1000), "{ms}");
        }
        assert_eq!(iso_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(minute_utc(3_599_999), "1970-01-01 00:59");
        assert_eq!(date_utc(951_782_400_000), "2000-02-29");
    }

    #[test]
    fn parses_dates_and_durations() {
        assert_eq!(parse_iso_utc("1970-01-02"), Some(86_400_000));
        assert_eq!(parse_iso_utc("1970-01-01T01:00Z"), Some(3_600_000));
        assert_eq!(parse_iso_utc("1970-01-01 00:00:05"), Some(5_000));
        assert_eq!(parse_iso_utc("1970-13-01"), None);
        assert_eq!(parse_iso_utc("yesterday"), None);
        assert_eq!(parse_iso_utc("99999999999999999-01-01"), None);
        assert_eq!(parse_iso_utc("-5-01-01"), None);
        assert_eq!(parse_iso_utc("9999-12-31"), Some(253_402_214_400_000));
        assert_eq!(parse_duration_ms("7d"), Some(7 * 86_400_000));
        assert_eq!(parse_duration_ms("90s"), Some(90_000));
        assert_eq!(parse_duration_ms("3"), None);
        assert_eq!(parse_duration_ms("3y"), None);
    }
}
