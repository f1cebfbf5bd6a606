"""A small, deterministic MCP server ("weather") over stdio, for Paddock's MCP tests.

Tools:
  forecast(city, days=1)  structured: {"city", "days": [{"day", "summary", "high_c", "low_c"}]},
                          a pure function of (city, days); days must be 1..7
  slow(seconds)           sleeps (asyncio) then returns the text "slept <seconds>"

Logs go to stderr only; stdout carries MCP messages and nothing else.
Run: python weather_server.py   (stdio)
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

SUMMARIES = ["sunny", "cloudy", "rain", "snow", "windy", "fog", "showers"]


class Day(TypedDict):
    day: int
    summary: str
    high_c: int
    low_c: int


class Forecast(TypedDict):
    city: str
    days: list[Day]


def forecast_data(city: str, days: int = 1) -> Forecast:
    """Deterministic across processes (no hash(): that is salted per process)."""
    seed = sum(ord(c) for c in city.lower())
    out: list[Day] = []
    for i in range(1, days + 1):
        high = (seed * 7 + i * 3) % 30 - 5
        out.append({"day": i, "summary": SUMMARIES[(seed + i) % len(SUMMARIES)], "high_c": high, "low_c": high - 6})
    return {"city": city, "days": out}


def build():
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("weather", instructions="Made-up forecasts for Paddock's MCP tests.", log_level="WARNING")

    @server.tool(description="The forecast for `city`, `days` days ahead (1-7).")
    def forecast(city: str, days: int = 1) -> Forecast:
        if not 1 <= days <= 7:
            raise ToolError(f"days must be 1..7, got {days}")
        return forecast_data(city, days)

    @server.tool(description="Sleeps `seconds`, then answers.", structured_output=False)
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    return server


if __name__ == "__main__":
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    build().run("stdio")
