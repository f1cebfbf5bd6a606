# Bounded concurrency: 20 calls, at most 5 in flight, results in completion order.
import asyncio

limit = asyncio.Semaphore(5)

async def one(i):
    async with limit:
        await tools.wait(milliseconds=50 + 10 * (i % 3))
        return i

done = [await f for f in asyncio.as_completed([one(i) for i in range(20)])]
{"completed": len(done), "first_three": done[:3]}
