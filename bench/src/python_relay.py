"""The Python relay `bench run --python` measures voxgate against: what a team would otherwise deploy.

It is the pattern of Azure's VoiceRAG (aiohttp) and LiteLLM's realtime proxy: one upstream
connection per client, and every event in both directions goes through `json.loads` (to look at its
`type`, as those projects do to pick out tool calls) before the original text is forwarded. Here
with the `websockets` library (asyncio API), no compression, no frame size limit, like the bare
relay. Prints `listening on HOST:PORT` once it accepts connections.

Usage: python python_relay.py --upstream ws://HOST:PORT/v1/realtime [--listen 127.0.0.1:0]
"""

import argparse
import asyncio
import json
import signal

from websockets.asyncio.client import connect
from websockets.asyncio.server import serve


async def pipe(source, sink):
    async for message in source:
        event = json.loads(message)
        # VoiceRAG and LiteLLM branch on the type here (tool calls, session.update); audio passes.
        _ = event.get("type")
        await sink.send(message)


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", default="127.0.0.1:0")
    parser.add_argument("--upstream", required=True)
    args = parser.parse_args()
    host, port = args.listen.rsplit(":", 1)

    async def handle(client):
        async with connect(args.upstream, subprotocols=["realtime"], compression=None, max_size=None) as upstream:
            tasks = [asyncio.create_task(pipe(client, upstream)), asyncio.create_task(pipe(upstream, client))]
            # Either side ending ends the pair.
            _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()

    # SIGTERM (how the bench stops its servers) ends the relay cleanly, with exit status 0.
    stopped = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, lambda: stopped.done() or stopped.set_result(None))
    async with serve(handle, host, int(port), subprotocols=["realtime"], compression=None, max_size=None) as server:
        addr = server.sockets[0].getsockname()
        print(f"listening on {addr[0]}:{addr[1]}", flush=True)
        await stopped


if __name__ == "__main__":
    asyncio.run(main())
