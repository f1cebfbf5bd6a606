"""smolagents: `PaddockExecutor`, a `PythonExecutor` for `CodeAgent(executor=...)`.

```python
from smolagents import CodeAgent
from paddock.integrations.smolagents import PaddockExecutor

agent = CodeAgent(tools=[...], model=model, executor=PaddockExecutor())
```

Two modes (DESIGN.md section 9):

- `mode="codemode"` (the default): the agent's code runs in Paddock's code mode (RustPython in
  a confined, pre-forked worker: no files, no network, no processes; wall-clock, memory, output
  and tool-call caps), in a notebook of a session of its own, so names last from one step to
  the next. The agent's tools stay on the host and are called back from the sandbox, as
  Paddock's host tools: `lookup("paris")` (positionally in the order of the tool's `inputs`, or
  by keyword, without `await`) is a real call of the `Tool` object in this process. Nothing of
  the tools' source is shipped into the sandbox, so a tool may hold credentials, clients or
  state the sandbox never sees. `final_answer(value)` calls the agent's `final_answer` tool and
  ends the step with `is_final_answer=True`.
- `mode="python"` (with `backend=`): the code runs in a long-lived CPython context of a Paddock
  session on that backend (the sandboxed local default, docker, ssh, a Slurm node...), with that
  environment's packages; the tools' source is shipped in, as smolagents' own remote executors
  (E2B, Docker, Modal) do, so tools must be self-contained.

Mapping:

- `send_tools(tools)` -> codemode: `engine.add_tools` (host tools, `inputs` as their JSON
  schema, in order); tools already added keep their name and take the new object. python:
  smolagents' `RemotePythonExecutor.send_tools` (the tools' definitions run in the context;
  packages they require that the environment lacks are pip-installed only with
  `pip_install=True`, else named in a warning).
- `send_variables(variables)` -> codemode: `session.set_variables` (JSON values; anything else
  is a `TypeError` naming the variable). python: smolagents' own safe serializer.
- `__call__(code)` -> `CodeOutput(output, logs, is_final_answer)`: `output` is the value of the
  code's last expression (codemode: as JSON data; python: the main result's JSON or text, a
  PNG as a PIL image when PIL is installed), `logs` what it printed. A failing script raises
  `PaddockExecutionError` (an `AgentError` is not used: it needs smolagents' logger), whose text
  is the printed output, the error and the traceback: `CodeAgent` turns it into an error
  observation for the model. `state["_print_outputs"]` holds the failing step's printed output,
  which `CodeAgent` keeps in the step's observations.
- `cleanup()` (`CodeAgent.cleanup()` calls it; so does the end of a `with` block) closes the Paddock session
  and an engine the executor started. The executor is usable again afterwards: the next call
  starts a new session (empty notebook).

Not supported: managed agents (smolagents refuses them with any remote executor); in codemode,
imports outside Paddock's sandbox (numpy, PIL: use `mode="python"`), pickle of variables
(`allow_pickle`), and a tool returning something other than JSON data (an image).
"""

from __future__ import annotations

import json
import threading
from typing import Any, Dict, Iterable, List, Optional

try:
    from smolagents.local_python_executor import CodeOutput
    from smolagents.monitoring import AgentLogger, LogLevel
    from smolagents.remote_executors import RemotePythonExecutor
    from smolagents.default_tools import FinalAnswerTool
    from smolagents.tools import Tool
except ImportError as _err:  # pragma: no cover - depends on the installation
    raise ImportError(
        "paddock.integrations.smolagents needs smolagents (1.26.0): pip install 'paddock[smolagents]'"
    ) from _err

from .._engine import Engine, HostTool
from .._errors import PaddockError
from .._session import Session
from . import _common

__all__ = ["PaddockExecutor", "PaddockExecutionError"]

_MODES = ("codemode", "python")
# smolagents' input types as JSON schema types; "any", "image", "audio" take anything.
_JSON_TYPES = {
    "string": "string",
    "boolean": "boolean",
    "integer": "integer",
    "number": "number",
    "array": "array",
    "object": "object",
    "null": "null",
}


# mode="python": smolagents' stock `final_answer` in the context. Its exception carries the
# answer as smolagents' remote executors encode it ("safe:" + JSON; a value JSON cannot hold
# goes as its str()).
_FINAL_ANSWER_SOURCE = """
class FinalAnswerException(BaseException):
    def __init__(self, value):
        super().__init__(value)
        self.value = value


def final_answer(answer):
    import json as _json
    try:
        text = _json.dumps(answer)
    except (TypeError, ValueError):
        text = _json.dumps(str(answer))
    raise FinalAnswerException("safe:" + text)
"""


class PaddockExecutionError(PaddockError):
    """The agent's code failed in Paddock; the text is what the model should see."""


def input_schema(tool: Tool) -> Dict[str, Any]:
    """A smolagents tool's `inputs` as a JSON schema whose `properties` keep their order (the
    order positional calls bind in)."""
    properties: Dict[str, Any] = {}
    required: List[str] = []
    for name, spec in (tool.inputs or {}).items():
        prop: Dict[str, Any] = {}
        if spec.get("description"):
            prop["description"] = str(spec["description"])
        kinds = spec.get("type")
        kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
        if kinds and all(k in _JSON_TYPES for k in kinds) and not spec.get("nullable"):
            prop["type"] = _JSON_TYPES[kinds[0]] if len(kinds) == 1 else [_JSON_TYPES[k] for k in kinds]
        properties[name] = prop
        if not spec.get("nullable"):
            required.append(name)
    schema: Dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


class _ToolTable:
    """The smolagents tools an engine calls back, by name: an executor sending a tool of a name
    already added replaces the object behind it (an engine cannot drop a tool)."""

    def __init__(self) -> None:
        self.tools: Dict[str, Tool] = {}
        self.lock = threading.Lock()

    def host_tool(self, name: str, tool: Tool) -> HostTool:
        def call(**kwargs: Any) -> Any:
            with self.lock:
                current = self.tools[name]
            return current(**kwargs)

        return HostTool(call, name=name, description=str(tool.description or name), input_schema=input_schema(tool))


# One table per engine, shared by the executors that use it.
_TABLES: "Dict[int, _ToolTable]" = {}
_TABLES_LOCK = threading.Lock()


def _table_of(engine: Engine) -> _ToolTable:
    with _TABLES_LOCK:
        table = _TABLES.get(id(engine))
        if table is None:
            table = _TABLES[id(engine)] = _ToolTable()
        return table


class PaddockExecutor(RemotePythonExecutor):
    """A smolagents `PythonExecutor` running the agent's code in Paddock (see the module's
    documentation for the two modes)."""

    def __init__(
        self,
        engine: Optional[Engine] = None,
        *,
        policy: Any = None,
        mode: str = "codemode",
        backend: Optional[str] = None,
        logger: Optional[AgentLogger] = None,
        additional_imports: Iterable[str] = (),
        pip_install: bool = False,
    ) -> None:
        _common.check_engine_args(engine, policy)
        if mode not in _MODES:
            raise ValueError(f"mode must be 'codemode' or 'python', got {mode!r}")
        if mode == "codemode" and backend is not None:
            raise ValueError(
                "backend= applies to mode='python' (code mode runs in Paddock's own sandbox); "
                "drop it, or pass mode='python'"
            )
        # No I/O here: RemotePythonExecutor's __init__ only logs.
        super().__init__(list(additional_imports), logger or AgentLogger(level=LogLevel.OFF), allow_pickle=False)
        self.mode = mode
        self.backend = backend
        self._pip_install = pip_install
        self._given_engine = engine
        self._policy = policy
        self._engine: Optional[Engine] = engine
        self._session: Optional[Session] = None
        self._start_lock = threading.Lock()
        self._context = "smolagents"
        #: What `CodeAgent` reads after a failed step: its printed output.
        self.state: Dict[str, Any] = {"_print_outputs": ""}

    # ------------------------------------------------------------------ lifecycle

    @property
    def session(self) -> Session:
        """The Paddock session the code runs in (started on first use)."""
        with self._start_lock:
            if self._session is None:
                if self._engine is None:
                    self._engine = Engine(self._policy, keep_state=self.mode == "codemode")
                self._session = self._engine.session(backend=self.backend)
            return self._session

    @property
    def engine(self) -> Engine:
        self.session  # noqa: B018 - starts it
        assert self._engine is not None
        return self._engine

    def cleanup(self) -> None:
        """Closes the session and an engine this executor started."""
        with self._start_lock:
            session, self._session = self._session, None
            engine = self._engine if self._given_engine is None else None
            if self._given_engine is None:
                self._engine = None
        if session is not None:
            session.close()
        if engine is not None:
            with _TABLES_LOCK:
                _TABLES.pop(id(engine), None)
            engine.close()

    def __enter__(self) -> "PaddockExecutor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cleanup()

    # ------------------------------------------------------------------ PythonExecutor

    def send_tools(self, tools: Dict[str, Tool]) -> None:
        if self.mode == "python":
            final = tools.get("final_answer")
            if type(final) is FinalAnswerTool:
                # smolagents' own patched final_answer imports numpy and PIL at the top of its
                # shipped source; the stock tool needs neither, so it gets a plain definition.
                tools = {name: tool for name, tool in tools.items() if name != "final_answer"}
                self.run_code_raise_errors(_FINAL_ANSWER_SOURCE)
            if tools:
                super().send_tools(tools)
            return
        engine = self.engine
        table = _table_of(engine)
        new: List[HostTool] = []
        with table.lock:
            for name, tool in tools.items():
                if name not in table.tools:
                    new.append(table.host_tool(name, tool))
                table.tools[name] = tool
        if new:
            try:
                engine.add_tools_sync(new)
            except ValueError:
                with table.lock:
                    for host in new:
                        table.tools.pop(host.name, None)
                raise

    def send_variables(self, variables: Dict[str, Any]) -> None:
        if not variables:
            return
        if self.mode == "python":
            super().send_variables(variables)
            return
        self.session.set_variables(variables)

    def __call__(self, code_action: str) -> CodeOutput:
        if self.mode == "python":
            return self.run_code_raise_errors(code_action)
        answer = self.session.run_tools_script(code_action)
        logs = str(answer.get("output") or "")
        self.state["_print_outputs"] = logs
        if "notebook" not in answer:
            raise PaddockError(
                "PaddockExecutor needs an engine that keeps state between scripts: "
                "paddock.Engine(..., keep_state=True), or let the executor start its own"
            )
        if not answer.get("ok"):
            raise PaddockExecutionError(_failure_text(logs, answer))
        return CodeOutput(output=answer.get("result"), logs=logs, is_final_answer=bool(answer.get("final_answer")))

    # ------------------------------------------------------------------ mode="python"

    def run_code_raise_errors(self, code: str) -> CodeOutput:
        execution = self.session.run_code(code, context=self._context)
        logs = execution.stdout + execution.stderr
        self.state["_print_outputs"] = logs
        if execution.error is not None:
            if execution.error.name == RemotePythonExecutor.FINAL_ANSWER_EXCEPTION:
                value = self._deserialize_final_answer(execution.error.value, self.allow_pickle)
                return CodeOutput(output=value, logs=logs, is_final_answer=True)
            raise PaddockExecutionError(
                f"{logs}\nExecuting code yielded an error:\n{execution.error.name}\n"
                f"{execution.error.value}\n{execution.error.traceback}"
            )
        return CodeOutput(output=_main_result(execution.results), logs=logs, is_final_answer=False)

    def install_packages(self, additional_imports: List[str]) -> List[str]:
        """The packages smolagents asks for (`additional_imports`, tools' `requirements`) that
        the environment lacks are pip-installed only with `pip_install=True`: reaching a package
        index is the operator's call (Paddock's sandbox has no network by default). Without it,
        missing ones are named in a warning and the code runs without them."""
        if not additional_imports:
            return []
        if self.mode == "codemode":
            raise ValueError(
                "packages cannot be installed into Paddock's code mode; "
                f"use mode='python' for {', '.join(additional_imports)}"
            )
        check = (
            "import importlib.metadata as _m\n"
            "def _missing(names):\n"
            "    out = []\n"
            "    for n in names:\n"
            "        try:\n"
            "            _m.version(n)\n"
            "        except _m.PackageNotFoundError:\n"
            "            out.append(n)\n"
            "    return out\n"
            f"print(','.join(_missing({list(additional_imports)!r})))"
        )
        execution = self.session.run_code(check, context=self._context)
        missing = [n for n in execution.stdout.strip().split(",") if n]
        if not missing:
            return list(additional_imports)
        if not self._pip_install:
            self.logger.log(
                f"Paddock: not installing {', '.join(missing)} (missing from the environment); "
                "pass PaddockExecutor(pip_install=True) to pip-install them",
                level=LogLevel.INFO,
            )
            return [n for n in additional_imports if n not in missing]
        result = self.session.run("python3 -m pip install --quiet " + " ".join(_quoted(missing)), timeout=600)
        if result.exit_code != 0:
            raise PaddockError(f"pip install {' '.join(missing)} failed: {result.stderr or result.stdout}")
        return list(additional_imports)


def _quoted(words: Iterable[str]) -> List[str]:
    import shlex

    return [shlex.quote(w) for w in words]


def _failure_text(logs: str, answer: Dict[str, Any]) -> str:
    parts = []
    if logs:
        parts.append(logs.rstrip("\n"))
    parts.append(f"Code execution failed: {answer.get('error')}")
    if answer.get("traceback"):
        parts.append(str(answer["traceback"]))
    if answer.get("hint"):
        parts.append(str(answer["hint"]))
    return "\n".join(parts)


def _main_result(results: List[Dict[str, Any]]) -> Any:
    for bundle in results:
        if not bundle.get("is_main_result"):
            continue
        png = bundle.get("image/png")
        if isinstance(png, str):
            try:
                import base64
                import io

                from PIL import Image

                return Image.open(io.BytesIO(base64.b64decode(png)))
            except ImportError:
                return png
        if "application/json" in bundle:
            data = bundle["application/json"]
            return json.loads(data) if isinstance(data, str) else data
        return bundle.get("text/plain")
    return None

