# A tool that rejects its arguments raises ValueError in the script; the script decides.
try:
    await tools.current_datetime(format=42)
except ValueError as err:
    print("rejected:", err)

# return_exceptions keeps one failure from losing the other results.
import asyncio
results = await asyncio.gather(
    tools.wait(milliseconds=5),
    tools.wait(milliseconds="soon"),
    return_exceptions=True,
)
[type(r).__name__ for r in results]
