"""JSON schemas for host tools, from a callable's signature, type hints and docstring."""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import inspect
import re
import types
import typing
from typing import Any, Callable, Dict, List, Optional, Tuple

try:  # pydantic is optional: models as parameters when it is installed
    import pydantic as _pydantic
except ImportError:  # pragma: no cover - depends on the environment
    _pydantic = None

_NONE_TYPE = type(None)
_UNION_TYPES: Tuple[Any, ...] = (typing.Union,)
if hasattr(types, "UnionType"):
    _UNION_TYPES = (typing.Union, types.UnionType)


def is_pydantic_model(tp: Any) -> bool:
    return (
        _pydantic is not None
        and isinstance(tp, type)
        and issubclass(tp, _pydantic.BaseModel)
    )


def type_schema(tp: Any) -> Dict[str, Any]:
    """The JSON schema of one annotation; `{}` (anything) for what has no JSON form."""
    if tp is inspect.Parameter.empty or tp is Any:
        return {}
    if tp is None or tp is _NONE_TYPE:
        return {"type": "null"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if tp is str:
        return {"type": "string"}
    if tp in (list, tuple, set, frozenset):
        return {"type": "array"}
    if tp is dict:
        return {"type": "object"}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"enum": [member.value for member in tp]}
    if is_pydantic_model(tp):
        return tp.model_json_schema()
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = typing.get_type_hints(tp)
        props = {f.name: type_schema(hints.get(f.name, Any)) for f in dataclasses.fields(tp)}
        required = [
            f.name
            for f in dataclasses.fields(tp)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        return {"type": "object", "properties": props, "required": required}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return type_schema(args[0])
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in _UNION_TYPES:
        members = [a for a in args if a is not _NONE_TYPE]
        nullable = len(members) != len(args)
        if len(members) == 1:
            inner = dict(type_schema(members[0]))
        else:
            inner = {"anyOf": [type_schema(m) for m in members]}
            simple = [s.get("type") for s in inner["anyOf"]]
            if all(isinstance(t, str) and len(s) == 1 for t, s in zip(simple, inner["anyOf"])):
                inner = {"type": simple}
        if nullable:
            kind = inner.get("type")
            if isinstance(kind, str):
                inner["type"] = [kind, "null"]
            elif isinstance(kind, list):
                inner["type"] = [*kind, "null"]
            elif "anyOf" in inner:
                inner["anyOf"].append({"type": "null"})
        return inner
    if origin in (list, set, frozenset, collections.abc.Sequence, collections.abc.Iterable):
        schema: Dict[str, Any] = {"type": "array"}
        if args:
            schema["items"] = type_schema(args[0])
        return schema
    if origin is tuple:
        schema = {"type": "array"}
        if args and not (len(args) == 2 and args[1] is Ellipsis):
            schema["minItems"] = schema["maxItems"] = len(args)
        elif args:
            schema["items"] = type_schema(args[0])
        return schema
    if origin in (dict, collections.abc.Mapping):
        schema = {"type": "object"}
        if len(args) == 2:
            value = type_schema(args[1])
            if value:
                schema["additionalProperties"] = value
        return schema
    return {}


_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Params|Returns?|Raises|Yields|Examples?)\s*:?\s*$")
_PARAM_LINE = re.compile(r"^\s*\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_PARAM = re.compile(r"^\s*:param\s+(?:[\w\[\], ]+\s+)?(\w+)\s*:\s*(.*)$")


def parse_docstring(doc: Optional[str]) -> Tuple[str, Dict[str, str]]:
    """(summary, {parameter: description}) from a Google-style, NumPy-style or Sphinx docstring."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: List[str] = []
    params: Dict[str, str] = {}
    section = None
    current = None
    numpy_underline = re.compile(r"^\s*-{3,}\s*$")
    for i, line in enumerate(lines):
        sphinx = _SPHINX_PARAM.match(line)
        if sphinx:
            params[sphinx.group(1)] = sphinx.group(2).strip()
            current, section = sphinx.group(1), "params"
            continue
        if line.strip().startswith(":"):
            section = "other"
            continue
        head = _SECTION.match(line)
        next_is_rule = i + 1 < len(lines) and numpy_underline.match(lines[i + 1])
        if head:
            section = "params" if head.group(1).startswith("Param") or head.group(1).startswith("Arg") else "other"
            current = None
            continue
        if numpy_underline.match(line):
            continue
        if next_is_rule:
            section = "params" if line.strip().lower().startswith("param") else "other"
            continue
        if section is None:
            summary.append(line)
        elif section == "params":
            match = _PARAM_LINE.match(line)
            indent = len(line) - len(line.lstrip())
            if match and (current is None or indent <= params.get("__indent__", indent)):
                current = match.group(1)
                params[current] = match.group(2).strip()
                params["__indent__"] = indent  # type: ignore[assignment]
            elif current and line.strip():
                params[current] = (params[current] + " " + line.strip()).strip()
    params.pop("__indent__", None)
    text = "\n".join(summary).strip()
    return text, params


def _resolve(func: Callable[..., Any], annotation: Any) -> Any:
    """A string annotation evaluated in the function's module, else Any."""
    if not isinstance(annotation, str):
        return annotation
    try:
        return eval(annotation, getattr(func, "__globals__", {}), {})  # noqa: S307 - the program's own annotations
    except Exception:
        return Any


def signature_schema(func: Callable[..., Any]) -> Tuple[Dict[str, Any], str, Dict[str, Any]]:
    """(input schema, description, {parameter: pydantic model}) of `func`."""
    signature = inspect.signature(func)
    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except Exception:  # a forward reference that does not resolve: each parameter on its own
        hints = {name: _resolve(func, p.annotation) for name, p in signature.parameters.items()}
    summary, described = parse_docstring(inspect.getdoc(func))
    properties: Dict[str, Any] = {}
    required: List[str] = []
    models: Dict[str, Any] = {}
    for name, param in signature.parameters.items():
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise TypeError(
                f"host tool {func.__name__!r}: parameter {name!r} is positional-only; "
                "scripts call tools with keyword arguments only"
            )
        annotation = hints.get(name, param.annotation)
        schema = dict(type_schema(annotation))
        if is_pydantic_model(annotation):
            models[name] = annotation
        if name in described and described[name]:
            schema["description"] = described[name]
        if param.default is inspect.Parameter.empty:
            required.append(name)
        else:
            try:
                import json

                json.dumps(param.default)
                schema["default"] = param.default
            except (TypeError, ValueError):
                pass
        properties[name] = schema
    accepts_more = any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values()
    )
    input_schema: Dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        input_schema["required"] = required
    if not accepts_more:
        input_schema["additionalProperties"] = False
    return input_schema, summary, models
