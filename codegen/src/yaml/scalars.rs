//! How a plain (unquoted, untagged) scalar resolves: the YAML 1.2 core schema with strict
//! booleans, as serde-saphyr resolves it for an untyped value, so that a contract reads the same
//! whichever way it is parsed.

use super::Value;

/// What a plain scalar is.
pub(super) enum Plain {
    /// Null, a boolean or a number.
    Value(Value),
    /// `.inf`, `.nan` or a numeral too large for `f64`: refused, JSON has no such number.
    NonFinite,
    /// Anything else is text.
    Text,
}

/// Resolves a plain scalar.
pub(super) fn plain(text: &str) -> Plain {
    if matches!(text, "" | "~" | "null" | "Null" | "NULL") {
        return Plain::Value(Value::Null);
    }
    if let Some(value) = boolean(text) {
        return Plain::Value(Value::Bool(value));
    }
    let trimmed = trim(text);
    let unsigned = trimmed.strip_prefix(['+', '-']).unwrap_or(trimmed);
    // Upper-case radix prefixes and signed NaN spellings stay text.
    if matches!(unsigned.as_bytes(), [b'0', b'X' | b'O' | b'B', ..])
        || (unsigned.len() < trimmed.len() && matches!(unsigned, ".nan" | ".NaN" | ".NAN"))
    {
        return Plain::Text;
    }
    if let Some(value) = integer(text) {
        return Plain::Value(value);
    }
    match float(text) {
        Some(value) if value.is_finite() => Plain::Value(Value::Float(value)),
        Some(_) => Plain::NonFinite,
        None => Plain::Text,
    }
}

/// `true`, `True`, `TRUE` and the same spellings of `false`.
pub(super) fn boolean(text: &str) -> Option<bool> {
    match trim(text) {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

/// A decimal, `0x`, `0o` or `0b` integer, with `_` between digits; decimals other than `0`
/// do not start with `0`.
pub(super) fn integer(text: &str) -> Option<Value> {
    let trimmed = trim(text);
    let (negative, rest) = match trimmed.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, trimmed.strip_prefix('+').unwrap_or(trimmed)),
    };
    let (radix, digits) = if let Some(digits) = strip_radix(rest, 'x') {
        (16, digits)
    } else if let Some(digits) = strip_radix(rest, 'o') {
        (8, digits)
    } else if let Some(digits) = strip_radix(rest, 'b') {
        (2, digits)
    } else {
        if rest.len() > 1 && rest.starts_with('0') {
            return None;
        }
        (10, rest)
    };
    let magnitude = digits_value(digits, radix)?;
    if negative {
        let value = 0_i128.checked_sub(i128::try_from(magnitude).ok()?)?;
        i64::try_from(value).ok().map(Value::Int)
    } else {
        let value = u64::try_from(magnitude).ok()?;
        Some(i64::try_from(value).map_or(Value::UInt(value), Value::Int))
    }
}

/// A number in any form Rust reads that starts like a numeral, or `.inf` / `.nan`.
pub(super) fn float(text: &str) -> Option<f64> {
    let trimmed = trim(text);
    let (negative, unsigned) = match trimmed.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, trimmed.strip_prefix('+').unwrap_or(trimmed)),
    };
    match unsigned {
        ".nan" | ".NaN" | ".NAN" => return Some(f64::NAN),
        ".inf" | ".Inf" | ".INF" if negative => return Some(f64::NEG_INFINITY),
        ".inf" | ".Inf" | ".INF" => return Some(f64::INFINITY),
        _ => {}
    }
    // Rust also reads `inf`, `nan` and `infinity`, which YAML keeps as text.
    let value = trimmed.parse::<f64>().ok()?;
    let numeral = unsigned
        .as_bytes()
        .first()
        .is_some_and(|b| b.is_ascii_digit() || *b == b'.');
    numeral.then_some(value)
}

fn trim(text: &str) -> &str {
    text.trim_matches([' ', '\t', '\r', '\n'])
}

/// The digits after `0x` (or `0X`, which only a tag makes a number: plain, it stays text).
fn strip_radix(text: &str, letter: char) -> Option<&str> {
    let rest = text.strip_prefix('0')?;
    rest.strip_prefix(letter)
        .or_else(|| rest.strip_prefix(letter.to_ascii_uppercase()))
}

/// The value of `digits` in `radix`; `_` only between digits.
fn digits_value(digits: &str, radix: u32) -> Option<u128> {
    let bytes = digits.as_bytes();
    let mut value: u128 = 0;
    let mut seen = false;
    for (index, &byte) in bytes.iter().enumerate() {
        if byte == b'_' {
            let between = index > 0
                && bytes[index - 1] != b'_'
                && bytes.get(index + 1).is_some_and(|next| *next != b'_');
            if !between {
                return None;
            }
            continue;
        }
        let digit = char::from(byte).to_digit(radix)?;
        value = value
            .checked_mul(u128::from(radix))?
            .checked_add(u128::from(digit))?;
        seen = true;
    }
    seen.then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(text: &str) -> Option<Value> {
        match plain(text) {
            Plain::Value(value) => Some(value),
            Plain::NonFinite | Plain::Text => None,
        }
    }

    #[test]
    fn core_schema_spellings() {
        assert_eq!(resolved("~"), Some(Value::Null));
        assert_eq!(resolved("True"), Some(Value::Bool(true)));
        assert_eq!(resolved("yes"), None, "YAML 1.1 booleans are text");
        assert_eq!(resolved("-12"), Some(Value::Int(-12)));
        assert_eq!(resolved("1_000"), Some(Value::Int(1000)));
        assert_eq!(resolved("0x1F"), Some(Value::Int(31)));
        assert_eq!(resolved("0o17"), Some(Value::Int(15)));
        assert_eq!(resolved("0b101"), Some(Value::Int(5)));
        assert_eq!(
            resolved("18446744073709551615"),
            Some(Value::UInt(u64::MAX))
        );
        assert_eq!(resolved("2.5e3"), Some(Value::Float(2500.0)));
        assert_eq!(resolved(".5"), Some(Value::Float(0.5)));
    }

    #[test]
    fn text_that_looks_numeric_stays_text() {
        for text in [
            "1.0.0", "0X1F", "-.nan", "inf", "nan", "1__0", "_1", "v1", "1e",
        ] {
            assert_eq!(resolved(text), None, "{text}");
        }
        // A zero-led decimal is not an integer; Rust still reads it as a number.
        assert_eq!(resolved("0127"), Some(Value::Float(127.0)));
    }

    #[test]
    fn non_finite_numbers_are_singled_out() {
        for text in [".inf", "-.Inf", ".nan", "1e999"] {
            assert!(matches!(plain(text), Plain::NonFinite), "{text}");
        }
    }
}
