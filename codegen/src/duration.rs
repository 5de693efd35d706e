//! Durations as contracts write them: a whole number and a unit (`250ms`, `30s`, `10m`, `2h`, `14d`).

use std::time::Duration;

/// The longest duration the runtime can use: it stores durations as `bigint` milliseconds and
/// adds them to or subtracts them from `now()` in PostgreSQL, whose timestamps end in 4713 BC and
/// 294276 AD; 1,000 years (`365000d`) stays far inside both.
pub const MAX_RUNTIME: Duration = Duration::from_secs(365_000 * 86_400);

/// Parses a contract duration; `None` when the text is not one.
pub fn parse(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    if number.is_empty() {
        return None;
    }
    let number: u64 = number.parse().ok()?;
    let seconds_per_unit = match unit {
        "ms" => return Some(Duration::from_millis(number)),
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return None,
    };
    number
        .checked_mul(seconds_per_unit)
        .map(Duration::from_secs)
}

/// Writes a duration back in the largest unit that divides it exactly.
pub fn format(duration: Duration) -> String {
    let millis = duration.as_millis();
    if !millis.is_multiple_of(1_000) {
        return format!("{millis}ms");
    }
    let seconds = duration.as_secs();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if seconds != 0 && seconds.is_multiple_of(size) {
            return format!("{}{unit}", seconds / size);
        }
    }
    format!("{seconds}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit() {
        assert_eq!(parse("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse("10m"), Some(Duration::from_secs(600)));
        assert_eq!(parse("2h"), Some(Duration::from_secs(7_200)));
        assert_eq!(parse("14d"), Some(Duration::from_secs(14 * 86_400)));
    }

    #[test]
    fn rejects_malformed_and_overflowing_text() {
        for bad in [
            "",
            "s",
            "10",
            "10w",
            "1.5s",
            "-1s",
            "99999999999999999999d",
            "18446744073709551615d",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn format_round_trips() {
        for text in ["250ms", "30s", "10m", "2h", "14d", "90s"] {
            let parsed = parse(text).expect("valid");
            assert_eq!(parse(&format(parsed)), Some(parsed));
        }
        assert_eq!(format(Duration::from_secs(600)), "10m");
    }
}
