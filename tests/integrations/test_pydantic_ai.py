"""`paddock.integrations.pydantic_ai.PaddockWorkspace` against pydantic-ai's own conformance suite
(`pydantic_ai.workspaces.conformance.WorkspaceBackendSuite`, pydantic-ai-slim 2.68.0) with the
real `paddock` binary, on the built-in local sandbox and (where docker and the `paddock-test`
image are there) on docker; then the adapter's own rules (DESIGN.md section 9)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable, Iterator, List

import pytest


from _backends import needs_docker, policy_with_docker, TWO_BACKENDS_POLICY  # noqa: E402
import paddock  # noqa: E402
from paddock.integrations.pydantic_ai import PaddockWorkspace  # noqa: E402
from pydantic_ai import Agent, RunContext  # noqa: E402
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.workspaces import (  # noqa: E402
    Workspace,
    WorkspaceBackend,
    WorkspaceOutputLimitError,
    WorkspaceRef,
    WorkspaceTimeoutError,
    WorkspaceUnavailableError,
)
from pydantic_ai.workspaces.conformance import WorkspaceBackendSuite  # noqa: E402

pytestmark = pytest.mark.anyio


def _sessions(policy: Path) -> List[dict]:
    """`paddock sessions list`: the live sessions of the run's state directory."""
    out = subprocess.run(
        [paddock.find_paddock_bin(), "sessions", "list", "--policy", str(policy)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


class TestPaddockWorkspaceConformance(WorkspaceBackendSuite):
    """The suite on the built-in policy (the local backend in its workspace-write sandbox), every
    optional fixture given so that its reattach and destroy rules run, not skip."""

    backend_name = None

    @pytest.fixture
    def suite_engine(self, engine: paddock.Engine) -> paddock.Engine:
        return engine

    @pytest.fixture
    async def backend(self, suite_engine: paddock.Engine, anyio_backend: str) -> AsyncIterator[WorkspaceBackend]:
        workspace = PaddockWorkspace(suite_engine, backend=self.backend_name)
        try:
            yield workspace
        finally:
            await workspace.close()

    @pytest.fixture
    async def made(self, anyio_backend: str) -> AsyncIterator[List[PaddockWorkspace]]:
        """Adapters a factory fixture made: their sessions are closed after the test."""
        adapters: List[PaddockWorkspace] = []
        yield adapters
        for adapter in adapters:
            await adapter.close()

    @pytest.fixture
    def fresh_backend(
        self, suite_engine: paddock.Engine, made: List[PaddockWorkspace]
    ) -> Callable[[], WorkspaceBackend]:
        def make() -> WorkspaceBackend:
            adapter = PaddockWorkspace(suite_engine, backend=self.backend_name)
            made.append(adapter)
            return adapter

        return make

    @pytest.fixture
    def attach_backend(self, suite_engine: paddock.Engine) -> Callable[[WorkspaceRef], WorkspaceBackend]:
        def attach(ref: WorkspaceRef) -> WorkspaceBackend:
            return PaddockWorkspace(suite_engine, backend=self.backend_name, ref=ref)

        return attach

    @pytest.fixture
    def destroy_environment(self) -> Callable[[WorkspaceBackend], Awaitable[None]]:
        async def destroy(backend: WorkspaceBackend) -> None:
            assert isinstance(backend, PaddockWorkspace)
            await backend.close()  # closes the Paddock session

        return destroy


@pytest.fixture(scope="module")
def docker_engine(paddock_state: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[paddock.Engine]:
    policy = tmp_path_factory.mktemp("policy") / "docker.toml"
    policy.write_text(policy_with_docker("box"))
    engine = paddock.Engine(policy=str(policy))
    try:
        yield engine
    finally:
        engine.close()


# CI (scripts/test-integrations.sh with the test services up) requires docker: there the
# class runs, and fails if docker is missing, rather than skipping.
@needs_docker
class TestPaddockWorkspaceConformanceDocker(TestPaddockWorkspaceConformance):
    """The same suite with the session's tools on a docker backend (a container per session)."""

    backend_name = "box"

    @pytest.fixture
    def suite_engine(self, docker_engine: paddock.Engine) -> paddock.Engine:
        return docker_engine

    async def test_working_dir_is_the_containers_workspace(self, backend: WorkspaceBackend) -> None:
        assert await backend.working_dir() == "/workspace"


# ---------------------------------------------------------------------- the adapter's own rules


@pytest.fixture
def two_backends(tmp_path: Path) -> Path:
    policy = tmp_path / "two.toml"
    policy.write_text(TWO_BACKENDS_POLICY)
    return policy


async def test_the_constructor_does_no_io_and_checks_its_arguments(engine: paddock.Engine) -> None:
    # A policy file that does not exist is only read on first use.
    lazy = PaddockWorkspace(policy="/nonexistent/policy.toml", backend="nowhere")
    assert lazy.ref is None and lazy.engine is None and lazy.session is None
    with pytest.raises(ValueError):
        PaddockWorkspace(engine, policy="/nonexistent/policy.toml")
    with pytest.raises(ValueError):
        PaddockWorkspace(engine, ref=WorkspaceRef(provider="local", id="/tmp"))
    with pytest.raises(TypeError):
        PaddockWorkspace(object())  # type: ignore[arg-type]
    with pytest.raises(paddock.EngineStartError):
        await lazy.working_dir()


async def test_an_own_engine_starts_once_under_concurrent_first_use(two_backends: Path) -> None:
    workspace = PaddockWorkspace(policy=str(two_backends))
    try:
        dirs = await asyncio.gather(*(workspace.working_dir() for _ in range(8)))
        assert len(set(dirs)) == 1
        engine, ref = workspace.engine, workspace.ref
        assert engine is not None and ref is not None and ref.provider == "paddock"
        assert [s["id"] for s in _sessions(two_backends)].count(ref.id) == 1
        assert (await workspace.run(["true"])).exit_code == 0
        assert workspace.engine is engine and workspace.ref == ref
    finally:
        await workspace.close()
    # close() ended the session and the engine the adapter started.
    assert ref.id not in [s["id"] for s in _sessions(two_backends)]
    with pytest.raises(paddock.EngineClosed):
        await engine.aconnect(ref.id)


async def test_backend_routes_the_session(two_backends: Path, engine: paddock.Engine) -> None:
    own = PaddockWorkspace(policy=str(two_backends), backend="other")
    shared_engine = paddock.Engine(policy=str(two_backends))
    shared = PaddockWorkspace(shared_engine, backend="other")
    try:
        for workspace in (own, shared):
            await workspace.working_dir()
            assert workspace.ref is not None
            record = [s for s in _sessions(two_backends) if s["id"] == workspace.ref.id]
            assert record and record[0]["backends"] == ["other"]
            # The read-only sandbox of "other": the caller's directory cannot be written there...
            denied = await workspace.run(["sh", "-c", 'touch "$1"', "sh", os.path.join(os.getcwd(), "x")])
            assert denied.exit_code != 0
            # ...but the session's working directory can.
            await workspace.write_bytes(os.path.join(await workspace.working_dir(), "f"), b"ok")
    finally:
        await own.close()
        await shared.close()
        shared_engine.close()


async def test_each_session_has_a_working_dir_of_its_own(engine: paddock.Engine, empty_cwd: Path) -> None:
    first, second = PaddockWorkspace(engine), PaddockWorkspace(engine)
    try:
        one, two = await first.working_dir(), await second.working_dir()
        assert one != two
        for workspace, working_dir in ((first, one), (second, two)):
            assert working_dir != os.getcwd() and not working_dir.startswith(str(empty_cwd))
            assert (await workspace.run(["sh", "-c", "pwd -P"])).stdout == working_dir + "\n"
        await Workspace(first).write_text("mine.txt", "first")
        assert await Workspace(first).read_text("mine.txt") == "first"
        assert not await Workspace(second).exists("mine.txt")
        assert not await second.exists(os.path.join(one, "mine.txt"))
        # A command that moves the session's shell elsewhere does not move the next command.
        await first.run("cd /", shell=True)
        assert (await first.run(["pwd"])).stdout == one + "\n"
        # Relative paths of tools resolve in the working directory, never the caller's.
        assert os.listdir(empty_cwd) == []
    finally:
        await first.close()
        await second.close()


async def test_attaching_never_creates_a_session(engine: paddock.Engine) -> None:
    missing = WorkspaceRef(provider="paddock", id="py-never-started")
    attached = PaddockWorkspace(engine, ref=missing)
    assert attached.ref == missing
    with pytest.raises(WorkspaceUnavailableError):
        await attached.working_dir()
    with pytest.raises(WorkspaceUnavailableError):
        await attached.run(["true"])
    with pytest.raises(paddock.SessionNotFound):
        await engine.aconnect(missing.id)


async def test_attached_backend_sees_the_same_working_dir_and_can_detach(engine: paddock.Engine) -> None:
    workspace = PaddockWorkspace(engine)
    try:
        working_dir = await workspace.working_dir()
        assert workspace.ref is not None
        attached = PaddockWorkspace(engine, ref=workspace.ref)
        assert await attached.working_dir() == working_dir
        await attached.write_bytes(os.path.join(working_dir, "a"), b"1")
        await attached.detach()  # lets go, the session lives on
        assert await workspace.read_bytes(os.path.join(working_dir, "a")) == b"1"
        assert (await attached.run(["cat", "a"])).stdout == "1"  # attaches again
    finally:
        await workspace.close()
    with pytest.raises(WorkspaceUnavailableError):
        await workspace.run(["true"])


async def test_cancelled_first_use_keeps_the_ref(engine: paddock.Engine) -> None:
    workspace = PaddockWorkspace(engine)
    try:
        task = asyncio.ensure_future(workspace.working_dir())
        while workspace.ref is None and not task.done():
            await asyncio.sleep(0)
        ref = workspace.ref
        task.cancel()
        with pytest.raises((asyncio.CancelledError, Exception)):
            await task
        assert ref is not None
        await workspace.working_dir()
        assert workspace.ref == ref
    finally:
        await workspace.close()


async def test_timeout_keeps_the_output_so_far(engine: paddock.Engine) -> None:
    workspace = PaddockWorkspace(engine)
    try:
        with pytest.raises(WorkspaceTimeoutError) as caught:
            await workspace.run(["sh", "-c", "echo partial; echo oops >&2; exec sleep 3600"], timeout=1)
        assert (caught.value.stdout, caught.value.stderr) == ("partial\n", "oops\n")
        with pytest.raises(ValueError):
            await workspace.run(["true"], timeout=0)
        with pytest.raises(ValueError):
            await workspace.run([])
    finally:
        await workspace.close()


async def test_output_past_the_limit_stops_the_command(engine: paddock.Engine) -> None:
    workspace = PaddockWorkspace(engine)
    try:
        with pytest.raises(WorkspaceOutputLimitError) as caught:
            await workspace.run(["sh", "-c", "head -c 20000000 /dev/zero | tr '\\0' a; echo after > after"])
        assert caught.value.stdout.startswith("aaaa")
        assert not await Workspace(workspace).exists("after")
    finally:
        await workspace.close()


async def test_file_errors_are_the_builtin_ones(engine: paddock.Engine) -> None:
    workspace = PaddockWorkspace(engine)
    try:
        root = await workspace.working_dir()
        file = os.path.join(root, "file")
        await workspace.write_bytes(file, b"x")
        with pytest.raises(NotADirectoryError):
            await workspace.read_bytes(os.path.join(file, "below"))
        with pytest.raises(NotADirectoryError):
            await workspace.stat(os.path.join(file, "below"))
        with pytest.raises(FileNotFoundError) as missing:
            await workspace.read_bytes(os.path.join(root, "missing"))
        assert missing.value.filename == os.path.join(root, "missing") and type(missing.value) is FileNotFoundError
        with pytest.raises(ValueError):
            await workspace.read_bytes("relative")
        # A dangling link exists as a name, not as a file.
        assert (await workspace.run(["ln", "-s", "nowhere", "dangling"])).exit_code == 0
        assert not await workspace.exists(os.path.join(root, "dangling"))
        await workspace.remove(os.path.join(root, "dangling"))
        assert "dangling" not in (await workspace.run(["ls", "-a"])).stdout
    finally:
        await workspace.close()


async def test_write_keeps_the_files_mode(engine: paddock.Engine) -> None:
    workspace = PaddockWorkspace(engine)
    try:
        script = os.path.join(await workspace.working_dir(), "run.sh")
        await workspace.write_bytes(script, b"#!/bin/sh\necho one\n")
        assert (await workspace.run(["chmod", "755", script])).exit_code == 0
        await workspace.write_bytes(script, b"#!/bin/sh\necho two\n")
        assert (await workspace.run([script])).stdout == "two\n"
    finally:
        await workspace.close()


async def test_an_agent_run_uses_the_workspace(engine: paddock.Engine) -> None:
    async def shell(ctx: RunContext[None], command: str) -> str:
        """Runs a shell command in the workspace."""
        result = await ctx.workspace.run(command, shell=True, timeout=30)
        return f"{result.exit_code}:{result.stdout}"

    def model(messages: list, info: AgentInfo) -> ModelResponse:
        for part in messages[-1].parts:
            if getattr(part, "part_kind", "") == "tool-return":
                return ModelResponse(parts=[TextPart(str(part.content))])
        return ModelResponse(parts=[ToolCallPart("shell", {"command": "echo hi > f.txt && cat f.txt"})])

    agent = Agent(FunctionModel(model), tools=[shell])
    workspace = PaddockWorkspace(engine)
    try:
        result = await agent.run("go", workspace=workspace)
        assert result.output == "0:hi\n"
        assert workspace.ref is not None and result.all_messages()[-1].workspace_ref == workspace.ref
        assert await Workspace(workspace).read_text("f.txt") == "hi\n"
    finally:
        await workspace.close()


async def test_list_dir_is_complete_for_long_and_empty_directories(engine: paddock.Engine) -> None:
    workspace = PaddockWorkspace(engine)
    try:
        view = Workspace(workspace)
        await view.make_dir("empty")
        assert list(await view.list_dir("empty")) == []
        # Longer than list_files answers (5000 entries) and than a result Paddock leaves
        # unspilled (`[tools] max_result_chars`): both must still list every entry.
        made = await workspace.run(
            ["sh", "-c", 'mkdir long && cd long && i=0; while [ "$i" -lt 5100 ]; do : > "entry-$i"; i=$((i+1)); done; '
             "mkdir sub && ln -s sub link"]
        )
        assert made.exit_code == 0
        entries = await view.list_dir("long")
        assert len(entries) == 5102
        kinds = {entry.name: entry.is_dir for entry in entries}
        assert kinds["sub"] and kinds["link"] and not kinds["entry-5099"]
        assert [entry.path for entry in entries] == sorted(entry.path for entry in entries)
    finally:
        await workspace.close()


async def test_a_dangerous_command_is_denied_at_once_with_nobody_to_ask(engine: paddock.Engine) -> None:
    workspace = PaddockWorkspace(engine)
    try:
        with pytest.raises(paddock.ApprovalDenied, match="recursive delete of the root"):
            await asyncio.wait_for(workspace.run(["rm", "-rf", "/"]), timeout=60)
        with pytest.raises(paddock.ApprovalDenied, match="nobody is available to approve"):
            await asyncio.wait_for(workspace.run(["rm", "-rf", "/srv/paddock-approval-check"]), timeout=60)
        # It never ran, and the workspace goes on.
        assert (await workspace.run(["ls", "/usr"])).exit_code == 0
    finally:
        await workspace.close()
