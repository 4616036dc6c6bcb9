"""An MCP host written with the official MCP Python SDK (`mcp`), driving `agentry mcp serve`.

    mcp_host.py MODE stdio AGENTRY [ARGS...]     start the server over stdio
    mcp_host.py MODE http URL                     connect over streamable HTTP

MODE is one of:
    answer    list the tools, call the reply tool, print what came back
    cancel    call it, cancel the call once a tool reports progress, wait for the partial result
    approve   as answer, approving every elicitation question
    decline   as answer, declining every elicitation question

Prints one JSON object on stdout: the tools, the progress messages, the questions asked and
the result (or the partial result sent after the cancel).
"""

import json
import os
import sys

import anyio
import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

PROMPT = os.environ.get("MCP_HOST_PROMPT", "What is in the notes?")


async def drive(mode, read, write):
    seen = {"progress": [], "questions": [], "notified": []}
    cancelled_text = anyio.Event()
    tool_running = anyio.Event()

    async def on_progress(progress, total, message):
        seen["progress"].append(message)
        # A tool runs once it reports progress of its own: "calling …" comes before its body
        # starts (a cancel then would find nothing to hand back yet).
        calling = [m for m in seen["progress"] if m and m.startswith("calling ")]
        if calling and message and not message.startswith("calling "):
            tool_running.set()

    async def on_message(message):
        # Progress after the cancel reaches only the session's message handler.
        if isinstance(message, types.ProgressNotification) or getattr(message, "method", "") == "notifications/progress":
            text = message.params.message or ""
            seen["notified"].append(text)
            if "[cancelled]" in text:
                cancelled_text.set()

    async def on_elicit(context, params):
        seen["questions"].append(params.message)
        if mode == "approve":
            return types.ElicitResult(action="accept", content={"approve": True})
        return types.ElicitResult(action="decline")

    elicitation = on_elicit if mode in ("approve", "decline") else None
    async with ClientSession(read, write, elicitation_callback=elicitation, message_handler=on_message) as session:
        await session.initialize()
        tools = await session.list_tools()
        seen["tools"] = [{"name": t.name, "inputSchema": t.input_schema} for t in tools.tools]
        name = tools.tools[0].name
        if mode != "cancel":
            result = await session.call_tool(name, {"prompt": PROMPT}, progress_callback=on_progress)
            seen["result"] = {
                "isError": result.is_error,
                "text": "".join(c.text for c in result.content if c.type == "text"),
            }
            return seen
        async with anyio.create_task_group() as group:

            async def call():
                await session.call_tool(name, {"prompt": PROMPT}, progress_callback=on_progress)
                seen["result"] = "answered before the cancel"

            group.start_soon(call)
            with anyio.fail_after(30):
                await tool_running.wait()
            group.cancel_scope.cancel()
        with anyio.fail_after(30):
            await cancelled_text.wait()
        seen["partial"] = next(t for t in seen["notified"] if "[cancelled]" in t)
        return seen


async def main():
    mode, transport = sys.argv[1], sys.argv[2]
    if transport == "stdio":
        params = StdioServerParameters(command=sys.argv[3], args=sys.argv[4:], env=dict(os.environ))
        async with stdio_client(params) as (read, write):
            seen = await drive(mode, read, write)
    else:
        async with streamable_http_client(sys.argv[3]) as (read, write, *_):
            seen = await drive(mode, read, write)
    print(json.dumps(seen))


anyio.run(main)
