"""A stand-in for `paddock embed` that speaks the embedding protocol's session additions
(`"stream"` output messages, the `session` request, `"session"` on calls) with scripted
answers, so the Python side of them (ordering, threads, callbacks, typed errors) is tested
without the real engine. With PADDOCK_FAKE_OLD set it refuses the `session` request as an
engine from before it does. Run as `python fake_embed.py embed`; stdlib only.

`terminal` commands it knows (anything else answers its own request, for shape checks):
- `stream`: stdout "one\\n", then after STREAM_PAUSE s stderr "two\\n", then stdout "thr" + "ee\\n"
- `timeout`: stdout "partial\\n", stderr "err\\n", then a timeout answer (exit 124, timed_out)
- `fail CODE`: ok false with that error_code
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Dict, Set

STREAM_PAUSE = 0.6
OWN = "fake-own"


def send(message: Dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def result(request: Dict[str, Any], value: Any = None, error: Any = None) -> None:
    if error is None:
        send({"type": "result", "id": request["id"], "ok": True, "value": value})
    else:
        send({"type": "result", "id": request["id"], "ok": False, "error": error})


def output(request: Dict[str, Any], stream: str, text: str) -> None:
    if request.get("stream"):
        send({"type": "output", "id": request["id"], "stream": stream, "text": text})


def terminal(request: Dict[str, Any], live: Set[str]) -> None:
    live.add(request.get("session", OWN))
    command = request["args"].get("command", "")
    if command == "stream":
        output(request, "stdout", "one\n")
        time.sleep(STREAM_PAUSE)
        output(request, "stderr", "two\n")
        output(request, "stdout", "thr")
        output(request, "stdout", "ee\n")
        result(request, {"output": "one\ntwo\nthree\n", "exit_code": 0, "error": None, "duration_ms": 612.5})
    elif command == "timeout":
        output(request, "stdout", "partial\n")
        output(request, "stderr", "err\n")
        result(
            request,
            {
                "output": "partial\nerr\n",
                "exit_code": 124,
                "error": "timed out after 1 s",
                "duration_ms": 1000.0,
                "timed_out": True,
            },
        )
    elif command.startswith("fail "):
        result(request, error={"error_code": command[5:], "error": "scripted failure"})
    else:
        result(request, {"output": json.dumps(request), "exit_code": 0, "error": None, "duration_ms": 0.0})


def session(request: Dict[str, Any], live: Set[str]) -> None:
    if os.environ.get("PADDOCK_FAKE_OLD"):
        # What an engine from before the request answers.
        send(
            {
                "type": "error",
                "id": request["id"],
                "fatal": False,
                "error": "unreadable message: unknown variant `session`, expected one of `hello`, `call`",
            }
        )
        return
    sid, action = request["session"], request["action"]
    if action == "exists":
        result(request, {"live": sid in live})
    elif action == "close" and sid in live:
        live.discard(sid)
        result(request, {"closed": True})
    elif action == "close":
        result(request, error={"error_code": "sessions:not_found", "error": f"no live session {sid}"})
    else:
        result(request, {"action": action})


def main() -> None:
    live: Set[str] = {OWN}
    for line in sys.stdin:
        request = json.loads(line)
        kind = request.get("type")
        if kind == "hello":
            send({"type": "ready", "protocol": 1, "version": "fake", "session": OWN, "tools": ["terminal"]})
        elif kind == "close":
            return
        elif kind == "call" and request.get("tool") == "terminal":
            terminal(request, live)
        elif kind == "call":
            result(request, error={"error_code": "tool:not_found", "error": "fake: no such tool"})
        elif kind == "session":
            session(request, live)
        elif kind in ("cancel",):
            continue
        else:
            result(request, error={"error_code": "embed:protocol", "error": f"fake: {kind}"})


if __name__ == "__main__":
    main()
