//! Checking a call's arguments against the tool's JSON Schema before the tool runs, so a
//! rejected argument names the field and what was expected.
//!
//! Covers the keywords tool schemas use: `type` (one or several), `properties`, `required`,
//! `additionalProperties: false`, `enum`, `const`, `minimum`/`maximum`, `minLength`/`maxLength`,
//! `minItems`/`maxItems` and `items`.

use serde_json::Value;

use super::json_kind;

/// Returns the first violation as "field `a.b`: expected ..., got ...".
pub fn check(schema: &Value, args: &Value) -> Result<(), String> {
    check_at(schema, args, "")
}

fn field(path: &str) -> String {
    if path.is_empty() {
        "arguments".to_owned()
    } else {
        format!("field `{path}`")
    }
}

fn type_matches(ty: &str, value: &Value) -> bool {
    match ty {
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => {
            value.as_i64().is_some()
                || value.as_u64().is_some()
                || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "null" => value.is_null(),
        _ => true,
    }
}

fn shown(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 40 {
        format!(
            "{} ({}...)",
            json_kind(value),
            text.chars().take(37).collect::<String>()
        )
    } else {
        format!("{} ({text})", json_kind(value))
    }
}

fn check_at(schema: &Value, value: &Value, path: &str) -> Result<(), String> {
    let Some(schema) = schema.as_object() else {
        return Ok(());
    };
    if let Some(ty) = schema.get("type") {
        let types: Vec<&str> = match ty {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !types.is_empty() && !types.iter().any(|t| type_matches(t, value)) {
            return Err(format!(
                "{}: expected {}, got {}",
                field(path),
                types.join(" or "),
                shown(value)
            ));
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let options: Vec<String> = allowed.iter().map(Value::to_string).collect();
        return Err(format!(
            "{}: expected one of {}, got {}",
            field(path),
            options.join(", "),
            shown(value)
        ));
    }
    if let Some(constant) = schema.get("const")
        && constant != value
    {
        return Err(format!(
            "{}: expected {constant}, got {}",
            field(path),
            shown(value)
        ));
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            return Err(format!("{}: must be at least {min}, got {n}", field(path)));
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            return Err(format!("{}: must be at most {max}, got {n}", field(path)));
        }
    }
    if let Some(s) = value.as_str() {
        let len = s.chars().count() as u64;
        if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
            && len < min
        {
            return Err(format!(
                "{}: must be at least {min} characters long",
                field(path)
            ));
        }
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
            && len > max
        {
            return Err(format!(
                "{}: must be at most {max} characters long, got {len}",
                field(path)
            ));
        }
    }
    if let Some(items) = value.as_array() {
        let len = items.len() as u64;
        if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
            && len < min
        {
            return Err(format!(
                "{}: needs at least {min} items, got {len}",
                field(path)
            ));
        }
        if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
            && len > max
        {
            return Err(format!(
                "{}: takes at most {max} items, got {len}",
                field(path)
            ));
        }
        if let Some(item_schema) = schema.get("items") {
            for (i, item) in items.iter().enumerate() {
                check_at(item_schema, item, &format!("{path}[{i}]"))?;
            }
        }
    }
    if let Some(object) = value.as_object() {
        let properties = schema.get("properties").and_then(Value::as_object);
        if let Some(required) = schema.get("required").and_then(Value::as_array) {
            for name in required.iter().filter_map(Value::as_str) {
                if !object.contains_key(name) {
                    return Err(format!("{}: is required", field(&join(path, name))));
                }
            }
        }
        for (name, item) in object {
            match properties.and_then(|p| p.get(name)) {
                Some(prop_schema) => check_at(prop_schema, item, &join(path, name))?,
                None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    let known: Vec<&String> =
                        properties.map(|p| p.keys().collect()).unwrap_or_default();
                    let known = if known.is_empty() {
                        "it takes no arguments".to_owned()
                    } else {
                        format!(
                            "known: {}",
                            known
                                .iter()
                                .map(|k| k.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    };
                    return Err(format!(
                        "{}: unknown argument ({known})",
                        field(&join(path, name))
                    ));
                }
                None => {}
            }
        }
    }
    Ok(())
}

fn join(path: &str, name: &str) -> String {
    // An empty key is shown as `""`, not as the arguments object itself.
    let name = if name.is_empty() { "\"\"" } else { name };
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

/// Size of `value` serialised as JSON, without building the string.
pub fn serialized_len(value: &Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "format": {"type": "string", "maxLength": 5},
                "mode": {"enum": ["a", "b"]},
                "n": {"type": "integer", "minimum": 1},
                "tags": {"type": "array", "items": {"type": "string"}},
                "inner": {"type": "object", "properties": {"x": {"type": "boolean"}}, "required": ["x"]}
            },
            "required": ["n"],
            "additionalProperties": false
        })
    }

    #[test]
    fn violations_name_the_field_and_the_expectation() {
        let cases = [
            (
                json!({"n": 1, "format": 5}),
                "field `format`: expected string, got a number (5)",
            ),
            (json!({}), "field `n`: is required"),
            (json!({"n": 0}), "field `n`: must be at least 1"),
            (json!({"n": 1.5}), "field `n`: expected integer"),
            (
                json!({"n": 1, "mode": "c"}),
                "field `mode`: expected one of \"a\", \"b\"",
            ),
            (
                json!({"n": 1, "tags": ["x", 2]}),
                "field `tags[1]`: expected string",
            ),
            (json!({"n": 1, "inner": {}}), "field `inner.x`: is required"),
            (
                json!({"n": 1, "colour": 1}),
                "field `colour`: unknown argument (known: format",
            ),
            (
                json!({"n": 1, "format": "toolong"}),
                "field `format`: must be at most 5 characters",
            ),
        ];
        for (args, expected) in cases {
            let err = check(&schema(), &args).unwrap_err();
            assert!(err.starts_with(expected), "{args}: {err}");
        }
        check(
            &schema(),
            &json!({"n": 2, "format": "%Y", "mode": "a", "tags": [], "inner": {"x": true}}),
        )
        .unwrap();
    }
}
