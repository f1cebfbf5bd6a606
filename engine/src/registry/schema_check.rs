//! Refusing tools whose input schema is not a JSON Schema a model (or our checker) can use.

use serde_json::Value;

const TYPES: &[&str] = &[
    "string", "number", "integer", "boolean", "array", "object", "null",
];

/// Problems with a tool's input schema; empty when it is usable.
pub fn problems(schema: &Value) -> Vec<String> {
    let mut found = Vec::new();
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        found.push("the input schema must be an object schema (\"type\": \"object\")".to_owned());
    }
    walk(schema, "", &mut found);
    found
}

fn walk(schema: &Value, path: &str, found: &mut Vec<String>) {
    let at = if path.is_empty() {
        "schema".to_owned()
    } else {
        format!("schema at {path}")
    };
    let Some(object) = schema.as_object() else {
        found.push(format!(
            "{at} is {} rather than an object",
            super::json_kind(schema)
        ));
        return;
    };
    match object.get("type") {
        None => {}
        Some(Value::String(t)) if TYPES.contains(&t.as_str()) => {}
        Some(Value::Array(ts))
            if ts
                .iter()
                .all(|t| t.as_str().is_some_and(|t| TYPES.contains(&t))) => {}
        Some(other) => found.push(format!("{at}: \"type\" {other} is not a JSON Schema type")),
    }
    if let Some(props) = object.get("properties") {
        match props.as_object() {
            Some(props) => {
                for (name, prop) in props {
                    walk(prop, &format!("{path}/properties/{name}"), found);
                }
            }
            None => found.push(format!("{at}: \"properties\" must be an object")),
        }
    }
    if let Some(required) = object.get("required")
        && !required
            .as_array()
            .is_some_and(|r| r.iter().all(Value::is_string))
    {
        found.push(format!("{at}: \"required\" must be an array of strings"));
    }
    if let Some(items) = object.get("items") {
        walk(items, &format!("{path}/items"), found);
    }
    if let Some(e) = object.get("enum")
        && e.as_array().is_none_or(|a| a.is_empty())
    {
        found.push(format!("{at}: \"enum\" must be a non-empty array"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn good_schemas_pass_and_bad_ones_are_described() {
        assert!(
            problems(&json!({"type": "object", "properties": {"a": {"type": ["string", "null"]}}}))
                .is_empty()
        );
        assert!(!problems(&json!({"type": "string"})).is_empty());
        assert!(
            problems(&json!({"type": "object", "properties": {"a": {"type": "text"}}}))[0]
                .contains("/properties/a")
        );
        assert!(!problems(&json!({"type": "object", "required": "a"})).is_empty());
        assert!(!problems(&json!({"type": "object", "properties": []})).is_empty());
    }
}
