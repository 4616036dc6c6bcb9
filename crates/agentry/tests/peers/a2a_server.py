"""A remote A2A agent built with the official A2A Python SDK (`a2a-sdk`), for agentry's A2A
client. Prints `PORT=<n>` once it listens on 127.0.0.1 (a free port).

What it does, by the text of the message:
    hello   completes: artifact "hi from the SDK agent"
    slow    works ("reading page 1 of 5"), until cancelled: then CANCELED, "stopped after 2 of 5 pages"
    delete  asks for input ("May I delete the old files?"); "yes" completes with "deleted",
            anything else with "kept them"
    fail    fails ("the archive is offline")
"""

import asyncio
import socket
import sys

import uvicorn
from starlette.applications import Starlette

from a2a.helpers import get_message_text, new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, TaskState


class Executor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = get_message_text(context.message).strip()
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        say = lambda words: updater.new_agent_message([new_text_part(words)])
        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            answer = "deleted" if text.lower().startswith("yes") else "kept them"
            await updater.add_artifact([new_text_part(answer)], name="answer", last_chunk=True)
            await updater.complete()
        elif "hello" in text:
            await updater.start_work()
            await updater.add_artifact([new_text_part("hi from the SDK agent")], name="answer", last_chunk=True)
            await updater.complete()
        elif "slow" in text:
            await updater.start_work(say("reading page 1 of 5"))
            await asyncio.Event().wait()
        elif "delete" in text:
            await updater.requires_input(say("May I delete the old files?"))
        elif "fail" in text:
            await updater.failed(say("the archive is offline"))
        else:
            await updater.add_artifact([new_text_part(f"echo: {text}")], name="answer", last_chunk=True)
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel(updater.new_agent_message([new_text_part("stopped after 2 of 5 pages")]))


def main():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    # Listening before the port is printed: a client that connects at once waits in the
    # backlog until uvicorn accepts, instead of being refused.
    sock.listen(128)
    port = sock.getsockname()[1]
    card = AgentCard(
        name="Archive Agent",
        description="Reads the archive and answers from it",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=f"http://127.0.0.1:{port}/", protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="archive", name="Archive", description="Answers from the archive", tags=["archive"])],
    )
    handler = DefaultRequestHandler(agent_executor=Executor(), task_store=InMemoryTaskStore(), agent_card=card)
    app = Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/")])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    print(f"PORT={port}", flush=True)
    asyncio.run(server.serve(sockets=[sock]))


main()
