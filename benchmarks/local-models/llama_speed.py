#!/usr/bin/env python3
"""llama-server's side of the speed table in BENCHMARKS.md: the requests of agentry-local's
`examples/speed.rs`, sent to a llama-server it starts on the same GGUF, one JSON line out.

    benchmarks/local-models/llama_speed.py LLAMA_SERVER MODEL.gguf THREADS [MAX_TOKENS] [PROMPT_FILE]

Load is the time until /health answers. Prompt and generation rates are the server's own
`timings` of the first request; the second step is the same conversation one turn later, with
the server's prompt cache and without it (`cache_prompt: false`); the tool round trip is the
request that carries a `multiply` result, timed after the request that asked for the call (so
the prefix is cached, as in agentry); it needs a template that gets the call parsed, e.g.
LLAMA_ARGS="--chat-template-file benchmarks/local-models/qwen2.5-fenced.jinja". Peak RSS is the
server's VmHWM. LLAMA_ARGS adds arguments to the server's command line.
"""
import os
import json
import subprocess
import sys
import time
import urllib.request

SYSTEM = "You are a helpful assistant."
USER = "Write a story of about 150 words about a lighthouse keeper who finds a message in a bottle."
PORT = 18090


def main():
    server, model, threads = sys.argv[1], sys.argv[2], sys.argv[3]
    max_tokens = int(sys.argv[4]) if len(sys.argv) > 4 else 128
    question = open(sys.argv[5]).read() if len(sys.argv) > 5 else USER
    started = time.time()
    proc = subprocess.Popen(
        [server, "-m", model, "--host", "127.0.0.1", "--port", str(PORT), "-c", "8192", "-np", "1",
         "-t", threads, "--offline", "--jinja"] + os.environ.get("LLAMA_ARGS", "").split(),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health") as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.02)
        load = time.time() - started

        def post(body):
            req = urllib.request.Request(f"http://127.0.0.1:{PORT}/v1/chat/completions",
                                         json.dumps(body).encode(), {"Content-Type": "application/json"})
            s = time.time()
            with urllib.request.urlopen(req) as r:
                out = json.load(r)
            return out, time.time() - s

        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
        first, _ = post({"messages": messages, "max_tokens": max_tokens, "temperature": 0})
        timings = first["timings"]
        answer = first["choices"][0]["message"]["content"]
        following = messages + [{"role": "assistant", "content": answer},
                                {"role": "user", "content": "Now give it a title."}]
        second, second_s = post({"messages": following, "max_tokens": max_tokens, "temperature": 0})
        _, cold_s = post({"messages": following, "max_tokens": max_tokens, "temperature": 0,
                          "cache_prompt": False})

        tools = [{"type": "function", "function": {
            "name": "multiply", "description": "Multiplies two integers exactly.",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                           "required": ["a", "b"]}}}]
        asked = [{"role": "system", "content": "You are a helpful assistant. Use the tools for arithmetic."},
                 {"role": "user", "content": "What is 1234 times 5678?"}]
        call, _ = post({"messages": asked, "tools": tools, "max_tokens": max_tokens, "temperature": 0})
        message = call["choices"][0]["message"]
        calls = message.get("tool_calls") or []
        round_trip = None
        tool_answer = message.get("content")
        if calls:
            with_result = asked + [
                {"role": "assistant", "content": message.get("content") or "", "tool_calls": calls},
                {"role": "tool", "tool_call_id": calls[0]["id"], "content": "7006652"}]
            done, round_trip = post({"messages": with_result, "tools": tools, "max_tokens": max_tokens,
                                     "temperature": 0})
            answer = done["choices"][0]["message"]
            # A second call instead of an answer is not a round trip: say so in the output.
            tool_answer = answer.get("content") or {"tool_calls": [c["function"] for c in answer.get("tool_calls") or []]}

        peak = 0.0
        with open(f"/proc/{proc.pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    peak = int(line.split()[1]) / 1024
        print(json.dumps({
            "model": model, "threads": int(threads), "load_s": load,
            "prompt_tokens": timings["prompt_n"], "prompt_tok_s": timings["prompt_per_second"],
            "generated_tokens": timings["predicted_n"], "generation_tok_s": timings["predicted_per_second"],
            "second_step_s": second_s, "second_step_prompt_tokens": second["timings"]["prompt_n"],
            "second_step_cached_tokens": second["timings"].get("cache_n"),
            "second_step_without_reuse_s": cold_s,
            "tool_calls": [c["function"] for c in calls], "tool_round_trip_s": round_trip,
            "tool_answer": tool_answer, "peak_rss_mb": peak}))
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
