"""`paddock.integrations.openai_agents.PaddockSandboxClient` with the real `paddock` binary and the
real OpenAI Agents SDK (openai-agents 0.24.0): a `SandboxAgent` driven by the SDK's own scripted
model (`agents.testing.ScriptedModel`) through `Runner`, and the session API the SDK calls, on the
built-in local sandbox and (where docker and the `paddock-test` image are there) on docker; then
the client's own rules (DESIGN.md section 9)."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import re
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Iterator, List, Optional

from _backends import needs_docker, policy_with_docker, TWO_BACKENDS_POLICY  # noqa: E402
import paddock
import pytest
from agents import RunConfig, Runner, set_tracing_disabled
from agents.exceptions import UserError
from agents.sandbox import (
    ExecTimeoutError,
    ExecTransportError,
    LocalSnapshotSpec,
    Manifest,
    SandboxAgent,
    SandboxRunConfig,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
    WorkspaceReadNotFoundError,
)
from agents.sandbox.capabilities import Shell
from agents.sandbox.errors import PtySessionNotFoundError
from agents.sandbox.manifest import Environment
from agents.sandbox.sandboxes import UnixLocalSandboxClientOptions
from agents.sandbox.session import BaseSandboxClient, BaseSandboxClientOptions, SandboxSession
from agents.sandbox.snapshot import NoopSnapshotSpec
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from paddock.integrations import openai_agents
from paddock.integrations.openai_agents import (
    PaddockCommandRefusedError,
    PaddockSandboxClient,
    PaddockSandboxClientOptions,
    PaddockSandboxSessionState,
)

pytestmark = pytest.mark.anyio

# Nothing here talks to OpenAI: no traces are sent either.
set_tracing_disabled(True)


@dataclass
class Target:
    """Where a test's sessions run: an engine, the backend of its policy, and that policy."""

    name: str
    engine: paddock.Engine
    backend: Optional[str]
    policy: Optional[Path]

    def options(self) -> PaddockSandboxClientOptions:
        return PaddockSandboxClientOptions(backend=self.backend)


@pytest.fixture(scope="module")
def docker_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test services' policy (`$PADDOCK_TEST_POLICY`, backend "docker") when there is one."""
    given = os.environ.get("PADDOCK_TEST_POLICY")
    if given:
        return Path(given)
    policy = tmp_path_factory.mktemp("policy") / "docker.toml"
    policy.write_text(policy_with_docker("docker"))
    return policy


@pytest.fixture(scope="module")
def docker_engine(paddock_state: Path, docker_policy: Path) -> Iterator[paddock.Engine]:
    engine = paddock.Engine(policy=str(docker_policy))
    try:
        yield engine
    finally:
        engine.close()


@pytest.fixture(params=[pytest.param("local", id="local"), pytest.param("docker", id="docker", marks=needs_docker)])
def target(request: pytest.FixtureRequest, engine: paddock.Engine) -> Target:
    if request.param == "local":
        return Target("local", engine, None, None)
    return Target(
        "docker", request.getfixturevalue("docker_engine"), "docker", request.getfixturevalue("docker_policy")
    )


@pytest.fixture
def client(target: Target) -> PaddockSandboxClient:
    return PaddockSandboxClient(target.engine)


@pytest.fixture
async def sandbox(client: PaddockSandboxClient, target: Target) -> AsyncIterator[SandboxSession]:
    """A started session of the client; deleted (its Paddock session closed) after the test."""
    session = await client.create(options=target.options(), snapshot=NoopSnapshotSpec())
    try:
        await session.start()
        yield session
    finally:
        await client.delete(session)


def _session_records(policy: Optional[Path]) -> List[dict]:
    """The live sessions of the run's state directory (`paddock sessions list`)."""
    args = [paddock.find_paddock_bin(), "sessions", "list"]
    if policy is not None:
        args += ["--policy", str(policy)]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def _sessions(policy: Optional[Path]) -> List[str]:
    return [record["id"] for record in _session_records(policy)]


def _host_processes(command_line: str) -> List[int]:
    """The pids of this machine's processes running `command_line` (the local backend's are)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    args = f.read().split(b"\0")
            except OSError:
                continue
            if b" ".join(arg for arg in args if arg) == command_line.encode():
                found.append(int(entry))
    return found


async def _running(session: SandboxSession, target: Target, command_line: str) -> bool:
    """Whether a process runs `command_line` in the session's environment: seen from this machine
    for the local backend (each of its commands has a PID namespace of its own), by `ps` in the
    container for docker."""
    if target.name == "local":
        return bool(_host_processes(command_line))
    listing = await session.exec("ps -o args")
    assert listing.ok(), listing.stderr
    return command_line in listing.stdout.decode().splitlines()


def _tool_output(call: Any, call_id: str) -> str:
    """The output of tool call `call_id` as the model got it in `call` (a `ModelCall`)."""
    for item in call.input if isinstance(call.input, list) else []:
        if isinstance(item, dict) and item.get("type") == "function_call_output" and item.get("call_id") == call_id:
            return str(item["output"])
    raise AssertionError(f"the model never got the output of {call_id!r}")


def _agent(model: ScriptedModel) -> SandboxAgent:
    return SandboxAgent(name="paddock-test", model=model, instructions="Use the shell.", capabilities=[Shell()])


async def _run(model: ScriptedModel, sandbox: SandboxRunConfig) -> Any:
    """One `Runner.run` of a shell agent on `model`; bounded, so that a hang is a failure."""
    run = Runner.run(_agent(model), "go", run_config=RunConfig(sandbox=sandbox))
    return await asyncio.wait_for(run, timeout=120)


async def _text(session: SandboxSession, path: str) -> bytes:
    return (await session.read(Path(path))).read()


# ---------------------------------------------------------------------- the client and its options


async def test_the_client_is_the_sdks_and_its_constructors_do_no_io(engine: paddock.Engine) -> None:
    client = PaddockSandboxClient(engine)
    assert isinstance(client, BaseSandboxClient) and client.backend_id == "paddock"
    assert issubclass(PaddockSandboxClientOptions, BaseSandboxClientOptions)
    assert PaddockSandboxClientOptions().type == "paddock"
    assert PaddockSandboxSessionState.model_fields["type"].default == "paddock"
    # Options travel as JSON and come back as this client's (the SDK's polymorphic parse).
    parsed = BaseSandboxClientOptions.parse(PaddockSandboxClientOptions("docker").model_dump(mode="json"))
    assert isinstance(parsed, PaddockSandboxClientOptions) and parsed.backend == "docker"

    # A policy that does not exist is only read on first use.
    lazy = PaddockSandboxClient(policy="/nonexistent/policy.toml")
    assert lazy.engine is None
    with pytest.raises(ValueError):
        PaddockSandboxClient(engine, policy="/nonexistent/policy.toml")
    with pytest.raises(TypeError):
        PaddockSandboxClient(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        PaddockSandboxClientOptions(backend="")
    with pytest.raises(paddock.EngineStartError):
        await lazy.create()
    with pytest.raises(TypeError, match="PaddockSandboxClientOptions"):
        await client.create(options=UnixLocalSandboxClientOptions())  # type: ignore[arg-type]


async def test_an_own_engine_starts_once_and_backend_routes_sessions(
    tmp_path: Path, empty_cwd: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = tmp_path / "two.toml"
    policy.write_text(TWO_BACKENDS_POLICY)
    started: List[paddock.Engine] = []

    class CountingEngine(paddock.Engine):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            started.append(self)

    monkeypatch.setattr(openai_agents, "Engine", CountingEngine)
    client = PaddockSandboxClient(policy=str(policy))
    assert started == [] and client.engine is None
    options = PaddockSandboxClientOptions(backend="other")
    sessions = await asyncio.gather(*(client.create(options=options, snapshot=NoopSnapshotSpec()) for _ in range(3)))
    engine = client.engine
    assert engine is not None and started == [engine]
    try:
        ids = [s.state.paddock_session_id for s in sessions]
        roots = {s.state.manifest.root for s in sessions}
        assert len(set(ids)) == 3 and len(roots) == 3
        assert all(not root.startswith(str(empty_cwd)) and root != os.getcwd() for root in roots)
        records = {r["id"]: r for r in _session_records(policy)}
        assert all(records[i]["backends"] == ["other"] for i in ids)
        await sessions[0].start()
        # The read-only sandbox of "other": the caller's directory cannot be written there...
        denied = await sessions[0].exec("touch", os.path.join(os.getcwd(), "x"), shell=False)
        assert denied.exit_code != 0
        # ...but the session's own directory can.
        await sessions[0].write(Path("f.txt"), io.BytesIO(b"ok"))
        assert await _text(sessions[0], "f.txt") == b"ok"
    finally:
        for session in sessions:
            await client.delete(session)
    assert not set(ids) & set(_sessions(policy))
    await client.aclose()
    with pytest.raises(paddock.EngineClosed):
        await engine.aconnect(ids[0])
    with pytest.raises(RuntimeError, match="closed"):
        await client.create()


# ---------------------------------------------------------------------- a SandboxAgent on Paddock


async def test_command_output_reaches_the_model(client: PaddockSandboxClient, target: Target) -> None:
    model = ScriptedModel(
        [
            [function_call("exec_command", {"cmd": "echo paddock says $((6 * 7)); pwd"}, call_id="c1")],
            ModelStep.respond(lambda call: [assistant_message(_tool_output(call, "c1"))]),
        ]
    )
    before = set(_sessions(target.policy))
    result = await _run(model, SandboxRunConfig(client=client, options=target.options(), snapshot=NoopSnapshotSpec()))
    output = str(result.final_output)
    assert "Process exited with code 0" in output and "paddock says 42" in output
    pwd = output.rstrip("\n").splitlines()[-1]
    if target.name == "docker":
        assert pwd == "/workspace"
    else:
        assert pwd.startswith("/tmp/paddock-workspace-openai-agents-") and pwd != os.getcwd()
    # The Runner made the session, so it deleted it after the run: no Paddock session is left.
    assert set(_sessions(target.policy)) <= before
    model.assert_complete()


async def test_a_failing_command_reaches_the_model(client: PaddockSandboxClient, target: Target) -> None:
    model = ScriptedModel(
        [
            [function_call("exec_command", {"cmd": "ls /no/such/dir"}, call_id="c1")],
            ModelStep.respond(lambda call: [assistant_message(_tool_output(call, "c1"))]),
        ]
    )
    result = await _run(model, SandboxRunConfig(client=client, options=target.options(), snapshot=NoopSnapshotSpec()))
    output = str(result.final_output)
    assert re.search(r"Process exited with code [12]\b", output), output
    assert "No such file or directory" in output


async def test_a_file_round_trip_through_the_agent(sandbox: SandboxSession) -> None:
    await sandbox.write(Path("in/data.txt"), io.BytesIO(b"hello paddock\n"))
    model = ScriptedModel(
        [
            [function_call("exec_command", {"cmd": "tr a-z A-Z < in/data.txt | tee out.txt"}, call_id="c1")],
            ModelStep.respond(lambda call: [assistant_message(_tool_output(call, "c1"))]),
        ]
    )
    # A live session given to the Runner: used, not deleted.
    result = await _run(model, SandboxRunConfig(session=sandbox))
    assert "HELLO PADDOCK" in str(result.final_output)
    assert await _text(sandbox, "out.txt") == b"HELLO PADDOCK\n"
    assert await sandbox.running()


async def test_the_model_drives_an_interactive_process(client: PaddockSandboxClient, target: Target) -> None:
    def answer(call: Any) -> Any:
        started = _tool_output(call, "c1")
        found = re.search(r"Process running with session ID (\d+)", started)
        assert found and "word?" in started, started
        args = {"session_id": int(found.group(1)), "chars": "paddock\n", "yield_time_ms": 5000}
        return [function_call("write_stdin", args, call_id="c2")]

    model = ScriptedModel(
        [
            [
                function_call(
                    "exec_command",
                    {"cmd": "printf 'word? '; read w; echo got-$w", "tty": True, "yield_time_ms": 1000},
                    call_id="c1",
                )
            ],
            ModelStep.respond(answer),
            ModelStep.respond(lambda call: [assistant_message(_tool_output(call, "c2"))]),
        ]
    )
    result = await _run(model, SandboxRunConfig(client=client, options=target.options(), snapshot=NoopSnapshotSpec()))
    output = str(result.final_output)
    assert "got-paddock" in output and "Process exited with code 0" in output


async def test_a_refused_command_is_a_clear_error_not_a_hang(client: PaddockSandboxClient, target: Target) -> None:
    model = ScriptedModel([[function_call("exec_command", {"cmd": "rm -rf /"}, call_id="c1")]])
    with pytest.raises(UserError) as caught:
        await _run(model, SandboxRunConfig(client=client, options=target.options(), snapshot=NoopSnapshotSpec()))
    message = str(caught.value)
    assert "exec_command" in message and "Paddock refused the command" in message
    assert "recursive delete of the root" in message and "approver" in message


async def test_refusals_from_the_session_api(sandbox: SandboxSession) -> None:
    await sandbox.write(Path("keep.txt"), io.BytesIO(b"still here"))
    with pytest.raises(PaddockCommandRefusedError) as denied:
        await asyncio.wait_for(sandbox.exec("rm -rf /"), timeout=60)
    assert isinstance(denied.value, ExecTransportError)
    assert isinstance(denied.value.__cause__, paddock.ApprovalDenied)
    assert denied.value.context["error_code"] == "tool_approval:denied"
    # Asking a person, with nobody to ask: refused at once, never waited on.
    with pytest.raises(PaddockCommandRefusedError, match="nobody is available to approve"):
        await asyncio.wait_for(sandbox.exec("git push --force origin main"), timeout=60)
    with pytest.raises(PaddockCommandRefusedError):
        await sandbox.pty_exec_start("rm -rf /", shell=True, tty=True, yield_time_s=1)
    # Nothing was run: the session and its files are as they were.
    assert await _text(sandbox, "keep.txt") == b"still here"
    assert (await sandbox.exec("echo ok")).stdout == b"ok\n"


# ---------------------------------------------------------------------- the session API


async def test_exec_results_and_timeouts(sandbox: SandboxSession) -> None:
    result = await sandbox.exec("echo out; echo err >&2; exit 4")
    assert (result.stdout, result.stderr, result.exit_code) == (b"out\n", b"err\n", 4)
    argv = await sandbox.exec("printf", "%s|", "two words", "$HOME", "*", shell=False)
    assert argv.stdout == b"two words|$HOME|*|"
    assert (await sandbox.exec("pwd")).stdout.decode().strip() == sandbox.state.manifest.root
    # A command that moves elsewhere does not move the next one.
    await sandbox.exec("cd /")
    assert (await sandbox.exec("pwd")).stdout.decode().strip() == sandbox.state.manifest.root
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(ExecTimeoutError):
        await sandbox.exec("echo partial; sleep 30", timeout=1)
    assert loop.time() - started < 15
    # The command and what it started were killed: the session goes on.
    assert (await sandbox.exec("true")).ok()


async def test_files_are_byte_exact_and_keep_their_mode(sandbox: SandboxSession) -> None:
    blob = bytes(range(256)) * 64
    await sandbox.write(Path("bin/blob"), io.BytesIO(blob))
    assert await _text(sandbox, "bin/blob") == blob
    digest = (await sandbox.exec("sha256sum bin/blob")).stdout.decode().split()[0]
    assert digest == hashlib.sha256(blob).hexdigest()
    root = sandbox.state.manifest.root
    assert await _text(sandbox, f"{root}/bin/blob") == blob  # absolute paths in the root too

    await sandbox.write(Path("run.sh"), io.BytesIO(b"#!/bin/sh\necho one\n"))
    assert (await sandbox.exec("chmod 755 run.sh")).ok()
    await sandbox.write(Path("run.sh"), io.BytesIO(b"#!/bin/sh\necho two\n"))
    assert (await sandbox.exec("./run.sh")).stdout == b"two\n"

    # A recursive removal (the SDK's, when it clears a workspace to restore a snapshot) is not
    # refused on docker, where `rm -rf` in /workspace would need a person's approval.
    assert (await sandbox.exec("mkdir -p tree/a/b && touch tree/a/b/c")).ok()
    await sandbox.rm(Path("tree"), recursive=True)
    await sandbox.rm(Path("tree"), recursive=True)  # nothing there: fine, as `rm -rf`
    assert not (await sandbox.exec("test -e tree")).ok()

    with pytest.raises(WorkspaceReadNotFoundError):
        await sandbox.read(Path("missing.txt"))
    with pytest.raises(WorkspaceArchiveReadError):
        await sandbox.read(Path("bin"))
    with pytest.raises(ValueError, match="not supported"):
        await sandbox.read(Path("bin/blob"), user="nobody")


async def test_persist_then_hydrate_into_a_new_session(
    client: PaddockSandboxClient, target: Target, sandbox: SandboxSession
) -> None:
    await sandbox.write(Path("a.txt"), io.BytesIO(b"alpha\n"))
    await sandbox.write(Path("sub/b.bin"), io.BytesIO(bytes(range(256))))
    await sandbox.write(Path("sub/run.sh"), io.BytesIO(b"#!/bin/sh\necho ran\n"))
    await sandbox.write(Path("cache/big"), io.BytesIO(b"x" * 1000))
    made = await sandbox.exec("chmod 755 sub/run.sh && ln -s a.txt link && ln a.txt hard.txt")
    assert made.ok(), made.stderr
    sandbox.register_persist_workspace_skip_path("cache")

    archive = await sandbox.persist_workspace()
    raw = archive.read()
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        names = {member.name.rstrip("/") for member in tar.getmembers()}
    # Workspace-relative members (no root name, nothing absolute), the skip path left out.
    assert {"a.txt", "sub/b.bin", "sub/run.sh", "link", "hard.txt"} <= names
    assert not any(name.startswith("/") or name.startswith("cache") for name in names), names

    other = await client.create(options=target.options(), snapshot=NoopSnapshotSpec())
    try:
        await other.start()
        await other.hydrate_workspace(io.BytesIO(raw))
        assert await _text(other, "a.txt") == b"alpha\n"
        assert await _text(other, "hard.txt") == b"alpha\n"
        assert await _text(other, "sub/b.bin") == bytes(range(256))
        assert (await other.exec("./sub/run.sh")).stdout == b"ran\n"
        assert (await other.exec("readlink link")).stdout == b"a.txt\n"
        assert not (await other.exec("test -e cache")).ok()

        # An archive reaching out of the root is refused before anything is written.
        evil = io.BytesIO()
        with tarfile.open(fileobj=evil, mode="w") as tar:
            member = tarfile.TarInfo("../escaped.txt")
            member.size = 4
            tar.addfile(member, io.BytesIO(b"evil"))
        with pytest.raises(WorkspaceArchiveWriteError):
            await other.hydrate_workspace(io.BytesIO(evil.getvalue()))
        parent = os.path.dirname(other.state.manifest.root.rstrip("/"))
        assert not (await other.exec(f"test -e {parent}/escaped.txt")).ok()
    finally:
        await client.delete(other)


async def test_resume_from_serialized_state(client: PaddockSandboxClient, target: Target, tmp_path: Path) -> None:
    session = await client.create(options=target.options(), snapshot=LocalSnapshotSpec(base_path=tmp_path))
    await session.start()
    await session.write(Path("keep.txt"), io.BytesIO(b"kept"))
    paddock_id = session.state.paddock_session_id

    def round_trip(state: Any) -> PaddockSandboxSessionState:
        payload = json.loads(json.dumps(client.serialize_session_state(state)))
        assert payload["type"] == "paddock" and payload["paddock_session_id"] == paddock_id
        restored = client.deserialize_session_state(payload)
        assert isinstance(restored, PaddockSandboxSessionState)
        return restored

    # While the Paddock session lives, resume attaches to it: the workspace as it was.
    attached = await client.resume(round_trip(session.state))
    assert attached.state.paddock_session_id == paddock_id and await attached.running()
    await attached.start()
    assert await _text(attached, "keep.txt") == b"kept"

    # stop() persists the workspace (the SDK's snapshot, through persist_workspace).
    await session.stop()
    state = round_trip(session.state)
    assert state.snapshot_fingerprint  # the SDK's fingerprint helper ran in the environment
    # A live workspace that drifted from the snapshot is cleared and restored by start().
    drift = await session.exec("echo changed > keep.txt && mkdir -p drift/deep && touch drift/deep/f")
    assert drift.ok(), drift.stderr
    restored = await client.resume(round_trip(session.state))
    await restored.start()
    assert await _text(restored, "keep.txt") == b"kept"
    assert not (await restored.exec("test -e drift")).ok()

    # delete ends the Paddock session.
    await client.delete(session)
    assert not await attached.running()
    with pytest.raises(paddock.SessionNotFound):
        await target.engine.aconnect(paddock_id, backend=target.backend)

    # Resumed after that: a session started again under the id, the snapshot hydrated into it.
    revived = await client.resume(state)
    try:
        assert revived.state.paddock_session_id == paddock_id
        await revived.start()
        assert await _text(revived, "keep.txt") == b"kept"
        assert (await revived.exec("pwd")).stdout.decode().strip() == revived.state.manifest.root
    finally:
        await client.delete(revived)


async def test_pty_processes(sandbox: SandboxSession, target: Target) -> None:
    assert sandbox.supports_pty()
    started = await sandbox.pty_exec_start("printf 'name? '; read n; echo hello-$n", tty=True, yield_time_s=1)
    assert started.process_id is not None and started.exit_code is None
    assert b"name?" in started.output
    done = await sandbox.pty_write_stdin(session_id=started.process_id, chars="paddock\n", yield_time_s=5)
    assert b"hello-paddock" in done.output
    assert (done.exit_code, done.process_id) == (0, None)

    # Ctrl-C on the terminal interrupts the process.
    sleeper = await sandbox.pty_exec_start("sleep 100", tty=True, yield_time_s=0.5)
    assert sleeper.process_id is not None
    stopped = await sandbox.pty_write_stdin(session_id=sleeper.process_id, chars="\x03", yield_time_s=5)
    assert stopped.process_id is None and stopped.exit_code not in (None, 0)

    # Without a tty stdin is at its end, and cannot be written to.
    piped = await sandbox.pty_exec_start("cat; echo eof", tty=False, yield_time_s=5)
    assert (piped.output, piped.exit_code) == (b"eof\n", 0)
    running = await sandbox.pty_exec_start("sleep 271.828", tty=False, yield_time_s=0.3)
    assert running.process_id is not None
    with pytest.raises(RuntimeError, match="stdin is not available"):
        await sandbox.pty_write_stdin(session_id=running.process_id, chars="x")
    assert await _running(sandbox, target, "sleep 271.828")
    await sandbox.pty_terminate_all()  # as shutdown() does
    with pytest.raises(PtySessionNotFoundError):
        await sandbox.pty_write_stdin(session_id=running.process_id, chars="")
    assert not await _running(sandbox, target, "sleep 271.828")


async def test_each_session_has_a_working_dir_of_its_own(
    client: PaddockSandboxClient, target: Target, empty_cwd: Path
) -> None:
    first = await client.create(options=target.options(), snapshot=NoopSnapshotSpec())
    second = await client.create(options=target.options(), snapshot=NoopSnapshotSpec())
    custom_root = f"/tmp/agents-custom-{os.getpid()}"
    manifest = Manifest(root=custom_root, environment=Environment(value={"GREETING": "hello from the manifest"}))
    custom = await client.create(options=target.options(), manifest=manifest, snapshot=NoopSnapshotSpec())
    try:
        for session in (first, second, custom):
            await session.start()
        one, two = first.state.manifest.root, second.state.manifest.root
        assert first.state.workspace_root_owned and not custom.state.workspace_root_owned
        if target.name == "docker":
            assert one == two == "/workspace"  # each in a container of its own
        else:
            assert one != two
        for root in (one, two):
            assert root != os.getcwd() and not root.startswith(str(empty_cwd))
        await first.write(Path("mine.txt"), io.BytesIO(b"first"))
        assert not (await second.exec("test -e mine.txt")).ok()
        # A root given in the manifest is used as given.
        assert custom.state.manifest.root == custom_root
        assert (await custom.exec("pwd")).stdout.decode().strip() == custom_root
        assert (await custom.exec('echo "$GREETING"')).stdout == b"hello from the manifest\n"
        assert os.listdir(empty_cwd) == []
    finally:
        for session in (first, second, custom):
            await client.delete(session)


async def test_delete_ends_the_paddock_session_and_everything_in_it(
    client: PaddockSandboxClient, target: Target, paddock_state: Path
) -> None:
    session = await client.create(options=target.options(), snapshot=NoopSnapshotSpec())
    await session.start()
    paddock_id = session.state.paddock_session_id
    assert await session.running()
    live = await session.pty_exec_start("sleep 314.159", tty=False, yield_time_s=0.3)
    assert live.process_id is not None
    assert paddock_id in _sessions(target.policy)
    if target.name == "local":
        assert _host_processes("sleep 314.159")

    await client.delete(session)
    assert paddock_id not in _sessions(target.policy)
    assert not await session.running()
    with pytest.raises(paddock.SessionNotFound):
        await target.engine.aconnect(paddock_id, backend=target.backend)
    if target.name == "local":  # its processes and private /tmp (where its root was) are gone too
        assert not (paddock_state / "sandbox-tmp" / paddock_id).exists()
        assert not _host_processes("sleep 314.159")
    with pytest.raises(ExecTransportError, match="was deleted"):
        await session.exec("true")
    await client.delete(session)  # twice is harmless
