//! Arrays: tuples position by position, the rest, lengths, uniqueness and `contains`.

use serde_json::{Map, Value};

use super::*;

impl Checker<'_> {
    /// The writer's item at `index` against the reader's; a reader that ends its tuple there
    /// (`items: false`) shortens the array.
    fn item(
        &mut self,
        own: Node,
        other: Node,
        index: usize,
        path: &[Segment],
    ) -> Vec<Incompatibility> {
        let item_path = with_segment(path, Segment::Index(index));
        if is_false(&other.schema) && !is_unsatisfiable(&own.schema) {
            return vec![found(
                CompatRule::ArrayNarrowed,
                &own,
                other.pointer.clone(),
                &item_path,
                format!("the reader accepts at most {index} items; the writer may emit more"),
            )];
        }
        self.sub(own, other, &item_path)
    }

    pub(super) fn arrays(
        &mut self,
        writer: &Node,
        writer_map: &Map<String, Value>,
        reader: &Node,
        reader_map: &Map<String, Value>,
        path: &[Segment],
        out: &mut Vec<Incompatibility>,
    ) {
        let writer_tuple = schema::tuple(writer_map);
        let reader_tuple = schema::tuple(reader_map);
        let writer_max = count(writer_map, "maxItems");
        let positions = writer_tuple.prefix.len().max(reader_tuple.prefix.len());
        let writer_item = |index: usize| -> Node {
            match writer_tuple.prefix.get(index) {
                Some((item, suffix)) => writer.child(item, suffix),
                None => match writer_tuple.rest {
                    Some((rest, keyword)) => writer.child(rest, &format!("/{keyword}")),
                    None => Node::synthetic(Value::Bool(true), &writer.pointer),
                },
            }
        };
        let reader_item = |index: usize| -> Node {
            match reader_tuple.prefix.get(index) {
                Some((item, suffix)) => reader.child(item, suffix),
                None => match reader_tuple.rest {
                    Some((rest, keyword)) => reader.child(rest, &format!("/{keyword}")),
                    None => Node::synthetic(Value::Bool(true), &reader.pointer),
                },
            }
        };
        let mut writer_ends = false;
        for index in 0..positions {
            if writer_max.is_some_and(|max| index as u64 >= max) {
                writer_ends = true;
                break;
            }
            let own = writer_item(index);
            if is_false(&own.schema) {
                writer_ends = true;
                break;
            }
            let other = reader_item(index);
            out.extend(self.item(own, other, index, path));
        }
        if !writer_ends && writer_max.is_none_or(|max| max > positions as u64) {
            let own = writer_item(positions);
            if !is_false(&own.schema) {
                let other = reader_item(positions);
                out.extend(self.item(own, other, positions, path));
            }
        }
        let writer_effective_max = writer_max.or_else(|| {
            writer_tuple
                .rest
                .filter(|(rest, _)| is_false(rest))
                .map(|_| writer_tuple.prefix.len() as u64)
        });
        if let Some(min) = count(reader_map, "minItems")
            && count(writer_map, "minItems").unwrap_or(0) < min
        {
            out.push(found(
                CompatRule::ArrayNarrowed,
                writer,
                format!("{}/minItems", reader.pointer),
                path,
                format!(
                    "the reader requires at least {min} items; the writer may emit {}",
                    count(writer_map, "minItems").unwrap_or(0)
                ),
            ));
        }
        if let Some(max) = count(reader_map, "maxItems")
            && writer_effective_max.is_none_or(|own| own > max)
        {
            out.push(found(
                CompatRule::ArrayNarrowed,
                writer,
                format!("{}/maxItems", reader.pointer),
                path,
                format!(
                    "the reader allows at most {max} items; the writer may emit {}",
                    writer_effective_max
                        .map_or_else(|| "any number".to_owned(), |own| own.to_string())
                ),
            ));
        }
        if reader_map.get("uniqueItems") == Some(&Value::Bool(true))
            && writer_map.get("uniqueItems") != Some(&Value::Bool(true))
            && writer_effective_max.is_none_or(|own| own > 1)
        {
            out.push(found(
                CompatRule::ArrayNarrowed,
                writer,
                format!("{}/uniqueItems", reader.pointer),
                path,
                "the reader requires unique items; the writer may repeat items".to_owned(),
            ));
        }
        if let Some(contains) = reader_map.get("contains") {
            let same = writer_map.get("contains") == Some(contains);
            let min = |map: &Map<String, Value>| count(map, "minContains").unwrap_or(1);
            let holds = same
                && min(writer_map) >= min(reader_map)
                && count(reader_map, "maxContains").is_none_or(|max| {
                    count(writer_map, "maxContains").is_some_and(|own| own <= max)
                });
            if !holds {
                out.push(found(
                    CompatRule::ArrayNarrowed,
                    writer,
                    format!("{}/contains", reader.pointer),
                    path,
                    "the reader's `contains` (or its counts) is new or differs from the writer's"
                        .to_owned(),
                ));
            }
        }
        if reader_map.contains_key("unevaluatedItems")
            && (schema::has_applicators(reader_map) || reader_map.contains_key("contains"))
            && writer_map.get("unevaluatedItems") != reader_map.get("unevaluatedItems")
        {
            out.push(found(
                CompatRule::Unjudgeable,
                writer,
                format!("{}/unevaluatedItems", reader.pointer),
                path,
                "the reader's `unevaluatedItems` depends on its applicators, which evc does not judge"
                    .to_owned(),
            ));
        }
    }
}
