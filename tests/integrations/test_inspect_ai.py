"""`paddock.integrations.inspect_ai` (the `"paddock"` sandbox type) against Inspect AI's own
conformance checks (`inspect_ai.util._sandbox.self_check`, inspect-ai 0.3.285), with the real
`paddock` binary, on the built-in default policy (the sandboxed local backend) and, where docker
and the `paddock-test` image are there, on a docker backend; then the adapter's own rules
(DESIGN.md section 9) and an Inspect eval whose samples run in it.

The sandbox type is registered by importing the adapter (its `@sandboxenv(name="paddock")`); an
installed package also has it through the `inspect_ai` entry point.

The checks are Inspect's, pulled in unchanged (`from ... self_check import *`) and driven by the
`sandbox_env` fixture as Inspect's own runner (tests/tools/test_sandbox_docker_and_local.py)
drives them: one environment per backend, shared by the checks, known failures marked there as
strict xfails keyed on the check's name.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, AsyncIterator, Dict, List, NamedTuple

import pytest
import pytest_asyncio

# Without tests/integrations/conftest.py (which does the same): a state directory of the run's
# own, set before any engine starts.
if not os.environ.get("PADDOCK_HOME"):
    os.environ["PADDOCK_HOME"] = tempfile.mkdtemp(prefix="paddock-inspect-")
    os.environ.pop("PADDOCK_POLICY", None)

from _backends import needs_docker, policy_with_docker  # noqa: E402
import paddock  # noqa: E402
import paddock.integrations.inspect_ai as adapter  # noqa: E402  (registers "paddock")
from inspect_ai.util import (  # noqa: E402
    OutputLimitExceededError,
    SandboxEnvironmentSpec,
    SandboxUnavailableError,
    SandboxUserUnsupportedError,
)
from inspect_ai.util._sandbox.limits import (  # noqa: E402
    override_max_exec_output_size,
    override_max_read_file_size,
)
from inspect_ai.util._sandbox.registry import registry_find_sandboxenv  # noqa: E402

# Inspect's checks, collected here as tests of this module (each takes `sandbox_env`).
from inspect_ai.util._sandbox.self_check import *  # noqa: E402, F401, F403
from paddock.integrations.inspect_ai import PaddockSandboxConfig, PaddockSandboxEnvironment  # noqa: E402

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.filterwarnings("ignore:The test .* is marked with '@pytest.mark.asyncio' but it is not an async"),
]


_AS_ROOT = os.geteuid() == 0
_PERMISSION_CHECKS = (
    "test_read_file_not_allowed",
    "test_write_text_file_without_permissions",
    "test_write_binary_file_without_permissions",
)

# The checks each backend fails, and why: Inspect's own runner keeps such a list per sandbox.
# Paddock's local sandbox drops every capability (root in it cannot pass over permission bits),
# so Inspect's three permission checks hold there even when the tests run as root.
_ACCOUNTS = (
    "Paddock's default rules ask a human before a command changes user accounts (the check's "
    "adduser and userdel) and these tests have no approver: paddock.ApprovalDenied, a "
    "PermissionError; "
)
KNOWN_FAILURES: Dict[str, Dict[str, str]] = {
    "local": {
        "test_exec_as_user": _ACCOUNTS
        + (
            "past that, Paddock's local sandbox cannot switch users (no CAP_SETUID/CAP_SETGID, no "
            "new privileges: SandboxUserUnsupportedError) and its /etc is not writable"
        ),
    },
    "docker": {
        "test_exec_as_user": _ACCOUNTS
        + (
            "past that, the paddock-test image (busybox) has no adduser; exec as another user "
            "itself works there (test_docker_runs_commands_as_other_users)"
        ),
    },
}


# ---------------------------------------------------------------------- Inspect's self-check


@pytest.fixture(scope="module")
def docker_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    policy = tmp_path_factory.mktemp("policy") / "docker.toml"
    # Root without CAP_DAC_OVERRIDE respects permission bits, as Inspect's permission checks
    # expect of the user a sample runs as.
    policy.write_text(policy_with_docker("box", 'drop_capabilities = ["DAC_OVERRIDE"]'))
    return policy


class BackendAndEnv(NamedTuple):
    backend: str
    env: PaddockSandboxEnvironment


@pytest_asyncio.fixture(
    scope="module",
    loop_scope="module",
    params=[pytest.param("local", id="local"), pytest.param("docker", id="docker", marks=needs_docker)],
)
async def _backend_and_env(request: pytest.FixtureRequest, docker_policy: Path) -> AsyncIterator[BackendAndEnv]:
    """One sample's environment per backend, made and ended as Inspect's runner does it:
    task_init, sample_init ... sample_cleanup, task_cleanup."""
    name = request.param
    config: Any = None if name == "local" else PaddockSandboxConfig(policy=str(docker_policy), backend="box")
    task = f"self_check_{name}"
    await PaddockSandboxEnvironment.task_init(task, config)
    envs = await PaddockSandboxEnvironment.sample_init(task, config, {})
    env = envs["default"]
    assert isinstance(env, PaddockSandboxEnvironment)
    try:
        yield BackendAndEnv(name, env)
    finally:
        await PaddockSandboxEnvironment.sample_cleanup(task, config, envs, False)
        await PaddockSandboxEnvironment.task_cleanup(task, config, True)


@pytest.fixture
def sandbox_env(request: pytest.FixtureRequest, _backend_and_env: BackendAndEnv) -> PaddockSandboxEnvironment:
    """The environment Inspect's checks take; a check this backend is known to fail is a strict
    xfail (it turns into an error the day it passes)."""
    reason = KNOWN_FAILURES[_backend_and_env.backend].get(request.node.originalname)
    if reason is not None:
        request.node.add_marker(pytest.mark.xfail(reason=reason, strict=True))
    return _backend_and_env.env


# ---------------------------------------------------------------------- the adapter's rules


def _live_sessions() -> List[str]:
    out = subprocess.run(
        [paddock.find_paddock_bin(), "sessions", "list"], capture_output=True, text=True, check=True
    ).stdout
    return [json.loads(line)["id"] for line in out.splitlines() if line.strip()]


async def _gone(engine: paddock.Engine, session_id: str) -> bool:
    try:
        await engine.aconnect(session_id)
    except paddock.SessionNotFound:
        return True
    return False


# The built-in policy with its backend named: a config of its own, so that these tests' engines are
# not the self-check's (which uses no config at all), and task_cleanup really ends them.
RULES = PaddockSandboxConfig(backend="local")


@pytest_asyncio.fixture(loop_scope="module")
async def sample() -> AsyncIterator[PaddockSandboxEnvironment]:
    """A sample's environment on the built-in policy, made and ended as Inspect's runner does."""
    await PaddockSandboxEnvironment.task_init("rules", RULES)
    envs = await PaddockSandboxEnvironment.sample_init("rules", RULES, {})
    env = envs["default"]
    assert isinstance(env, PaddockSandboxEnvironment)
    try:
        yield env
    finally:
        await PaddockSandboxEnvironment.sample_cleanup("rules", RULES, envs, False)
        await PaddockSandboxEnvironment.task_cleanup("rules", RULES, True)


def test_the_sandbox_type_and_its_config() -> None:
    assert registry_find_sandboxenv("paddock") is PaddockSandboxEnvironment
    assert adapter.SANDBOX_TYPE == "paddock"

    config = PaddockSandboxConfig(policy="ops.toml", backend="docker")
    assert PaddockSandboxConfig() == PaddockSandboxConfig(policy=None, backend=None)
    assert PaddockSandboxEnvironment.config_deserialize(config.model_dump()) == config
    # A spec survives serialisation (Inspect's logs): the dict comes back as the model.
    spec = SandboxEnvironmentSpec("paddock", config)
    assert SandboxEnvironmentSpec.model_validate(spec.model_dump()).config == config
    # A string is a policy file path.
    assert adapter._config_of("ops.toml") == PaddockSandboxConfig(policy="ops.toml")
    assert adapter._config_of(None) == PaddockSandboxConfig()
    with pytest.raises(TypeError):
        adapter._config_of(42)  # type: ignore[arg-type]
    with pytest.raises(Exception):
        PaddockSandboxConfig(policy="ops.toml", image="x")  # type: ignore[call-arg]


async def test_one_session_per_sample_with_a_working_directory_of_its_own(empty_cwd: Path) -> None:
    config = RULES
    await PaddockSandboxEnvironment.task_init("lifecycle", config)
    one_envs = await PaddockSandboxEnvironment.sample_init("lifecycle", config, {})
    two_envs = await PaddockSandboxEnvironment.sample_init("lifecycle", config, {})
    one, two = one_envs["default"], two_envs["default"]
    assert isinstance(one, PaddockSandboxEnvironment) and isinstance(two, PaddockSandboxEnvironment)
    engine = one.engine
    try:
        # Two sessions on the task's one engine, each with its own directory, never the cwd.
        assert two.engine is engine
        assert one.session.id != two.session.id and one.session.id.startswith("inspect-")
        assert one.working_dir == f"/tmp/paddock-workspace-{one.session.id}"
        assert two.working_dir == f"/tmp/paddock-workspace-{two.session.id}"
        assert one.working_dir != os.path.realpath(os.getcwd())
        assert (await one.exec(["pwd", "-P"])).stdout.strip() == one.working_dir

        # Relative paths resolve there, for files and commands alike.
        await one.write_file("sub/rel.txt", "one\n")
        assert (await one.exec(["cat", "rel.txt"], cwd="sub")).stdout == "one\n"
        assert await one.read_file(f"{one.working_dir}/sub/rel.txt") == "one\n"
        # Nothing in the caller's current directory; on the host, the session's private /tmp.
        assert list(empty_cwd.iterdir()) == []
        host = (
            Path(os.environ["PADDOCK_HOME"]) / "sandbox-tmp" / one.session.id
            / f"paddock-workspace-{one.session.id}" / "sub" / "rel.txt"
        )
        assert host.read_bytes() == b"one\n"
        # The other sample sees neither the file nor the directory.
        assert not (await two.exec(["test", "-e", one.working_dir])).success
        with pytest.raises(FileNotFoundError):
            await two.read_file(f"{one.working_dir}/sub/rel.txt")
        # A command's `cd` does not carry over; the directory is made again if removed.
        assert (await one.exec(["sh", "-c", f"cd / && rm -rf {one.working_dir} && pwd"])).stdout == "/\n"
        assert (await one.exec(["sh", "-c", "pwd -P; ls -A | wc -l"])).stdout.split() == [one.working_dir, "0"]

        # sample_cleanup ends the sample's session (and only it).
        await PaddockSandboxEnvironment.sample_cleanup("lifecycle", config, one_envs, False)
        assert await _gone(engine, one.session.id)
        assert not await _gone(engine, two.session.id)
        with pytest.raises(SandboxUnavailableError):
            await one.exec(["true"])
    finally:
        await PaddockSandboxEnvironment.sample_cleanup("lifecycle", config, one_envs, True)
        # task_cleanup also ends what a sample's cleanup left, then the engine.
        await PaddockSandboxEnvironment.task_cleanup("lifecycle", config, True)
    assert two.session.id not in _live_sessions()
    with pytest.raises(paddock.EngineClosed):
        await engine.aconnect(two.session.id)


async def test_no_sandbox_cleanup_leaves_the_sessions_live() -> None:
    await PaddockSandboxEnvironment.task_init("kept", RULES)
    envs = await PaddockSandboxEnvironment.sample_init("kept", RULES, {})
    env = envs["default"]
    assert isinstance(env, PaddockSandboxEnvironment)
    # Inspect skips sample_cleanup with --no-sandbox-cleanup and says so to task_cleanup.
    await PaddockSandboxEnvironment.task_cleanup("kept", RULES, False)
    try:
        assert env.session.id in _live_sessions()
    finally:
        closing = [paddock.find_paddock_bin(), "sessions", "close", env.session.id]
        subprocess.run(closing, check=True, capture_output=True)
    assert env.session.id not in _live_sessions()


async def test_exec_details(sample: PaddockSandboxEnvironment) -> None:
    env = sample
    # cwd: relative to the working directory; one that cannot be entered is an error.
    assert (await env.exec(["pwd"], cwd="/usr")).stdout == "/usr\n"
    with pytest.raises(FileNotFoundError, match="no-such-dir"):
        await env.exec(["ls"], cwd="no-such-dir")
    await env.write_file("plain", "x")
    with pytest.raises(NotADirectoryError):
        await env.exec(["ls"], cwd="plain")
    # A cmd[0] that cannot be executed is a PermissionError, the command's own 126 a result.
    with pytest.raises(PermissionError):
        await env.exec(["./plain"])
    nested = await env.exec(["sh", "-c", "/etc/passwd"])
    assert nested.returncode == 126 and "Permission denied" in nested.stderr
    missing = await env.exec(["no-such-program"])
    assert missing.returncode == 127 and not missing.success

    # env and stdin; arguments are never read by a shell.
    result = await env.exec(["sh", "-c", 'printf "%s|%s" "$A" "$1"', "sh", "$HOME `x`"], env={"A": "a b"})
    assert result.stdout == "a b|$HOME `x`"
    assert (await env.exec(["cat"], input="a\r\nb")).stdout == "a\r\nb"

    # The session's own user runs as any command does; another one cannot be on this sandbox.
    assert (await env.exec(["id", "-u"], user="root" if _AS_ROOT else None)).stdout == f"{os.geteuid()}\n"
    assert (await env.exec(["id", "-u"], user=str(os.geteuid()))).stdout == f"{os.geteuid()}\n"
    with pytest.raises(SandboxUserUnsupportedError, match="cannot run a command as 'nobody'"):
        await env.exec(["id"], user="nobody")

    # Output limit: each stream keeps its last bytes, the command runs to its end.
    with override_max_exec_output_size(1000):
        result = await env.exec(["sh", "-c", "head -c 5000 /dev/zero | tr '\\0' a; printf END; echo err >&2"])
    assert result.success and len(result.stdout) == 1000 and result.stdout.endswith("aEND")
    assert result.stderr == "err\n"

    # A timeout raises TimeoutError with the output so far and kills what the command started.
    marker = f"sleep-{os.urandom(6).hex()}"  # a program name no other process has
    assert (await env.exec(["sh", "-c", f'cp "$(command -v sleep)" {marker}'])).success
    started = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        await env.exec(["sh", "-c", f"echo begun; ./{marker} 30 & ./{marker} 31"], timeout=1)
    assert time.monotonic() - started < 15
    assert getattr(info.value, "truncated_output", "") == "begun\n"
    assert marker not in (await env.exec(["ps", "-eo", "args"])).stdout

    # A command the policy refuses is a PermissionError (the built-in policy's hardline).
    with pytest.raises(PermissionError):
        await env.exec(["rm", "-rf", "/"])
    with pytest.raises(PermissionError):  # its stdin file (binary: uploaded) is removed too
        await env.exec(["rm", "-rf", "/"], input=b"\xff")

    # A command line longer than one protocol line may be goes through a file.
    words = ["y" * 100_000] * 50
    result = await env.exec(["printf", "%s", *words])
    assert result.success and len(result.stdout) == 5_000_000
    # Uploaded stdin and command files are gone once the command started (or was refused).
    assert (await env.exec(["sh", "-c", "ls -A /tmp | grep -c paddock-inspect || true"])).stdout == "0\n"

    with pytest.raises(ValueError):
        await env.exec([])
    with pytest.raises(TypeError):
        await env.exec("echo hi")  # type: ignore[arg-type]


async def test_file_details(sample: PaddockSandboxEnvironment) -> None:
    env = sample
    await env.write_file("file", "content")
    with pytest.raises(NotADirectoryError):
        await env.read_file("file/below")
    with pytest.raises(NotADirectoryError):
        await env.write_file("file/below", "x")
    with pytest.raises(IsADirectoryError):
        await env.read_file(".")
    assert (await env.exec(["mkfifo", "fifo"])).success
    with pytest.raises(OSError):
        await env.read_file("fifo")
    # Written in place: through a symlink, an existing file's mode kept.
    assert (await env.exec(["sh", "-c", "chmod 741 file && ln -s file link"])).success
    await env.write_file("link", "via the link")
    assert await env.read_file("file") == "via the link"
    assert (await env.exec(["stat", "-c", "%a %F", "file", "link"])).stdout == "741 regular file\n777 symbolic link\n"
    # Text is strict UTF-8; bytes are exact; the size limit is checked before reading.
    await env.write_file("latin", b"caf\xe9")
    with pytest.raises(UnicodeDecodeError):
        await env.read_file("latin")
    assert await env.read_file("latin", text=False) == b"caf\xe9"
    with override_max_read_file_size(3):
        with pytest.raises(OutputLimitExceededError):
            await env.read_file("latin", text=False)
    # The sandbox's user (root too: the sandbox drops its capabilities) keeps to permission bits.
    assert (await env.exec(["chmod", "000", "file"])).success
    with pytest.raises(PermissionError, match="'file'"):
        await env.read_file("file")
    with pytest.raises(PermissionError, match="'link'"):
        await env.write_file("link", "no")
    assert (await env.exec(["sh", "-c", "mkdir locked && chmod 500 locked"])).success
    with pytest.raises(PermissionError):
        await env.write_file("locked/new", "no")


async def test_an_inspect_eval_runs_its_samples_in_paddock(tmp_path: Path, empty_cwd: Path) -> None:
    """Inspect's runner end to end: task_init, per-sample sessions with the sample's files and
    setup script, the solver's commands, sample_cleanup and task_cleanup; a scripted model."""
    from inspect_ai import Task, eval_async
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput
    from inspect_ai.scorer import includes
    from inspect_ai.solver import Generate, TaskState, solver
    from inspect_ai.util import sandbox

    @solver
    def run_in_sandbox():  # type: ignore[no-untyped-def]
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            env = sandbox()
            result = await env.exec(["sh", "-c", "cat data.txt setup.out; pwd -P"])
            state.output = ModelOutput.from_content("mockllm/model", result.stdout)
            return state

        return solve

    samples = [
        Sample(input=f"sample {n}", target=f"data {n}", files={"data.txt": f"data {n}\n"}, setup="echo set > setup.out")
        for n in range(2)
    ]
    before = set(_live_sessions())
    logs = await eval_async(
        Task(dataset=samples, solver=run_in_sandbox(), scorer=includes(), sandbox="paddock"),
        model="mockllm/model",
        log_dir=str(tmp_path / "logs"),
    )
    log = logs[0]
    assert log.status == "success", log.error
    assert log.samples is not None and len(log.samples) == 2
    directories = set()
    for item in log.samples:
        assert item.scores is not None and item.scores["includes"].value == "C"
        lines = item.output.completion.splitlines()
        assert lines[1] == "set" and lines[2].startswith("/tmp/paddock-workspace-inspect-")
        directories.add(lines[2])
    assert len(directories) == 2  # a session (and directory) per sample
    assert set(_live_sessions()) <= before  # all ended
    assert list(empty_cwd.iterdir()) == []  # nothing of the samples in the caller's directory


@needs_docker
async def test_docker_runs_commands_as_other_users(docker_policy: Path) -> None:
    config = PaddockSandboxConfig(policy=str(docker_policy), backend="box")
    await PaddockSandboxEnvironment.task_init("users", config)
    envs = await PaddockSandboxEnvironment.sample_init("users", config, {})
    env = envs["default"]
    assert isinstance(env, PaddockSandboxEnvironment)
    try:
        assert env.working_dir == "/workspace"
        assert (await env.exec(["id", "-un"])).stdout == "root\n"
        assert (await env.exec(["id", "-un"], user="nobody")).stdout == "nobody\n"
        # A uid, stdin, cwd and arguments that look like options all reach the command.
        script = 'id -un; cat; pwd; echo "$1"'
        result = await env.exec(["sh", "-c", script, "sh", "-l"], user="65534", input="in\n", cwd="/tmp")
        assert result.stdout == "nobody\nin\n/tmp\n-l\n"
        unknown = await env.exec(["whoami"], user="nonexistent")
        assert not unknown.success and "nonexistent" in unknown.stderr
        await env.write_file("shared.bin", b"\x00\xff")
        assert await env.read_file("/workspace/shared.bin", text=False) == b"\x00\xff"
    finally:
        await PaddockSandboxEnvironment.sample_cleanup("users", config, envs, False)
        await PaddockSandboxEnvironment.task_cleanup("users", config, True)


async def test_a_dangerous_command_is_refused_at_once_with_nobody_to_ask(sample: PaddockSandboxEnvironment) -> None:
    with pytest.raises(PermissionError, match="recursive delete of the root"):
        await asyncio.wait_for(sample.exec(["rm", "-rf", "/"]), timeout=60)
    with pytest.raises(PermissionError, match="nobody is available to approve"):
        await asyncio.wait_for(sample.exec(["rm", "-rf", "/srv/paddock-approval-check"]), timeout=60)
    assert (await sample.exec(["ls", "/usr"])).returncode == 0
