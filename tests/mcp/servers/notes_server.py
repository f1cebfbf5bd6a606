"""A small, deterministic MCP server ("notes") over stdio, for Paddock's MCP tests.

Tools:
  search(query)   structured: {"query", "count", "matches": [{"id", "title"}]} (title contains query,
                  case-insensitive)
  get(note_id)    text: the note's body (an unknown id is a tool error)
  fail(message)   always a tool error (isError: true) whose text contains `message`
  crash()         ends this process at once (os._exit(1)): tests that Paddock restarts it
  pid()           text: this process's pid, so a test can see a restart gave a new process

Logs go to stderr only; stdout carries MCP messages and nothing else.
Run: python notes_server.py   (stdio)
"""

from __future__ import annotations

import logging
import os
import sys
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

NOTES: list[dict] = [
    {"id": 1, "title": "Project plan", "body": "Ship the MCP server by Friday."},
    {"id": 2, "title": "Shopping list", "body": "Milk, eggs, coffee."},
    {"id": 3, "title": "Plan for the trip to Oslo", "body": "Pack a warm coat."},
    {"id": 4, "title": "Reading list", "body": "The Rust book; the MCP spec."},
    {"id": 5, "title": "Xylophone practice", "body": "Scales, then the waltz."},
]


class NoteHit(TypedDict):
    id: int
    title: str


class SearchResult(TypedDict):
    query: str
    count: int
    matches: list[NoteHit]


def search_notes(query: str) -> SearchResult:
    q = query.lower()
    matches: list[NoteHit] = [{"id": n["id"], "title": n["title"]} for n in NOTES if q in n["title"].lower()]
    return {"query": query, "count": len(matches), "matches": matches}


def note_body(note_id: int) -> str:
    for n in NOTES:
        if n["id"] == note_id:
            return n["body"]
    raise KeyError(note_id)


def build():
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("notes", instructions="Test notes for Paddock's MCP tests.", log_level="WARNING")

    @server.tool(description="Notes whose title contains `query` (case-insensitive).")
    def search(query: str) -> SearchResult:
        return search_notes(query)

    @server.tool(description="The body of note `note_id`.", structured_output=False)
    def get(note_id: int) -> str:
        try:
            return note_body(note_id)
        except KeyError:
            raise ToolError(f"no note with id {note_id}") from None

    @server.tool(description="Always fails with `message` (a tool error).", structured_output=False)
    def fail(message: str) -> str:
        raise ToolError(f"fail: {message}")

    @server.tool(description="Ends the server process at once (exit status 1).", structured_output=False)
    def crash() -> str:
        print("notes_server: crashing on request", file=sys.stderr, flush=True)
        os._exit(1)

    @server.tool(description="This server process's pid.", structured_output=False)
    def pid() -> str:
        return str(os.getpid())

    return server


if __name__ == "__main__":
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    build().run("stdio")
