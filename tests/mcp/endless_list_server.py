"""An MCP server, written with the official Python SDK, whose `tools/list` never ends: every page
holds a batch of tools (`tool_0` to `tool_49`, on page 1 already) and a `nextCursor` to the next
one. voxgate must stop paging once it has seen every allowed tool, or after a bounded number of
pages, not follow the cursor for as long as the server likes while keeping every tool. With
$EXTRA_TOOL_PAGE set to N, page N (counted from 1) also lists a tool `extra`, on no other page.
With $PAGE_DELAY_MS set, every page is answered that many milliseconds after it was asked for (a
slow server, for voxgate's time bound on a listing).

Each `tools/list` request is recorded in $LAB_DIR/pages.jsonl (its cursor), so the tests can count
the pages voxgate asked for. Runs over stdio.
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

server = Server("endless")


@server.list_tools()
async def list_tools(request: types.ListToolsRequest) -> types.ListToolsResult:
    cursor = request.params.cursor if request.params else None
    with open(os.path.join(LAB_DIR, "pages.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps({"cursor": cursor}) + "\n")
    page = int(cursor or "0")
    tools = [
        types.Tool(name=f"tool_{i}", description="One of many.", inputSchema=SCHEMA) for i in range(PER_PAGE)
    ]
    if page + 1 == EXTRA_TOOL_PAGE:
        tools.append(types.Tool(name="extra", description="Listed once.", inputSchema=SCHEMA))
    if PAGE_DELAY_MS:
        await anyio.sleep(PAGE_DELAY_MS / 1000)
    return types.ListToolsResult(tools=tools, nextCursor=str(page + 1))


@server.call_tool()
async def call_tool(name: str, arguments: dict) -> list[types.TextContent]:
    return [types.TextContent(type="text", text=f"{name} called")]


async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
