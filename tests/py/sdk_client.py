"""A realtime client built on the official OpenAI Python SDK, pointed at voxgate.

Usage: sdk_client.py PORT PROMPT [--client-tool] [--token TOKEN]

Connects with AsyncOpenAI(base_url="http://127.0.0.1:PORT/v1").realtime.connect(), sets a text-only
session (with a client-side tool `get_weather` when --client-tool), sends PROMPT as a user message,
answers any `get_weather` call itself, and prints one JSON object: the event types seen, the final
text, the client-tool calls it answered, and any error events. Exits non-zero on failure.
"""

import argparse
import asyncio
import json
import sys

from openai import AsyncOpenAI

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 80}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("prompt")
    parser.add_argument("--client-tool", action="store_true")
    parser.add_argument("--token", default="sdk-test-key")
    parser.add_argument("--timeout", type=float, default=20.0)
    args = parser.parse_args()

    client = AsyncOpenAI(base_url=f"http://127.0.0.1:{args.port}/v1", api_key=args.token)
    seen, texts, answered, errors = [], [], [], []
    async with client.realtime.connect(model="gpt-realtime") as conn:
        session = {"type": "realtime", "output_modalities": ["text"]}
        if args.client_tool:
            session["tools"] = [WEATHER_TOOL]
        await conn.session.update(session=session)
        await conn.conversation.item.create(
            item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": args.prompt}]}
        )
        await conn.response.create()
        done_with_text = False

        async def consume():
            nonlocal done_with_text
            async for event in conn:
                seen.append(event.type)
                if event.type == "error":
                    errors.append(event.error.code)
                elif event.type in ("response.output_text.delta", "response.output_audio_transcript.delta"):
                    texts.append(event.delta)
                elif event.type == "response.function_call_arguments.done":
                    name = getattr(event, "name", None)
                    if name == "get_weather":
                        answered.append(event.call_id)
                        await conn.conversation.item.create(
                            item={"type": "function_call_output", "call_id": event.call_id,
                                  "output": json.dumps({"city": json.loads(event.arguments).get("city"), "temp_c": 21})}
                        )
                        await conn.response.create()
                elif event.type == "response.done":
                    if texts:
                        done_with_text = True
                        return

        await asyncio.wait_for(consume(), timeout=args.timeout)
    print(json.dumps({"seen": seen, "text": "".join(texts), "answered": answered, "errors": errors}))
    return 0 if done_with_text else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
