"""An A2A client written with the official A2A Python SDK (`a2a-sdk`), driving `agentry serve`.

    a2a_client.py MODE BASE_URL PROMPT [ANSWER]

MODE is one of:
    send      resolve the agent card, send PROMPT (SendMessage), print the task
    stream    send PROMPT with SendStreamingMessage, print every event
    cancel    stream PROMPT, cancel the task once a tool reports progress, print the cancelled task
    answer    send PROMPT, expect the task to ask for input, answer ANSWER in the same task,
              print both tasks

Prints one JSON object on stdout, the SDK's objects as their protobuf JSON.
"""

import asyncio
import json
import sys
import uuid

import httpx
from google.protobuf.json_format import MessageToDict

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import CancelTaskRequest, GetTaskRequest, Message, Part, Role, SendMessageRequest, TaskState


def message(text, task_id="", context_id=""):
    return SendMessageRequest(
        message=Message(
            message_id=str(uuid.uuid4()),
            role=Role.ROLE_USER,
            parts=[Part(text=text)],
            task_id=task_id,
            context_id=context_id,
        )
    )


async def main(mode, base_url, prompt, answer):
    http = httpx.AsyncClient(timeout=60)
    card = await A2ACardResolver(http, base_url).get_agent_card()
    seen = {"card": MessageToDict(card)}
    blocking = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
    streaming = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)
    if mode == "send":
        async for event in blocking.send_message(message(prompt)):
            seen["task"] = MessageToDict(event.task)
        again = await blocking.get_task(GetTaskRequest(id=event.task.id, history_length=1))
        seen["got"] = MessageToDict(again)
    elif mode == "stream":
        seen["events"] = [MessageToDict(e) async for e in streaming.send_message(message(prompt))]
    elif mode == "cancel":
        seen["events"] = []
        async for event in streaming.send_message(message(prompt)):
            seen["events"].append(MessageToDict(event))
            status = event.status_update.status if event.HasField("status_update") else None
            # Once the tool reports progress of its own (after "calling NAME"): its on_cancel exists.
            text = status.message.parts[0].text if status is not None and status.message.parts else ""
            if "cancelled" not in seen and text and not text.startswith("calling "):
                cancelled = await blocking.cancel_task(CancelTaskRequest(id=event.status_update.task_id))
                seen["cancelled"] = MessageToDict(cancelled)
        try:
            await blocking.cancel_task(CancelTaskRequest(id=seen["cancelled"]["id"]))
        except Exception as e:
            seen["cancel_again"] = type(e).__name__
    elif mode == "answer":
        async for event in blocking.send_message(message(prompt)):
            first = event.task
        seen["asked"] = MessageToDict(first)
        if first.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            async for event in blocking.send_message(message(answer, first.id, first.context_id)):
                seen["task"] = MessageToDict(event.task)
    await http.aclose()
    print(json.dumps(seen))


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else ""))
