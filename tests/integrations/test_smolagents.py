"""smolagents: a real `CodeAgent` driven by a scripted model (no LLM) against
`paddock.integrations.smolagents.PaddockExecutor`, in code mode (tools called back on the host)
and in python mode (a CPython context of a session, on the default sandbox and on docker)."""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List

import pytest
from smolagents import CodeAgent, Tool
from smolagents.agents import ActionStep
from smolagents.models import ChatMessage, MessageRole, Model

import paddock
from paddock.integrations.smolagents import PaddockExecutionError, PaddockExecutor


class ScriptedModel(Model):
    """Answers each step with the next scripted code block; records what the agent sent it."""

    def __init__(self, steps: List[str]) -> None:
        super().__init__(model_id="scripted")
        self.steps = list(steps)
        self.seen: List[str] = []

    def generate(self, messages: Any, stop_sequences: Any = None, **kwargs: Any) -> ChatMessage:
        self.seen.append("\n".join(str(m.content if hasattr(m, "content") else m) for m in messages))
        code = self.steps.pop(0)
        return ChatMessage(role=MessageRole.ASSISTANT, content=f"Thought: next.\n<code>\n{code}\n</code>")


class Lookup(Tool):
    name = "lookup"
    description = "Population of a city."
    inputs = {
        "city": {"type": "string", "description": "the city"},
        "year": {"type": "integer", "description": "the year", "nullable": True},
    }
    output_type = "integer"

    def __init__(self) -> None:
        super().__init__()
        self.calls: List[Dict[str, Any]] = []

    def forward(self, city: str, year: Any = None) -> int:
        self.calls.append({"city": city, "year": year})
        return {"paris": 2_100_000, "rome": 2_800_000}[city]


def agent_with(executor: PaddockExecutor, steps: List[str], tools: List[Tool]) -> CodeAgent:
    return CodeAgent(tools=tools, model=ScriptedModel(steps), executor=executor, max_steps=len(steps), verbosity_level=0)


@pytest.fixture
def codemode() -> Iterator[PaddockExecutor]:
    executor = PaddockExecutor()
    yield executor
    executor.cleanup()


def test_a_tool_called_positionally_state_across_steps_and_final_answer(codemode: PaddockExecutor) -> None:
    lookup = Lookup()
    agent = agent_with(
        codemode,
        [
            "p = lookup('paris')\nprint('paris has', p)",
            "r = lookup(city='rome', year=2020)\ntotal = p + r\ntotal",
            "final_answer(total * 2)",
        ],
        [lookup],
    )
    answer = agent.run("How many people live in Paris and Rome, twice?")
    assert answer == 2 * (2_100_000 + 2_800_000)
    # The tool ran here, in this process, with the arguments bound by name.
    assert lookup.calls == [{"city": "paris", "year": None}, {"city": "rome", "year": 2020}]
    steps = [s for s in agent.memory.steps if isinstance(s, ActionStep)]
    assert "paris has 2100000" in steps[0].observations
    assert "4900000" in steps[1].observations
    assert steps[2].is_final_answer


def test_an_error_comes_back_to_the_model_as_an_observation(codemode: PaddockExecutor) -> None:
    model_steps = ["print('before')\nx = 1 / 0", "final_answer('recovered')"]
    agent = agent_with(codemode, model_steps, [Lookup()])
    assert agent.run("divide") == "recovered"
    steps = [s for s in agent.memory.steps if isinstance(s, ActionStep)]
    assert steps[0].error is not None
    assert "ZeroDivisionError" in str(steps[0].error)
    assert "before" in str(steps[0].error)
    # The model saw the error on its next step.
    assert "ZeroDivisionError" in agent.model.seen[-1]


def test_variables_from_the_agent_reach_the_code(codemode: PaddockExecutor) -> None:
    agent = agent_with(codemode, ["final_answer(limit + len(names))"], [])
    assert agent.run("use the variables", additional_args={"limit": 40, "names": ["a", "b"]}) == 42


def test_variables_that_are_not_json_are_refused_by_name(codemode: PaddockExecutor) -> None:
    with pytest.raises(TypeError, match="'handle'"):
        codemode.send_variables({"handle": object()})


def test_code_mode_is_confined(codemode: PaddockExecutor) -> None:
    codemode.send_tools({})
    with pytest.raises(PaddockExecutionError, match="not available in the Paddock sandbox"):
        codemode("import subprocess")
    with pytest.raises(PaddockExecutionError, match="open\\(\\) is not available"):
        codemode("open('/etc/passwd').read()")


def test_an_engine_without_a_notebook_is_refused_clearly(engine: paddock.Engine) -> None:
    executor = PaddockExecutor(engine)
    with pytest.raises(paddock.PaddockError, match="keep_state=True"):
        executor("1 + 1")
    executor.cleanup()


def test_engine_and_policy_together_are_refused(engine: paddock.Engine) -> None:
    with pytest.raises(ValueError, match="not both"):
        PaddockExecutor(engine, policy="x.toml")
    with pytest.raises(ValueError, match="mode"):
        PaddockExecutor(mode="jupyter")


def test_cleanup_ends_the_session(codemode: PaddockExecutor) -> None:
    codemode("x = 1")
    session_id = codemode.session.id
    engine = codemode.engine
    codemode.cleanup()
    assert engine._closed
    # Usable again: a new session with an empty notebook.
    with pytest.raises(PaddockExecutionError, match="NameError"):
        codemode("x")
    assert codemode.session.id != session_id


def _python_backends() -> List[Any]:
    backends: List[Any] = [pytest.param(None, id="sandbox")]
    if os.environ.get("PADDOCK_INTEGRATIONS_DOCKER") == "required":
        backends.append(pytest.param("docker", id="docker"))
    return backends


@pytest.mark.parametrize("backend", _python_backends())
def test_python_mode_runs_cpython_with_shipped_tools(backend: Any) -> None:
    policy = os.environ.get("PADDOCK_TEST_POLICY") if backend else None
    executor = PaddockExecutor(policy=policy, mode="python", backend=backend)
    try:

        class Double(Tool):
            name = "double"
            description = "Doubles a number."
            inputs = {"n": {"type": "integer", "description": "the number"}}
            output_type = "integer"

            def forward(self, n: int) -> int:
                return n * 2

        agent = agent_with(
            executor,
            ["import sys\nv = double(sys.version_info[0])\nprint('cpython', v)", "final_answer(v + 1)"],
            [Double()],
        )
        assert agent.run("double the major version") == 7
        steps = [s for s in agent.memory.steps if isinstance(s, ActionStep)]
        assert "cpython 6" in steps[0].observations
    finally:
        executor.cleanup()


def test_a_dangerous_command_from_the_agents_code_is_denied(codemode: PaddockExecutor) -> None:
    codemode.send_tools({})
    # Paddock's own tools are callable from the code too; its approval rules hold, and with
    # nobody to ask the call fails at once: the model sees why on its next step.
    with pytest.raises(PaddockExecutionError, match="PermissionError: denied: recursive delete of the root"):
        codemode("terminal(command='rm -rf /')")
    with pytest.raises(PaddockExecutionError, match="needs approval .* nobody is available to approve"):
        codemode("terminal(command='rm -rf /srv/paddock-approval-check')")
    assert codemode("'still here'").output == "still here"
