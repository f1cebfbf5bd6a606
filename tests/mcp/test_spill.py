"""Big results over MCP: a `terminal` output longer than `[tools] max_result_chars` reaches the
client as a preview with the spilled file's path and id (structuredContent and the text block),
the file holds the whole output, `read_output` pages through it and filters it, refuses paths
outside the session's spill directory, and is listed as read-only. Over HTTP (legacy protocol)
ending the MCP session closes the Paddock session and removes its spilled files."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import COMBOS, Paddock

pytestmark = pytest.mark.anyio

ROWS = 30_000  # `row000000\n` ... : 300 000 characters
FULL = "".join(f"row{i:06}\n" for i in range(ROWS))


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result
    out = result.structured_content
    assert isinstance(out, dict), f"no structured result: {result}"
    return out


@pytest.mark.parametrize("transport,mode", COMBOS)
async def test_a_spilled_result_reaches_the_client_and_read_output_reads_it(
    paddock_factory, transport: str, mode: str
) -> None:
    p: Paddock = paddock_factory(transport, mode)
    async with p.client() as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert "read_output" in tools, sorted(tools)
        hints = tools["read_output"].annotations
        assert hints is not None and hints.read_only_hint is True, hints

        result = await c.call_tool("terminal", {"command": f"seq -f row%06g 0 {ROWS - 1}"})
        out = structured(result)
        assert out["exit_code"] == 0, out
        spilled = out["spilled"][0]
        assert spilled["field"] == "output" and spilled["chars"] == len(FULL), spilled
        path = Path(spilled["path"])
        assert path.is_relative_to(p.home / "spill"), path
        assert path.read_text() == FULL
        preview = out["output"]
        assert len(preview) < 50_000, len(preview)
        assert preview.startswith("row000000\n") and preview.endswith("row029999\n"), preview[-200:]
        assert spilled["id"] in preview
        # The text block a model reads carries the path too, and stays small.
        text = "\n".join(getattr(block, "text", "") for block in result.content)
        assert str(path) in text and len(text) < 60_000, len(text)

        page = structured(await c.call_tool("read_output", {"id": spilled["id"], "offset": 20_000, "limit": 2}))
        assert page["text"] == "row020000\nrow020001", page
        assert page["next_offset"] == 20_002, page
        found = structured(
            await c.call_tool("read_output", {"path": str(path), "pattern": r"^row02999[89]$"})
        )
        assert found["matches"] == [
            {"line": 29_998, "text": "row029998"},
            {"line": 29_999, "text": "row029999"},
        ], found

        for escape in ({"path": "/etc/passwd"}, {"id": "../../session-records/x"}, {"path": f"{path.parent}/../../x"}):
            refused = await c.call_tool("read_output", escape)
            assert refused.is_error, (escape, refused)
            body = json.dumps(refused.structured_content) + "".join(
                getattr(block, "text", "") for block in refused.content
            )
            assert "read_output:outside_spill_dir" in body, (escape, body)
            assert "root:" not in body, body

    if transport == "http" and mode == "legacy":
        # The client ended its MCP session: its Paddock session is closed, its spills removed.
        until = time.monotonic() + 15
        while path.parent.exists():
            assert time.monotonic() < until, f"{path.parent} outlived its session"
            time.sleep(0.1)
