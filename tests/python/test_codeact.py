"""Code mode in the CodeAct style the frameworks' models write (DESIGN.md section 9): tools as
plain functions (synchronous, positional in schema order), `final_answer`, host tools added
after start, a notebook's names set from the host. Against the real engine."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List

import pytest

import paddock


def lookup(city: str, days: int = 1) -> Dict[str, Any]:
    """Weather for a city."""
    return {"city": city, "days": days}


def test_a_tool_is_a_plain_function_called_by_keyword_or_in_schema_order() -> None:
    with paddock.Engine(tools=[lookup]) as engine:
        result = engine.run_tools_script_sync("a = lookup('paris', 3)\nb = lookup(city='rome')\n[a, b]")
        assert result["ok"], result
        assert result["result"] == [{"city": "paris", "days": 3}, {"city": "rome", "days": 1}]
        assert result["stats"]["tool_calls"] == 2
        # The awaited form takes positional arguments the same way.
        assert engine.run_tools_script_sync("await tools.lookup('oslo')")["result"] == {"city": "oslo", "days": 1}


def test_positional_mistakes_are_named_with_the_parameters_in_order() -> None:
    with paddock.Engine(tools=[lookup]) as engine:
        too_many = engine.run_tools_script_sync("lookup('a', 1, 2)")
        assert not too_many["ok"]
        assert "takes at most 2 positional argument" in too_many["error"]
        assert "in order: city, days" in too_many["error"]
        twice = engine.run_tools_script_sync("lookup('a', city='b')")
        assert not twice["ok"] and "multiple values for argument 'city'" in twice["error"], twice


def test_plain_calls_inside_coroutines_mix_with_awaited_ones() -> None:
    calls: List[str] = []

    async def slow(name: str) -> str:
        await asyncio.sleep(0.05)
        calls.append(name)
        return name.upper()

    with paddock.Engine(tools=[lookup, slow]) as engine:
        script = (
            "import asyncio\n"
            "async def plain():\n"
            "    return lookup('x')['city']\n"
            "r = await asyncio.gather(tools.slow('a'), plain(), tools.slow('b'))\n"
            "r"
        )
        result = engine.run_tools_script_sync(script)
        assert result["ok"], result
        assert result["result"] == ["A", "x", "B"]
        assert sorted(calls) == ["a", "b"]


def test_final_answer_ends_the_script_with_its_value() -> None:
    with paddock.Engine(tools=[lookup]) as engine:
        result = engine.run_tools_script_sync("x = lookup('paris')\nfinal_answer(x['city'] * 2)\nprint('not reached')")
        assert result["ok"], result
        assert result["result"] == "parisparis"
        assert result["final_answer"] is True
        assert result["output"] == ""
        # An `except Exception` in the script does not swallow it.
        caught = engine.run_tools_script_sync("try:\n    final_answer(answer=5)\nexcept Exception:\n    pass\n7")
        assert caught["result"] == 5 and caught["final_answer"] is True
        # A script that ends without it says nothing of a final answer.
        assert "final_answer" not in engine.run_tools_script_sync("1")


def test_a_host_tool_named_final_answer_is_called_first_and_gives_the_answer() -> None:
    seen: List[Any] = []

    def final_answer(answer: Any) -> str:
        seen.append(answer)
        return f"checked: {answer}"

    with paddock.Engine(tools=[final_answer]) as engine:
        result = engine.run_tools_script_sync("final_answer(42)")
        assert result["ok"], result
        assert result == {**result, "result": "checked: 42", "final_answer": True}
        assert seen == [42]


def test_a_tool_named_like_a_builtin_is_reachable_only_as_tools_x() -> None:
    def len(items: List[int]) -> str:  # noqa: A001 - the point of the test
        return "the tool"

    with paddock.Engine(tools=[len]) as engine:
        result = engine.run_tools_script_sync("[len([1, 2]), await tools.len(items=[1])]")
        assert result["ok"], result
        assert result["result"] == [2, "the tool"]


def test_tools_added_after_start_are_callable_and_a_taken_name_adds_none() -> None:
    def extra(n: int) -> int:
        return n + 1

    def other(n: int) -> int:
        return n * 2

    with paddock.Engine(tools=[lookup]) as engine:
        before = engine.run_tools_script_sync("extra(1)")
        assert not before["ok"] and "NameError" in before["error"]
        names = engine.add_tools_sync([extra])
        assert "extra" in names and "extra" in engine.tool_names
        assert engine.run_tools_script_sync("extra(41)")["result"] == 42
        with pytest.raises(ValueError, match="lookup"):
            engine.add_tools_sync([other, lookup])
        assert not engine.run_tools_script_sync("other(1)")["ok"]
        with pytest.raises(ValueError, match="terminal"):
            engine.add_tools_sync([paddock.tool(other, name="terminal")])


def test_an_added_tool_that_requires_approval_is_denied_with_nobody_to_ask() -> None:
    ran: List[int] = []

    def deploy(n: int) -> int:
        ran.append(n)
        return n

    with paddock.Engine() as engine:
        engine.add_tools_sync([paddock.tool(deploy, requires_approval=True)])
        result = engine.run_tools_script_sync("deploy(1)")
        assert not result["ok"]
        assert result["error_code"] == "tool_approval:denied", result
        assert ran == []


def test_set_variables_puts_json_values_into_the_notebook() -> None:
    with paddock.Engine(tools=[lookup], keep_state=True) as engine:
        engine.set_variables_sync({"n": 2, "cities": ["paris", {"x": None}], "quote": "it's \"q\"\n"})
        result = engine.run_tools_script_sync("[n * 2, cities, quote, lookup(cities[0])['city']]")
        assert result["ok"], result
        assert result["result"] == [4, ["paris", {"x": None}], "it's \"q\"\n", "paris"]
        with pytest.raises(TypeError, match="'bad' is not a JSON value"):
            engine.set_variables_sync({"bad": object()})
        with pytest.raises(ValueError, match="not a Python name"):
            engine.set_variables_sync({"not a name": 1})
        # A notebook's own variable keeps a tool's name: the plain function does not replace it.
        engine.run_tools_script_sync("lookup = 'mine'")
        assert engine.run_tools_script_sync("lookup")["result"] == "mine"
        assert engine.run_tools_script_sync("(await tools.lookup('rome'))['city']")["result"] == "rome"


def test_set_variables_needs_a_notebook() -> None:
    with paddock.Engine() as engine:
        with pytest.raises(ValueError, match="keep_state=True"):
            engine.set_variables_sync({"n": 1})


def test_each_session_has_its_own_notebook() -> None:
    with paddock.Engine(keep_state=True) as engine:
        with engine.session() as one, engine.session() as two:
            one.set_variables({"who": "one"})
            two.set_variables({"who": "two"})
            assert one.run_tools_script("who")["result"] == "one"
            assert two.run_tools_script("who")["result"] == "two"
            missing = engine.run_tools_script_sync("who")
            assert not missing["ok"] and "NameError" in missing["error"]


def test_the_async_api_adds_tools_and_sets_variables() -> None:
    async def main() -> None:
        async with paddock.Engine(keep_state=True) as engine:
            await engine.add_tools([lookup])
            await engine.set_variables({"city": "nice"})
            result = await engine.run_tools_script("lookup(city)['city']")
            assert result["result"] == "nice"
            session = await engine.asession()
            async with session:
                await session.set_variables({"k": 3})
                assert (await session.run_tools_script("k * 2"))["result"] == 6

    asyncio.run(main())


def test_closing_a_session_that_only_ran_scripts_ends_its_notebook() -> None:
    with paddock.Engine(keep_state=True) as engine:
        session = engine.session()
        session.run_tools_script("x = 42")
        session.close()
        # The same id again starts empty: the notebook (names and worker) ended with the close.
        again = engine.run_tools_script_sync("x", session=session.id)
        assert not again["ok"] and "NameError" in again["error"], again


def test_host_tools_are_a_toolset_a_policy_can_name(tmp_path: Any) -> None:
    policy = tmp_path / "p.toml"
    # Scripts reach the host's tools and nothing of Paddock's environment.
    policy.write_text('[toolsets]\nenabled = ["codemode", "host"]\n')
    with paddock.Engine(policy, tools=[lookup]) as engine:
        assert engine.run_tools_script_sync("lookup('x')['city']")["result"] == "x"
        assert "terminal" not in engine.tool_names
    # The `minimal` preset keeps them too.
    policy.write_text('[toolsets]\npreset = "minimal"\n')
    with paddock.Engine(policy, tools=[lookup]) as engine:
        assert engine.run_tools_script_sync("lookup('y')['city']")["result"] == "y"
