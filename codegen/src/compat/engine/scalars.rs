//! Numbers and strings: bounds, `multipleOf`, lengths, `pattern` and `format`.

use serde_json::{Map, Value};

use super::*;

impl Checker<'_> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn numbers(
        &mut self,
        writer: &Node,
        writer_map: &Map<String, Value>,
        reader: &Node,
        reader_map: &Map<String, Value>,
        shared: u8,
        path: &[Segment],
        out: &mut Vec<Incompatibility>,
    ) {
        // Lower bounds must not rise (sign 1.0), upper bounds must not fall (sign -1.0).
        let sides: [(BoundOf, f64); 2] = [(lower_bound, 1.0), (upper_bound, -1.0)];
        for (bound_of, sign) in sides {
            let Some(bound) = bound_of(reader_map) else {
                continue;
            };
            let holds = bound_of(writer_map).is_some_and(|own| {
                sign * own.value > sign * bound.value
                    || (own.value == bound.value && (own.exclusive || !bound.exclusive))
            });
            if holds {
                continue;
            }
            let (described, missing) = if sign > 0.0 {
                ("lower", "no lower bound")
            } else {
                ("higher", "no upper bound")
            };
            let mut item = found(
                CompatRule::NumberRangeNarrowed,
                writer,
                format!("{}/{}", reader.pointer, bound.keyword),
                path,
                format!(
                    "the reader's `{}: {}` rejects {described} numbers the writer may emit ({})",
                    bound.keyword,
                    number_text(bound.value),
                    describe_bound(bound_of(writer_map), missing)
                ),
            );
            let outside = if bound.exclusive { 0.0 } else { 1.0 };
            item.hint = Some(number_value(bound.value - sign * outside));
            out.push(item);
        }
        if let Some(divisor) = reader_map.get("multipleOf").and_then(Value::as_f64) {
            let writer_divisor = writer_map.get("multipleOf").and_then(Value::as_f64);
            let integers_only = shared & types::NUMBER == types::INTEGER;
            let holds = writer_divisor.is_some_and(|own| is_multiple(own, divisor))
                || (integers_only && is_multiple(1.0, divisor));
            if !holds {
                out.push(found(
                    CompatRule::NumberRangeNarrowed,
                    writer,
                    format!("{}/multipleOf", reader.pointer),
                    path,
                    format!(
                        "the reader requires multiples of {}; the writer's numbers are {}",
                        number_text(divisor),
                        writer_divisor.map_or_else(
                            || "not restricted so".to_owned(),
                            |own| format!("multiples of {}", number_text(own))
                        )
                    ),
                ));
            }
        }
    }
}

/// Reads one side's numeric bound from a schema.
type BoundOf = fn(&Map<String, Value>) -> Option<schema::Bound>;

pub(super) fn strings(
    writer: &Node,
    writer_map: &Map<String, Value>,
    reader: &Node,
    reader_map: &Map<String, Value>,
    path: &[Segment],
    out: &mut Vec<Incompatibility>,
) {
    if let Some(min) = count(reader_map, "minLength")
        && count(writer_map, "minLength").unwrap_or(0) < min
    {
        let mut item = found(
            CompatRule::StringLengthNarrowed,
            writer,
            format!("{}/minLength", reader.pointer),
            path,
            format!(
                "the reader requires at least {min} characters; the writer may emit {}",
                count(writer_map, "minLength").unwrap_or(0)
            ),
        );
        item.hint = Some(Value::String(
            "a".repeat(count(writer_map, "minLength").unwrap_or(0) as usize),
        ));
        out.push(item);
    }
    if let Some(max) = count(reader_map, "maxLength")
        && count(writer_map, "maxLength").is_none_or(|own| own > max)
    {
        let mut item = found(
            CompatRule::StringLengthNarrowed,
            writer,
            format!("{}/maxLength", reader.pointer),
            path,
            format!(
                "the reader allows at most {max} characters; the writer may emit {}",
                count(writer_map, "maxLength")
                    .map_or_else(|| "more".to_owned(), |own| own.to_string())
            ),
        );
        item.hint = Some(Value::String(
            "a".repeat((max as usize).saturating_add(1).min(4096)),
        ));
        out.push(item);
    }
    if let Some(pattern) = reader_map.get("pattern")
        && writer_map.get("pattern") != Some(pattern)
    {
        out.push(found(
            CompatRule::PatternChanged,
            writer,
            format!("{}/pattern", reader.pointer),
            path,
            match writer_map.get("pattern") {
                Some(own) => format!("the reader's pattern {pattern} differs from the writer's {own}; evc does not decide whether one regex contains another"),
                None => format!("the reader requires the pattern {pattern}; the writer's strings are not restricted by it"),
            },
        ));
    }
    if let Some(format) = reader_map.get("format").and_then(Value::as_str)
        && FORMATS.contains(&format)
        && writer_map.get("format").and_then(Value::as_str) != Some(format)
    {
        let mut item = found(
            CompatRule::FormatChanged,
            writer,
            format!("{}/format", reader.pointer),
            path,
            match writer_map.get("format").and_then(Value::as_str) {
                Some(own) => format!(
                    "the reader checks `format: {format}`; the writer emits `format: {own}`"
                ),
                None => format!(
                    "the reader checks `format: {format}`; the writer's strings have no format"
                ),
            },
        );
        item.hint = Some(Value::String("not-a-formatted-value".to_owned()));
        out.push(item);
    }
}

fn is_multiple(value: f64, divisor: f64) -> bool {
    if divisor <= 0.0 {
        return false;
    }
    let ratio = value / divisor;
    ratio >= 1.0 - 1e-9 && (ratio - ratio.round()).abs() < 1e-9
}

fn number_text(value: f64) -> String {
    number_value(value).to_string()
}

fn number_value(value: f64) -> Value {
    if value.fract() == 0.0 && value.abs() < 9.0e15 {
        json!(value as i64)
    } else {
        json!(value)
    }
}

fn describe_bound(bound: Option<schema::Bound>, none: &str) -> String {
    bound.map_or_else(
        || format!("the writer has {none}"),
        |bound| {
            format!(
                "the writer's `{}: {}`",
                bound.keyword,
                number_text(bound.value)
            )
        },
    )
}
