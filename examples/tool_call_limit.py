# Run with --max-tool-calls 5: the sixth call raises ValueError("codemode:tool_call_limit ...")
# and the script catches it and returns what it has.
#   paddock run --max-tool-calls 5 examples/tool_call_limit.py
done = 0
for _ in range(100):
    try:
        await tools.wait()
    except ValueError as err:
        print("stopped:", str(err).split(":")[0] + ":" + str(err).split(":")[1])
        break
    done += 1
return {"calls_made": done}
