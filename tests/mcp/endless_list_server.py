"""An MCP server, written with the official Python SDK, whose `tools/list` never ends: every page
holds a batch of tools (`tool_0` to `tool_49`, on page 1 already) and a `nextCursor` to the next
one. voxgate must stop paging once it has seen every allowed tool, or after a bounded number of
pages, not follow the cursor for as long as the server likes while keeping every tool. With
$EXTRA_TOOL_PAGE set to N, page N (counted from 1) also lists a tool `extra`, on no other page.
With $PAGE_DELAY_MS set, every page is answered that many milliseconds after it was asked for (a
slow server, for voxgate's time bound on a listing). With $STALL_PAGE set to N, page N is answered
only after an hour (a page voxgate gives up on).

Each `tools/list` request is recorded in $LAB_DIR/pages.jsonl (its cursor and request id), so the
tests can count the pages voxgate asked for, and each `notifications/cancelled` received in
$LAB_DIR/cancelled.jsonl (the request id it names), so they can tell voxgate withdrew a page.
Runs over stdio.
"""

import json
import os

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

LAB_DIR = os.environ["LAB_DIR"]
# Tools per page; the names repeat on every page, so the server itself stays small.
PER_PAGE = 50
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}
EXTRA_TOOL_PAGE = int(os.environ.get("EXTRA_TOOL_PAGE", "0"))
PAGE_DELAY_MS = int(os.environ.get("PAGE_DELAY_MS", "0"))
STALL_PAGE = int(os.environ.get("STALL_PAGE", "0"))

server = Server("endless")


def record(name: str, entry: dict) -> None:
    with open(os.path.join(LAB_DIR, name), "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


@server.list_tools()
async def list_tools(request: types.ListToolsRequest) -> types.ListToolsResult:
    cursor = request.params.cursor if request.params else None
    record("pages.jsonl", {"cursor": cursor, "request_id": server.request_context.request_id})
    page = int(cursor or "0")
    tools = [
        types.Tool(name=f"tool_{i}", description="One of many.", inputSchema=SCHEMA) for i in range(PER_PAGE)
    ]
    if page + 1 == EXTRA_TOOL_PAGE:
        tools.append(types.Tool(name="extra", description="Listed once.", inputSchema=SCHEMA))
    if PAGE_DELAY_MS:
        await anyio.sleep(PAGE_DELAY_MS / 1000)
    if page + 1 == STALL_PAGE:
        await anyio.sleep(3600)
    return types.ListToolsResult(tools=tools, nextCursor=str(page + 1))


@server.call_tool()
async def call_tool(name: str, arguments: dict) -> list[types.TextContent]:
    return [types.TextContent(type="text", text=f"{name} called")]


async def record_cancellations(read, forward):
    """Passes the client's messages on to the server, recording each `notifications/cancelled`
    first: the SDK acts on those itself and hands them to no handler."""
    async with read, forward:
        async for message in read:
            root = getattr(getattr(message, "message", None), "root", None)
            if isinstance(root, types.JSONRPCNotification) and root.method == "notifications/cancelled":
                record("cancelled.jsonl", {"request_id": (root.params or {}).get("requestId")})
            await forward.send(message)


async def main():
    async with stdio_server() as (read, write):
        forward, received = anyio.create_memory_object_stream(0)
        async with anyio.create_task_group() as tg:
            tg.start_soon(record_cancellations, read, forward)
            await server.run(received, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
