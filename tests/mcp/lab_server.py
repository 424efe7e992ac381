"""A clinic lab system as an MCP server, written with the official Python SDK, for voxgate's tests.

Run over stdio (default) or Streamable HTTP (`--http`: binds 127.0.0.1 on a free port and prints
`listening on PORT` once it accepts connections). Everything the tests check on the server's side
is written to JSON Lines files in $LAB_DIR: `calls.jsonl` (every call that reached a tool, with its
arguments), `orders.jsonl` (orders written), `cancelled.jsonl` (calls the client cancelled) and,
over stdio, `started.jsonl` (one line per start: the process id and the names of the environment
variables the server was given).

`LAB_PING` changes how the server takes MCP `ping`, for voxgate's liveness tests: `missing` leaves it
unimplemented (the client gets "Method not found", as from a server without `ping`), `slow` answers
it only after 1.5 s.
"""

import argparse
import asyncio
import json
import os
import socket
import sys
import threading
import time

import anyio
import uvicorn
from mcp.server.fastmcp import Context, FastMCP
from mcp import types
from mcp.types import ToolAnnotations

LAB_DIR = os.environ["LAB_DIR"]
mcp = FastMCP("lab", host="127.0.0.1")


def record(name, entry):
    with open(os.path.join(LAB_DIR, name), "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
        f.flush()


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
def lookup_result(order_id: str) -> str:
    """Look up the result of a lab order by its order id."""
    record("calls.jsonl", {"tool": "lookup_result", "order_id": order_id})
    return f"Order {order_id}: potassium 4.1 mmol/L (normal)."


@mcp.tool()
def order_test(test_code: str, priority: str) -> str:
    """Order a lab test. Writes the order to the lab system."""
    record("calls.jsonl", {"tool": "order_test", "test_code": test_code, "priority": priority})
    record("orders.jsonl", {"test_code": test_code, "priority": priority})
    return f"Ordered {test_code} ({priority})."


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
def failing_lookup(order_id: str) -> str:
    """A lookup whose backend is broken: always reports an error."""
    record("calls.jsonl", {"tool": "failing_lookup", "order_id": order_id})
    raise ValueError(f"lab system offline for order {order_id}")


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
def crash(tag: str) -> str:
    """Dies mid-call, as a server with a fatal bug would."""
    record("calls.jsonl", {"tool": "crash", "tag": tag})
    os._exit(3)


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def slow(tag: str, seconds: float, ctx: Context) -> str:
    """Takes its time; records a cancellation if the client gives up first."""
    record("calls.jsonl", {"tool": "slow", "tag": tag})
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        record("cancelled.jsonl", {"tag": tag})
        raise
    return f"slow {tag} done"


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
def busy(seconds: float) -> str:
    """Works without yielding: a sync tool runs on the event loop, so the server answers nothing
    else (not even `ping`) until it is done, as a server that handles one request at a time."""
    record("calls.jsonl", {"tool": "busy"})
    time.sleep(seconds)
    return "busy done"


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def count_steps(steps: int, ctx: Context) -> str:
    """Works in steps and reports progress after each."""
    record("calls.jsonl", {"tool": "count_steps", "steps": steps})
    for i in range(1, steps + 1):
        await ctx.report_progress(i, steps, f"step {i} of {steps}")
        await anyio.sleep(0.05)
    return f"counted {steps} steps"


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def chart_progress(patient: str, ctx: Context) -> str:
    """Reads a patient's chart, reporting progress and logging to the client with the name in both."""
    record("calls.jsonl", {"tool": "chart_progress"})
    await ctx.info(f"opening the chart of {patient}")
    await ctx.report_progress(1, 2, f"reading the chart of {patient}")
    await anyio.sleep(0.05)
    await ctx.report_progress(2, 2, f"done with {patient}")
    return f"{patient}: no allergies recorded."


# Tasks that outlive their call (late_progress), kept so they are not collected while they run.
LATE_TASKS = set()


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def late_progress(patient: str, ctx: Context) -> str:
    """Answers at once and reports its last progress, with the patient's name, only afterwards: a
    notification that reaches the client after its call has ended. Records `late.jsonl` once sent."""
    record("calls.jsonl", {"tool": "late_progress"})
    token = ctx.request_context.meta.progressToken
    session = ctx.session

    async def later():
        await anyio.sleep(0.3)
        await session.send_progress_notification(token, 2, 2, f"done with {patient}")
        record("late.jsonl", {"token": token})

    task = asyncio.get_running_loop().create_task(later())
    LATE_TASKS.add(task)
    task.add_done_callback(LATE_TASKS.discard)
    return f"{patient}: chart closed."


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def add_extra(ctx: Context) -> str:
    """Publishes one more tool and tells the client (notifications/tools/list_changed)."""
    record("calls.jsonl", {"tool": "add_extra"})

    def extra(note: str) -> str:
        """A tool that appeared while the server was running."""
        return f"extra {note}"

    mcp.add_tool(extra, name="extra", annotations=ToolAnnotations(readOnlyHint=True))
    await ctx.session.send_tool_list_changed()
    return "added"


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
def secret_export() -> str:
    """Exports everything. Never on voxgate's allow-list."""
    record("calls.jsonl", {"tool": "secret_export"})
    return "everything"


@mcp.tool(annotations=ToolAnnotations(readOnlyHint=True))
def broken_schema(x: str) -> str:
    """Its declared input schema is invalid (patched below)."""
    return x


# The declared schema is stricter than the Python signature: `priority` must be one of two values.
# The SDK validates against the signature only, so a call that violated the schema would still
# reach the tool (and calls.jsonl) — only voxgate's own validation keeps it out.
mcp._tool_manager.get_tool("order_test").parameters["properties"]["priority"]["enum"] = ["routine", "urgent"]
mcp._tool_manager.get_tool("order_test").parameters["additionalProperties"] = False
# A schema that does not compile: voxgate must leave this tool out.
mcp._tool_manager.get_tool("broken_schema").parameters = {"type": "object", "properties": {"x": {"type": 12}}}


async def slow_ping(request: types.PingRequest) -> types.ServerResult:
    await anyio.sleep(1.5)
    return types.ServerResult(types.EmptyResult())


match os.environ.get("LAB_PING"):
    case "missing":
        del mcp._mcp_server.request_handlers[types.PingRequest]
    case "slow":
        mcp._mcp_server.request_handlers[types.PingRequest] = slow_ping


async def serve_http():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    config = uvicorn.Config(mcp.streamable_http_app(), log_level="warning", lifespan="on")
    server = uvicorn.Server(config)

    async def announce():
        while not server.started:
            await asyncio.sleep(0.01)
        print(f"listening on {port}", flush=True)

    await asyncio.gather(server.serve(sockets=[sock]), announce())


def exit_with_parent():
    """The test process holds our stdin: when it ends, so does this server."""
    sys.stdin.read()
    os._exit(0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", action="store_true")
    if parser.parse_args().http:
        threading.Thread(target=exit_with_parent, daemon=True).start()
        asyncio.run(serve_http())
    else:
        record("started.jsonl", {"pid": os.getpid(), "env": sorted(os.environ)})
        mcp.run(transport="stdio")
    sys.exit(0)
