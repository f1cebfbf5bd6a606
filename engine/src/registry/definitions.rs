//! Tool definitions as the model sees them: OpenAI function definitions, an MCP `tools/list`
//! result, and one-line Python signatures (the list in `run_tools_script`'s description).

use serde_json::{Map, Value, json};

use super::{ToolSpec, python_identifier};

/// Cap on the signature list inside `run_tools_script`'s description.
pub const SIGNATURES_CAP_CHARS: usize = 6000;

/// `[{"type": "function", "function": {name, description, parameters}}]`
pub fn openai(specs: &[ToolSpec]) -> Value {
    Value::Array(
        specs
            .iter()
            .map(|s| {
                json!({"type": "function", "function": {
                    "name": s.name, "description": s.description, "parameters": s.input_schema}})
            })
            .collect(),
    )
}

/// `{"tools": [{name, title?, description, inputSchema}]}`
pub fn mcp(specs: &[ToolSpec]) -> Value {
    let tools: Vec<Value> = specs
        .iter()
        .map(|s| {
            let mut tool = Map::new();
            tool.insert("name".into(), json!(s.name));
            if let Some(label) = &s.label {
                tool.insert("title".into(), json!(label));
            }
            tool.insert("description".into(), json!(s.description));
            tool.insert("inputSchema".into(), s.input_schema.clone());
            Value::Object(tool)
        })
        .collect();
    json!({ "tools": tools })
}

/// `async def name(*, a: str, b: int = 5) -> Any  # first line of the description`
pub fn signature(spec: &ToolSpec) -> String {
    let schema = &spec.input_schema;
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut params: Vec<String> = Vec::new();
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        // Required first (Python needs it; it also reads better), each group in schema order.
        let ordered = props
            .iter()
            .filter(|(n, _)| required.contains(&n.as_str()))
            .chain(
                props
                    .iter()
                    .filter(|(n, _)| !required.contains(&n.as_str())),
            );
        for (name, prop) in ordered {
            let ty = python_type(prop, 0);
            if required.contains(&name.as_str()) {
                params.push(format!("{name}: {ty}"));
            } else {
                let default = prop
                    .get("default")
                    .map_or("None".to_owned(), python_literal);
                let nullable = ty == "None" || ty.ends_with("| None") || ty.starts_with("None |");
                let ty = if default == "None" && !nullable {
                    format!("{ty} | None")
                } else {
                    ty
                };
                params.push(format!("{name}: {ty} = {default}"));
            }
        }
    }
    let args = if params.is_empty() {
        String::new()
    } else {
        format!("*, {}", params.join(", "))
    };
    let summary = spec.description.lines().next().unwrap_or("").trim();
    let summary: String = summary.chars().take(160).collect();
    format!(
        "async def {}({args}) -> Any  # {summary}",
        python_identifier(&spec.name)
    )
}

fn python_type(schema: &Value, depth: usize) -> String {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let literals: Vec<String> = values.iter().map(python_literal).collect();
        return format!("Literal[{}]", literals.join(", "));
    }
    if let Some(c) = schema.get("const") {
        return format!("Literal[{}]", python_literal(c));
    }
    for combinator in ["anyOf", "oneOf"] {
        if let Some(options) = schema.get(combinator).and_then(Value::as_array) {
            let types: Vec<String> = options.iter().map(|o| python_type(o, depth)).collect();
            return types.join(" | ");
        }
    }
    match schema.get("type") {
        Some(Value::Array(types)) => types
            .iter()
            .map(|t| python_type(&json!({"type": t}), depth))
            .collect::<Vec<_>>()
            .join(" | "),
        Some(Value::String(t)) => match t.as_str() {
            "string" => "str".into(),
            "integer" => "int".into(),
            "number" => "float".into(),
            "boolean" => "bool".into(),
            "null" => "None".into(),
            "array" => match schema.get("items") {
                Some(items) => format!("list[{}]", python_type(items, depth + 1)),
                None => "list".into(),
            },
            "object" => object_type(schema, depth),
            _ => "Any".into(),
        },
        _ => "Any".into(),
    }
}

/// Objects with known properties read as `{"a": int, "b"?: str}`; deep ones as `dict`.
fn object_type(schema: &Value, depth: usize) -> String {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return "dict".into();
    };
    if depth >= 2 || props.is_empty() {
        return "dict".into();
    }
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let fields: Vec<String> = props
        .iter()
        .map(|(name, prop)| {
            let optional = if required.contains(&name.as_str()) {
                ""
            } else {
                "?"
            };
            format!("\"{name}\"{optional}: {}", python_type(prop, depth + 1))
        })
        .collect();
    format!("{{{}}}", fields.join(", "))
}

fn python_literal(value: &Value) -> String {
    match value {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// The signature list: stable order (by name), capped, naming how many were left out.
pub fn signature_list(specs: &[ToolSpec], cap: usize) -> String {
    let mut sorted: Vec<&ToolSpec> = specs.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = String::new();
    for (i, spec) in sorted.iter().enumerate() {
        let line = signature(spec);
        let left = sorted.len() - i;
        let note = format!("# ... and {left} more tools not listed (the list is capped)\n");
        if out.len() + line.len() + 1 + note.len() > cap {
            out.push_str(&note);
            return out;
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn spec(schema: Value) -> ToolSpec {
        ToolSpec::new("my-tool.v2", "demo", "Does a thing.\nMore text.", schema)
    }

    #[test]
    fn signatures_show_types_defaults_literals_and_nested_objects() {
        let s = signature(&spec(json!({
            "type": "object",
            "properties": {
                "mode": {"enum": ["fast", "slow"], "default": "fast"},
                "query": {"type": "string"},
                "limit": {"type": "integer", "default": 10},
                "filters": {"type": "object", "properties": {"tag": {"type": "string"}, "min": {"type": "number"}}, "required": ["tag"]},
                "ids": {"type": "array", "items": {"type": "integer"}},
                "note": {"type": ["string", "null"]}
            },
            "required": ["query"]
        })));
        assert_eq!(
            s,
            "async def my_tool_v2(*, query: str, mode: Literal[\"fast\", \"slow\"] = \"fast\", \
             limit: int = 10, filters: {\"tag\": str, \"min\"?: float} | None = None, \
             ids: list[int] | None = None, note: str | None = None) -> Any  # Does a thing."
        );
    }

    #[test]
    fn no_arguments() {
        assert_eq!(
            signature(&spec(json!({"type": "object"}))),
            "async def my_tool_v2() -> Any  # Does a thing."
        );
    }

    #[test]
    fn the_list_is_capped_and_says_how_many_were_left_out() {
        let specs: Vec<ToolSpec> = (0..500)
            .map(|i| {
                ToolSpec::new(
                    format!("tool_{i:03}"),
                    "t",
                    "A tool with a fairly long description line",
                    json!({"type": "object", "properties": {"x": {"type": "string"}}}),
                )
            })
            .collect();
        let list = signature_list(&specs, SIGNATURES_CAP_CHARS);
        assert!(list.len() <= SIGNATURES_CAP_CHARS, "{}", list.len());
        let shown = list.lines().filter(|l| l.starts_with("async def")).count();
        assert!(
            list.ends_with(&format!(
                "# ... and {} more tools not listed (the list is capped)\n",
                500 - shown
            )),
            "{list}"
        );
        assert!(
            list.lines()
                .next()
                .unwrap()
                .starts_with("async def tool_000")
        );
    }
}
