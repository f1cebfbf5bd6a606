"""The unmodified `e2b-code-interpreter` SDK against `paddock serve --e2b` (DESIGN section 10):
`run_code` and the code contexts, on the session's Paddock CPython contexts. The server comes
from conftest.py; run with scripts/test-e2b.sh.
"""

import base64
import sys
import time

import pytest

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def sbx(server, template, request):
    from e2b_code_interpreter import Sandbox

    sandbox = Sandbox.create(template=template, metadata={"test": request.node.name[:40]})
    yield sandbox
    try:
        sandbox.kill()
    except Exception:
        pass


def test_state_persists_and_the_last_expression_is_the_result(sbx):
    first = sbx.run_code("x = 41\ndef inc(v):\n    return v + 1")
    assert first.error is None and first.results == []
    assert first.execution_count == 1
    second = sbx.run_code("inc(x)")
    assert second.text == "42"
    assert [r.is_main_result for r in second.results] == [True]
    assert second.execution_count == 2
    # A string's repr loses its quotes, as on E2B.
    assert sbx.run_code("'hello'").text == "hello"
    # A trailing semicolon hides the value.
    assert sbx.run_code("x;").results == []


def test_stdout_and_stderr_stream_while_the_code_runs(sbx):
    seen = []
    execution = sbx.run_code(
        "import sys, time\nprint('one')\nprint('warn', file=sys.stderr)\ntime.sleep(1.5)\nprint('two')",
        on_stdout=lambda m: seen.append(("out", m.line, time.monotonic())),
        on_stderr=lambda m: seen.append(("err", m.line, time.monotonic())),
    )
    assert "".join(execution.logs.stdout) == "one\ntwo\n"
    assert "".join(execution.logs.stderr) == "warn\n"
    assert "".join(line for kind, line, _ in seen if kind == "out") == "one\ntwo\n"
    assert [line for kind, line, _ in seen if kind == "err"] == ["warn\n"]
    # Streamed: "one" came a good while before "two", not all at the end.
    first = next(t for kind, line, t in seen if line.startswith("one"))
    last = next(t for kind, line, t in seen if "two" in line)
    assert last - first > 1.0


def test_an_error_has_name_value_and_traceback(sbx):
    errors = []
    execution = sbx.run_code(
        "def divide(a):\n    return a / 0\nprint('before')\ndivide(1)",
        on_error=errors.append,
    )
    assert execution.error is not None
    assert execution.error.name == "ZeroDivisionError"
    assert execution.error.value == "division by zero"
    assert "divide" in execution.error.traceback
    assert "ZeroDivisionError" in execution.error.traceback
    assert len(errors) == 1 and errors[0].name == "ZeroDivisionError"
    assert execution.logs.stdout == ["before\n"]
    # The context goes on, its names kept.
    assert sbx.run_code("divide.__name__").text == "divide"
    missing = sbx.run_code("undefined_name")
    assert missing.error.name == "NameError"
    assert missing.error.value == "name 'undefined_name' is not defined"


def test_matplotlib_figure_is_a_png_result(sbx, template):
    # The docker test image (scripts/test-services.sh) carries Python without matplotlib; the
    # default sandbox's python3 must have it (scripts/test-e2b.sh installs it).
    if template == "docker":
        probe = sbx.run_code("import matplotlib")
        if probe.error is not None:
            pytest.skip(f"the docker test image has no matplotlib: {probe.error.value}")
    results = []
    execution = sbx.run_code(
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
        "plt.plot([0, 1, 2], [2, 0, 1])\nplt.title('paddock')\nplt.show()\n'done'",
        on_result=results.append,
    )
    assert execution.error is None
    assert len(results) == 2 == len(execution.results)
    figure = next(r for r in execution.results if r.png)
    assert base64.b64decode(figure.png).startswith(PNG_MAGIC)
    assert figure.text and "Figure" in figure.text
    assert not figure.is_main_result
    assert "png" in figure.formats()
    assert execution.text == "done"


def test_contexts_are_isolated(sbx):
    other = sbx.create_code_context()
    assert other.language == "python"
    sbx.run_code("x = 'default'")
    assert sbx.run_code("x", context=other).error.name == "NameError"
    sbx.run_code("x = 'other'", context=other)
    assert sbx.run_code("x", context=other).text == "other"
    assert sbx.run_code("x").text == "default"
    # language="python" is the default context too.
    assert sbx.run_code("x", language="python").text == "default"
    # A context's own working directory.
    sbx.files.make_dir("ctxdir")
    placed = sbx.create_code_context(cwd="ctxdir")
    assert placed.cwd.endswith("/ctxdir") and placed.cwd.startswith("/")
    assert sbx.run_code("import os; os.getcwd()", context=placed).text == placed.cwd


def test_list_restart_and_remove_contexts(sbx):
    from e2b import NotFoundException

    listed = sbx.list_code_contexts()
    assert [c.language for c in listed] == ["python"]  # the default one
    made = sbx.create_code_context()
    listed = sbx.list_code_contexts()
    assert listed[-1].id == made.id and listed[-1].cwd == made.cwd
    assert len(listed) == 2

    sbx.run_code("y = 1", context=made)
    sbx.restart_code_context(made)
    after = sbx.run_code("y", context=made)
    assert after.error.name == "NameError"
    assert after.error.value == "name 'y' is not defined"

    # The default context restarts by id too.
    default = listed[0]
    sbx.run_code("z = 1")
    sbx.restart_code_context(default.id)
    assert sbx.run_code("z").error.name == "NameError"

    sbx.remove_code_context(made.id)
    assert made.id not in [c.id for c in sbx.list_code_contexts()]
    with pytest.raises(NotFoundException):
        sbx.run_code("1", context=made)
    with pytest.raises(NotFoundException):
        sbx.restart_code_context("no-such-context")


def test_restart_ends_a_running_execution(sbx):
    import threading

    ctx = sbx.create_code_context()
    sbx.run_code("w = 1", context=ctx)
    done = {}

    def long_run():
        started = time.monotonic()
        done["execution"] = sbx.run_code("import time; time.sleep(60)", context=ctx, timeout=90)
        done["took"] = time.monotonic() - started

    runner = threading.Thread(target=long_run)
    runner.start()
    time.sleep(1.5)
    started = time.monotonic()
    sbx.restart_code_context(ctx)
    assert time.monotonic() - started < 20
    runner.join(30)
    assert not runner.is_alive()
    assert done["took"] < 30
    assert done["execution"].error is not None
    assert sbx.run_code("w", context=ctx).error.name == "NameError"


def test_other_languages_are_refused_clearly(sbx):
    from e2b import SandboxException

    with pytest.raises(SandboxException) as err:
        sbx.run_code("console.log(1)", language="js")
    assert "Python only" in str(err.value)
    with pytest.raises(SandboxException) as err:
        sbx.create_code_context(language="r")
    assert "Python only" in str(err.value)


def test_env_vars_per_execution_and_from_create(server, template):
    from e2b_code_interpreter import Sandbox

    sandbox = Sandbox.create(template=template, envs={"FROM_CREATE": "created"})
    try:
        once = sandbox.run_code("import os; os.getenv('FOO')", envs={"FOO": "bar"})
        assert once.text == "bar"
        assert sandbox.run_code("os.getenv('FOO', 'unset')").text == "unset"
        assert sandbox.run_code("os.getenv('FROM_CREATE')").text == "created"
        over = sandbox.run_code("os.getenv('FROM_CREATE')", envs={"FROM_CREATE": "over"})
        assert over.text == "over"
        after = sandbox.run_code("os.getenv('FROM_CREATE')")
        assert after.text == "created"
        # The hidden executions that set and restore them are not counted.
        assert after.execution_count == 5
    finally:
        sandbox.kill()


def test_a_client_timeout_interrupts_the_code_and_keeps_the_context(sbx):
    from e2b import TimeoutException

    sbx.run_code("kept = 7")
    started = time.monotonic()
    with pytest.raises(TimeoutException):
        sbx.run_code("import time; time.sleep(300)", timeout=3)
    assert time.monotonic() - started < 30
    # Interrupted, so the next execution is not stuck behind the sleep.
    result = sbx.run_code("kept * 6", timeout=20)
    assert result.text == "42"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
