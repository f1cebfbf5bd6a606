"""`paddock.integrations.pydantic_ai.PaddockCodeMode`: pydantic-ai agent runs driven by a
`FunctionModel` (scripted `run_code` calls, no LLM) with the real `paddock` binary. The wrapped
tools run here, in the test process, called back from Paddock's code mode."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any, Dict, List, Optional, Union

import pytest

import paddock  # noqa: E402
import paddock.integrations.pydantic_ai as pai  # noqa: E402
from paddock.integrations.pydantic_ai import PaddockCodeMode  # noqa: E402
from pydantic_ai import Agent, RunContext  # noqa: E402
from pydantic_ai.capabilities import HandleDeferredToolCalls  # noqa: E402
from pydantic_ai.exceptions import ModelRetry, UserError  # noqa: E402
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, Tool, ToolDenied  # noqa: E402
from pydantic_ai.toolsets import FunctionToolset  # noqa: E402

pytestmark = pytest.mark.anyio

#: Set by a caller around its agent run; a tool called from run_code must see the caller's value.
REQUEST = contextvars.ContextVar("REQUEST", default="unset")


class Script:
    """A model that makes the scripted `run_code` calls one per turn, then answers "done"; it
    keeps every tool result it was sent and the tools it was offered."""

    def __init__(self, *calls: Union[str, Dict[str, Any]]) -> None:
        self.calls = [{"code": c} if isinstance(c, str) else c for c in calls]
        self.returns: List[ToolReturnPart] = []
        self.info: Optional[AgentInfo] = None

    def __call__(self, messages: list, info: AgentInfo) -> ModelResponse:
        self.info = info
        self.returns.extend(p for p in messages[-1].parts if isinstance(p, ToolReturnPart))
        if self.calls:
            return ModelResponse(parts=[ToolCallPart("run_code", self.calls.pop(0))])
        return ModelResponse(parts=[TextPart("done")])

    @property
    def contents(self) -> List[Any]:
        return [r.content for r in self.returns]


class Calls:
    """The wrapped tools, recording how they were called."""

    def __init__(self) -> None:
        self.seen: List[tuple] = []

    def toolset(self) -> FunctionToolset:
        def lookup(ctx: RunContext[str], city: str, unit: str = "c") -> Dict[str, Any]:
            """Weather of a city.

            Args:
                city: the city's name
                unit: c or f
            """
            self.seen.append(("lookup", city, unit, ctx.deps))
            return {"city": city, "unit": unit, "deps": ctx.deps}

        def boom(n: int) -> int:
            """Always fails."""
            self.seen.append(("boom", n))
            raise ValueError(f"bad {n}")

        def picky(n: int) -> int:
            """Wants a positive number."""
            if n <= 0:
                raise ModelRetry("n must be positive")
            return n * 10

        return FunctionToolset([lookup, boom, picky])


@pytest.fixture
async def adapters() -> Any:
    made: List[PaddockCodeMode] = []

    def make(*toolsets: Any, **kwargs: Any) -> PaddockCodeMode:
        adapter = PaddockCodeMode(*toolsets, **kwargs)
        made.append(adapter)
        return adapter

    yield make
    for adapter in made:
        await adapter.close()


async def run(adapter: PaddockCodeMode, script: Script, deps: str = "D", **kwargs: Any) -> Any:
    agent = Agent(FunctionModel(script), toolsets=[adapter], deps_type=str, **kwargs)
    return await agent.run("go", deps=deps)


async def test_the_constructor_does_no_io_and_checks_its_arguments(engine: paddock.Engine) -> None:
    adapter = PaddockCodeMode(Calls().toolset())
    assert adapter.engine is None and adapter.session is None and adapter._shared.start is None
    with pytest.raises(ValueError, match="not both"):
        PaddockCodeMode(Calls().toolset(), engine=engine, policy="x.toml")
    with pytest.raises(TypeError, match="FunctionToolset"):
        PaddockCodeMode(lambda: 1)  # type: ignore[arg-type]
    await adapter.close()  # never started: nothing to end


async def test_one_tool_whose_description_lists_the_wrapped_tools_as_python(adapters: Any) -> None:
    def odd(values: List[int]) -> int:
        """Counts odd numbers."""
        return sum(v % 2 for v in values)

    toolset = FunctionToolset(
        [Tool(odd, name="count-odd"), Tool(lambda xs: max(xs), name="max", description="Largest.")]
    )
    script = Script("[count_odd([1, 2, 3]), count_odd(values=[5]), max_([4, 9, 2])]")
    result = await run(adapters(toolset), script)
    assert result.output == "done"
    assert script.info is not None
    (tool,) = script.info.function_tools
    assert tool.name == "run_code" and tool.sequential
    assert set(tool.parameters_json_schema["properties"]) == {"code", "restart"}
    described = tool.description or ""
    # Names that are no Python identifier, or shadow a builtin, get a Python name.
    assert "def count_odd(*, values: list[int]) -> int:" in described and "Counts odd numbers." in described
    assert "def max_(" in described and "Largest." in described
    assert script.contents == [[2, 1, 9]]


async def test_a_tool_called_positionally_and_by_keyword_gets_the_runs_context(adapters: Any) -> None:
    calls = Calls()
    script = Script(
        "p = lookup('paris')\nprint('paris is', p['city'])\np",
        "lookup(city='rome', unit='f')",
        "final_answer({'n': 1})",
    )
    await run(adapters(calls.toolset()), script, deps="run-1")
    # The tool ran here, with pydantic-ai's RunContext of this run.
    assert calls.seen == [("lookup", "paris", "c", "run-1"), ("lookup", "rome", "f", "run-1")]
    first, second, third = script.returns
    assert first.outcome == "success" and first.content == {
        "output": "paris is paris\n",
        "result": {"city": "paris", "unit": "c", "deps": "run-1"},
    }
    assert second.content == {"city": "rome", "unit": "f", "deps": "run-1"}
    # The nested calls are on the result's metadata (history only), as pydantic-ai-harness does.
    assert [c.tool_name for c in first.metadata["tool_calls"].values()] == ["lookup"]
    assert third.content == {"n": 1} and third.metadata["final_answer"] is True


async def test_parallel_calls_with_asyncio_gather_run_concurrently(adapters: Any) -> None:
    in_flight = [0, 0]

    async def slow(n: int) -> int:
        """Doubles n, slowly."""
        in_flight[0] += 1
        in_flight[1] = max(in_flight)
        await asyncio.sleep(0.3)
        in_flight[0] -= 1
        return 2 * n

    script = Script("import asyncio\nawait asyncio.gather(*[tools.slow(n=i) for i in range(4)])")
    await run(adapters(FunctionToolset([slow])), script)
    assert script.contents == [[0, 2, 4, 6]]
    assert in_flight[1] == 4  # all four at once, not one after the other


async def test_state_lasts_across_calls_in_a_run_and_restart_clears_it(adapters: Any) -> None:
    probe = "try:\n    x\n    r = 'kept'\nexcept NameError:\n    r = 'gone'\nr"
    script = Script("x = 41\ndef inc(v):\n    return v + 1", "inc(x)", probe, {"code": probe, "restart": True}, probe)
    await run(adapters(Calls().toolset()), script)
    assert script.contents == [{}, 42, "kept", "gone", "gone"]


async def test_errors_reach_the_model_which_can_fix_its_code(adapters: Any) -> None:
    calls = Calls()
    script = Script(
        "y = 1\n1/0",
        "print('before')\nboom(3)",
        "try:\n    boom(4)\nexcept ValueError as e:\n    caught = str(e)\ncaught",
        "try:\n    lookup(city=5)\nexcept ValueError as e:\n    bad = str(e)\n'city' in bad",
        "try:\n    picky(0)\nexcept RuntimeError as e:\n    retry = str(e)\n[retry, picky(2), y]",
    )
    result = await run(adapters(calls.toolset()), script)
    assert result.output == "done"
    zero, boom, caught, invalid, retry = script.returns
    assert zero.outcome == "retried"
    assert "ZeroDivisionError" in zero.content and "1/0" in zero.content and "line 2" in zero.content
    assert boom.outcome == "retried"
    assert "Printed before the error:\nbefore" in boom.content and "bad 3" in boom.content
    assert "1 tool call(s) ran before the error" in boom.content
    # A failing tool is an exception the script catches.
    assert caught.outcome == "success" and "bad 4" in caught.content
    # pydantic-ai validated the arguments (lookup takes a str) before the tool ran.
    assert invalid.content is True and ("lookup", 5, "c", "D") not in calls.seen
    # A tool's ModelRetry reaches the script too; the notebook kept `y` through the failures.
    assert "n must be positive" in retry.content[0] and retry.content[1:] == [20, 1]


async def test_classes_with_inheritance_and_generators_work(adapters: Any) -> None:
    # What Monty (pydantic-ai-harness's CodeMode) does not run: inheritance, super(), generators.
    code = """
class Shape:
    def __init__(self, name):
        self.name = name
    def area(self):
        raise NotImplementedError
    def describe(self):
        return f"{self.name}: {self.area()}"

class Square(Shape):
    def __init__(self, side):
        super().__init__("square")
        self.side = side
    def area(self):
        return self.side ** 2

class Error(ValueError):
    pass

def squares(n):
    for i in range(1, n + 1):
        yield Square(i)

def evens():
    yield from (s.area() for s in squares(6) if s.area() % 2 == 0)

try:
    raise Error("mine")
except ValueError as e:
    caught = type(e).__name__
[s.describe() for s in squares(2)] + [list(evens()), isinstance(Square(1), Shape), caught]
"""
    script = Script(code)
    await run(adapters(Calls().toolset()), script)
    assert script.contents == [["square: 1", "square: 4", [4, 16, 36], True, "Error"]]


async def test_a_tool_needing_approval_goes_through_pydantic_ais_approval_flow(adapters: Any) -> None:
    removed: List[str] = []

    def remove(path: str) -> str:
        """Removes a file."""
        removed.append(path)
        return f"removed {path}"

    def approve_tmp(ctx: RunContext[str], requests: DeferredToolRequests) -> DeferredToolResults:
        return DeferredToolResults(
            approvals={
                call.tool_call_id: True if call.args["path"].startswith("/tmp/") else ToolDenied("not outside /tmp")
                for call in requests.approvals
            }
        )

    code = (
        "ok = remove('/tmp/a')\n"
        "try:\n    remove('/etc/passwd')\n    denied = None\nexcept PermissionError as e:\n    denied = str(e)\n"
        "[ok, denied]"
    )
    toolset = FunctionToolset([Tool(remove, requires_approval=True)])
    script = Script(code)
    await run(adapters(toolset), script, capabilities=[HandleDeferredToolCalls(handler=approve_tmp)])
    assert removed == ["/tmp/a"]
    ((ok, denied),) = script.contents
    assert ok == "removed /tmp/a" and "not outside /tmp" in denied

    # Without anything to approve it, the call does not run and the script is told why.
    script = Script("try:\n    remove('/tmp/b')\nexcept PermissionError as e:\n    why = str(e)\nwhy")
    await run(adapters(toolset), script)
    assert removed == ["/tmp/a"] and "needs an approval" in script.contents[0]


async def test_concurrent_runs_keep_their_own_context_and_notebook(
    adapters: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: List[paddock.Engine] = []

    class CountedEngine(paddock.Engine):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            started.append(self)

    monkeypatch.setattr(pai, "Engine", CountedEngine)
    arrived: List[str] = []
    both = asyncio.Event()

    async def whoami(ctx: RunContext[str]) -> str:
        """The run's identity."""
        arrived.append(ctx.deps)
        if len(arrived) == 2:
            both.set()
        # Both scripts are in a host call at once: each answer must go to its own run.
        await asyncio.wait_for(both.wait(), 10)
        return f"{ctx.deps}/{REQUEST.get()}"

    async def run_as(deps: str, script: Script) -> Any:
        REQUEST.set(f"req-{deps}")  # this task's own context, as a web request's would be
        return await run(adapter, script, deps=deps)

    adapter = adapters(FunctionToolset([whoami]))
    scripts = [Script("me = whoami()\nme", "me"), Script("me = whoami()\nme", "me")]
    results = await asyncio.gather(run_as("A", scripts[0]), run_as("B", scripts[1]))
    assert [r.output for r in results] == ["done", "done"]
    # The RunContext and the caller's contextvars of each run, never the other's.
    assert scripts[0].contents == ["A/req-A", "A/req-A"] and scripts[1].contents == ["B/req-B", "B/req-B"]
    assert len(started) == 1 and adapter.engine is started[0]  # one engine, started once
    sessions = {s.returns[0].metadata["notebook"]["session"] for s in scripts}
    assert len(sessions) == 2  # a notebook per run
    for sid in sessions:  # ended with its run: its names are gone
        after = await started[0].run_tools_script("me", session=sid)
        assert not after["ok"] and "NameError" in after["error"]


async def test_an_engine_given_is_used_and_must_keep_state(adapters: Any, engine: paddock.Engine) -> None:
    async with await paddock.Engine.start(keep_state=True) as own:
        adapter = adapters(Calls().toolset(), engine=own)
        script = Script("lookup('oslo')['city']")
        await run(adapter, script)
        assert adapter.engine is own and script.contents == ["oslo"]
        await adapter.close()  # not ours to close
        assert (await own.run_tools_script("1 + 1"))["result"] == 2

    # The shared test engine has no notebooks (keep_state=False): said plainly.
    with pytest.raises(UserError, match="keep_state=True"):
        await run(adapters(Calls().toolset(), engine=engine), Script("1"))
    # A wrapped tool named like one of the engine's own (its policy's terminal): refused, named.
    clash = FunctionToolset([Tool(lambda command: command, name="terminal")])
    with pytest.raises(UserError, match="'terminal'"):
        await run(adapters(clash, engine=engine), Script("1"))


async def test_a_script_past_its_time_limit_is_stopped_and_said(adapters: Any) -> None:
    script = Script("x = 1", "while True:\n    pass", "x = 2\nx")
    await run(adapters(Calls().toolset(), max_duration=1), script)
    _, stopped, after = script.returns
    assert stopped.outcome == "retried" and "timeout" in stopped.content and "names are gone" in stopped.content
    assert after.content["result"] == 2 and "timed out" in after.content["notice"]


async def test_a_run_cancelled_during_run_code_stops_the_script(adapters: Any) -> None:
    adapter = adapters(Calls().toolset())
    script = Script("x = 1", "while True:\n    pass")
    task = asyncio.ensure_future(run(adapter, script))
    while adapter.engine is None or not script.returns:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # the loop is running in the sandbox now
    started = asyncio.get_running_loop().time()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Stopped at once (Paddock cancels the script), not after the policy's 60 s timeout.
    assert asyncio.get_running_loop().time() - started < 3


async def test_the_adapters_own_engine_offers_scripts_the_wrapped_tools_only(adapters: Any) -> None:
    script = Script("sorted(dir(tools))")
    await run(adapters(Calls().toolset()), script)
    # No terminal, file or web tool of Paddock's is reachable from the model's code.
    assert script.contents == [["boom", "lookup", "picky"]]
