"""Validates `paddock tools` output with the jsonschema package.

usage: python3 validate_definitions.py openai|mcp FILE
- openai: an array of OpenAI function-calling tool definitions;
- mcp: an MCP tools/list result (ListToolsResult, MCP 2025-11-25 / 2026-07-28 schema subset).
Every input schema must itself be a valid JSON Schema (draft 2020-12 metaschema).
Exit 0 when valid; else 1 with the first problem.
"""
import json
import sys

import jsonschema
from jsonschema import Draft202012Validator

OBJECT_SCHEMA = {
    "type": "object",
    "required": ["type"],
    "properties": {
        "type": {"const": "object"},
        "properties": {"type": "object", "additionalProperties": {"type": "object"}},
        "required": {"type": "array", "items": {"type": "string"}},
    },
}

OPENAI = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["type", "function"],
        "additionalProperties": False,
        "properties": {
            "type": {"const": "function"},
            "function": {
                "type": "object",
                "required": ["name", "parameters"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"},
                    "description": {"type": "string"},
                    "parameters": OBJECT_SCHEMA,
                    "strict": {"type": "boolean"},
                },
            },
        },
    },
}

MCP_TOOL = {
    "type": "object",
    "required": ["name", "inputSchema"],
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 128,
                 "pattern": "^[A-Za-z0-9_.-]+$"},
        "title": {"type": "string"},
        "description": {"type": "string"},
        "inputSchema": OBJECT_SCHEMA,
        "outputSchema": OBJECT_SCHEMA,
        "annotations": {"type": "object"},
        "_meta": {"type": "object"},
        "icons": {"type": "array"},
    },
}

MCP = {
    "type": "object",
    "required": ["tools"],
    "properties": {
        "tools": {"type": "array", "items": MCP_TOOL},
        "nextCursor": {"type": "string"},
        "_meta": {"type": "object"},
    },
}


def main():
    kind, path = sys.argv[1], sys.argv[2]
    with open(path) as f:
        document = json.load(f)
    schema = {"openai": OPENAI, "mcp": MCP}[kind]
    try:
        Draft202012Validator(schema).validate(document)
        tools = document if kind == "openai" else document["tools"]
        for tool in tools:
            inner = tool["function"]["parameters"] if kind == "openai" else tool["inputSchema"]
            Draft202012Validator.check_schema(inner)
    except jsonschema.exceptions.ValidationError as err:
        print(f"invalid {kind} definitions: {err.message} at {list(err.absolute_path)}")
        return 1
    except jsonschema.exceptions.SchemaError as err:
        print(f"an input schema is not valid JSON Schema: {err.message}")
        return 1
    print(f"{len(tools)} {kind} tool definitions valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
