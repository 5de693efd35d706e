//! Checking single values against a subschema of a document with a real JSON Schema validator
//! (formats on), compiled once per subschema.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::schema::Dialect;

/// The `$id` the document gets inside the wrapper, so its own `#/...` references resolve.
const DOCUMENT_ID: &str = "urn:evc:compat:document";

/// One schema document and its compiled subschemas.
pub struct Document {
    root: Value,
    dialect: Dialect,
    compiled: HashMap<String, Option<jsonschema::Validator>>,
}

impl std::fmt::Debug for Document {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Document")
            .field("root", &self.root)
            .field("dialect", &self.dialect)
            .finish_non_exhaustive()
    }
}

impl Document {
    /// A document in `dialect`.
    pub fn new(root: Value, dialect: Dialect) -> Self {
        Self {
            root,
            dialect,
            compiled: HashMap::new(),
        }
    }

    /// The schema.
    pub fn root(&self) -> &Value {
        &self.root
    }

    /// Its dialect.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Whether `value` is valid against the subschema at `pointer`; `None` when that subschema
    /// does not compile (an unknown format, a regex the validator rejects, ...).
    pub fn accepts(&mut self, pointer: &str, value: &Value) -> Option<bool> {
        if !self.compiled.contains_key(pointer) {
            let validator = self.compile(pointer);
            self.compiled.insert(pointer.to_owned(), validator);
        }
        self.compiled
            .get(pointer)
            .and_then(Option::as_ref)
            .map(|validator| validator.is_valid(value))
    }

    fn compile(&self, pointer: &str) -> Option<jsonschema::Validator> {
        let mut embedded = self.root.clone();
        if let Value::Object(map) = &mut embedded {
            map.insert("$id".to_owned(), Value::String(DOCUMENT_ID.to_owned()));
        } else {
            // `true`/`false` documents: the pointer can only be the root.
            return pointer.is_empty().then(|| self.build(&embedded)).flatten();
        }
        let reference = format!("{DOCUMENT_ID}#{}", crate::uri::percent_encode(pointer));
        let wrapper = match self.dialect {
            Dialect::Draft7 => json!({
                "$schema": "http://json-schema.org/draft-07/schema#",
                "$ref": reference,
                "definitions": {"document": embedded},
            }),
            Dialect::Draft2020 => json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "$ref": reference,
                "$defs": {"document": embedded},
            }),
        };
        self.build(&wrapper)
    }

    fn build(&self, schema: &Value) -> Option<jsonschema::Validator> {
        let draft = match self.dialect {
            Dialect::Draft7 => jsonschema::Draft::Draft7,
            Dialect::Draft2020 => jsonschema::Draft::Draft202012,
        };
        jsonschema::options()
            .with_draft(draft)
            .should_validate_formats(true)
            .build(schema)
            .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subschemas_validate_with_references_and_formats() {
        let mut document = Document::new(
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "id": {"$ref": "#/$defs/id"},
                    "^odd key": {"type": "integer"}
                },
                "$defs": {"id": {"type": "string", "format": "uuid"}}
            }),
            Dialect::Draft2020,
        );
        assert_eq!(
            document.accepts("/properties/id", &json!("not-a-uuid")),
            Some(false)
        );
        assert_eq!(
            document.accepts(
                "/properties/id",
                &json!("0190c0de-0000-7000-8000-000000000001")
            ),
            Some(true)
        );
        assert_eq!(
            document.accepts("/properties/^odd key", &json!(1.5)),
            Some(false)
        );
    }

    #[test]
    fn draft7_documents_use_definitions() {
        let mut document = Document::new(
            json!({"definitions": {"n": {"type": "number", "maximum": 3}},
                   "properties": {"n": {"$ref": "#/definitions/n"}}}),
            Dialect::Draft7,
        );
        assert_eq!(document.accepts("/properties/n", &json!(4)), Some(false));
        assert_eq!(document.accepts("/properties/n", &json!(2)), Some(true));
    }
}
