#!/usr/bin/env python3
"""A real streaming inference server for devgate slo's tests and bench, on the
loopback only.

A small PyTorch model (byte embedding, a few layers, random seeded weights, a
byte tokenizer: token i is the printable character 32 + i % 95) generates
every token with a real forward pass; the time each token is released is
planted, so the percentiles devgate measures have a known truth:

  TTFT of request i  = queue wait (--slots) + a draw of --ttft (ms)
  each later token   = a draw of --tpot (ms) for request i, the same for all its tokens

Distributions: fixed:A, uniform:A:B, lognormal:MEDIAN:SIGMA (ms). Draws come
from random.Random(seed, request index), so a run is reproducible.

Endpoints: POST /v1/completions and /v1/chat/completions (OpenAI server-sent
events, usage at the end when stream_options.include_usage), POST
/api/generate and /api/chat (Ollama NDJSON with eval_count / eval_duration),
GET /v1/models, /api/tags, /api/ps, /metrics (Prometheus text, vLLM's names).

--compute-iters N makes every token cost real CPU work (N products of a
256x256 matrix, run in the event loop): such a server slows when something
else takes the cores, as a CPU-bound engine does.

Faults: --fail-every N (every Nth request answers HTTP 500), --hang-every N
(every Nth request stops after its first token for --hang-s), --die-after N
(the process exits while the Nth request streams). --log FILE gets one JSON
line per request served: its planted draws, its wait for a slot and when its
first token really went out and when its last byte did (first_ms, end_ms,
from the request's arrival: the planted times plus whatever late the event
loop woke).

  python3 slo_server.py --port-file P --ttft uniform:20:60 --tpot fixed:2
"""
import argparse
import asyncio
import json
import math
import os
import random
import socket
import sys
import time

import torch
from aiohttp import web


def parse_dist(text):
    parts = text.split(":")
    kind, args = parts[0], [float(x) for x in parts[1:]]
    need = {"fixed": 1, "uniform": 2, "lognormal": 2}
    if kind not in need or len(args) != need[kind]:
        raise argparse.ArgumentTypeError(
            "want fixed:A, uniform:A:B or lognormal:MEDIAN:SIGMA (ms), got %r" % text)
    return (kind, args)


def draw(dist, rng):
    kind, a = dist
    if kind == "fixed":
        return a[0]
    if kind == "uniform":
        return rng.uniform(a[0], a[1])
    return a[0] * math.exp(rng.gauss(0, a[1]))


class TinyLM(torch.nn.Module):
    """Byte embedding, a few residual MLP layers over a running state, logits over bytes."""

    def __init__(self, width=64, layers=3):
        super().__init__()
        self.emb = torch.nn.Embedding(256, width)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(layers))
        self.head = torch.nn.Linear(width, 256)

    def forward(self, tokens, state):
        h = self.emb(tokens).mean(dim=0) + state
        for layer in self.layers:
            h = h + torch.nn.functional.gelu(layer(h))
        return self.head(h), torch.tanh(h)


class Server:
    def __init__(self, args):
        self.args = args
        torch.manual_seed(args.seed)
        torch.set_num_threads(1)
        self.model = TinyLM().eval()
        self.count = 0
        self.running = 0
        self.waiting = 0
        self.tokens_total = 0
        self.slots = asyncio.Semaphore(args.slots) if args.slots > 0 else None
        self.log = open(args.log, "a", buffering=1) if args.log else None
        self.work = torch.randn(256, 256)
        self.work_iters = args.compute_iters

    def step(self, prompt_ids, state):
        with torch.no_grad():
            for _ in range(self.work_iters):
                torch.mm(self.work, self.work)
            logits, state = self.model(prompt_ids, state)
        tok = int(torch.argmax(logits))
        return tok, state

    async def generate(self, request, api, chat):
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            return web.json_response({"error": "the body is not JSON"}, status=400)
        self.count += 1
        idx = self.count
        rng = random.Random(self.args.seed * 1000003 + idx)
        ttft_ms, tpot_ms = draw(self.args.ttft, rng), draw(self.args.tpot, rng)
        if self.args.fail_every and idx % self.args.fail_every == 0:
            return web.json_response({"error": "planted failure"}, status=500)
        if api == "ollama":
            max_tokens = int((body.get("options") or {}).get("num_predict", 16))
        else:
            max_tokens = int(body.get("max_tokens", 16))
        if chat:
            msgs = body.get("messages") or [{}]
            prompt = str(msgs[-1].get("content", ""))
        else:
            prompt = str(body.get("prompt", ""))
        ids = torch.tensor(list(prompt.encode("utf-8")[:512]) or [0], dtype=torch.long)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        t0 = time.monotonic()
        self.waiting += 1
        if self.slots:
            await self.slots.acquire()
        self.waiting -= 1
        self.running += 1
        queue_ms = (time.monotonic() - t0) * 1e3
        resp = web.StreamResponse(headers={
            "Content-Type": "text/event-stream" if api == "openai" else "application/x-ndjson",
            "Cache-Control": "no-cache"})
        try:
            await resp.prepare(request)
            sock = request.transport.get_extra_info("socket") if request.transport else None
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            start = time.monotonic()
            state = torch.zeros(self.model.emb.embedding_dim)
            eval_start = None
            for k in range(max_tokens):
                tok, state = self.step(ids, state)
                ids = torch.cat([ids[-63:], torch.tensor([tok])])
                due = start + (ttft_ms + k * tpot_ms) / 1e3
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                if k == 0:
                    eval_start = time.monotonic()
                    first_ms = (eval_start - t0) * 1e3
                text = chr(32 + tok % 95)
                await resp.write(self.chunk(api, chat, text, k == max_tokens - 1))
                self.tokens_total += 1
                if self.args.die_after and idx >= self.args.die_after:
                    os._exit(3)
                if k == 0 and self.args.hang_every and idx % self.args.hang_every == 0:
                    await asyncio.sleep(self.args.hang_s)
            eval_ns = int((time.monotonic() - eval_start) * 1e9) if eval_start else 0
            await resp.write(self.ending(api, max_tokens, len(prompt), include_usage, eval_ns))
            await resp.write_eof()
            if self.log:
                self.log.write(json.dumps({"i": idx, "ttft_ms": ttft_ms, "tpot_ms": tpot_ms,
                                           "queue_ms": queue_ms, "first_ms": first_ms,
                                           "end_ms": (time.monotonic() - t0) * 1e3}) + "\n")
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.running -= 1
            if self.slots:
                self.slots.release()
        return resp

    def chunk(self, api, chat, text, last):
        m = self.args.model_name
        if api == "ollama":
            obj = {"model": m, "created_at": "2026-01-01T00:00:00Z", "done": False}
            if chat:
                obj["message"] = {"role": "assistant", "content": text}
            else:
                obj["response"] = text
            return (json.dumps(obj) + "\n").encode()
        choice = {"index": 0, "finish_reason": "length" if last else None}
        if chat:
            choice["delta"] = {"content": text}
        else:
            choice["text"] = text
        obj = {"id": "cmpl-1", "object": "text_completion", "model": m, "choices": [choice]}
        return ("data: " + json.dumps(obj) + "\n\n").encode()

    def ending(self, api, n, prompt_len, include_usage, eval_ns):
        if api == "ollama":
            obj = {"model": self.args.model_name, "done": True, "done_reason": "length",
                   "eval_count": n, "eval_duration": eval_ns, "prompt_eval_count": prompt_len}
            return (json.dumps(obj) + "\n").encode()
        out = ""
        if include_usage:
            usage = {"prompt_tokens": prompt_len, "completion_tokens": n,
                     "total_tokens": prompt_len + n}
            out += "data: " + json.dumps({"id": "cmpl-1", "choices": [], "usage": usage}) + "\n\n"
        return (out + "data: [DONE]\n\n").encode()

    async def metrics(self, request):
        slots = self.args.slots if self.args.slots > 0 else 1
        text = (
            "# HELP vllm:num_requests_running Requests running.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{model_name="%s"} %d\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            'vllm:num_requests_waiting{model_name="%s"} %d\n'
            "# TYPE vllm:generation_tokens_total counter\n"
            'vllm:generation_tokens_total{model_name="%s"} %d\n'
            "# TYPE vllm:gpu_cache_usage_perc gauge\n"
            'vllm:gpu_cache_usage_perc{model_name="%s"} %g\n'
        ) % (self.args.model_name, self.running, self.args.model_name, self.waiting,
             self.args.model_name, self.tokens_total, self.args.model_name,
             min(1.0, self.running / slots))
        return web.Response(text=text, content_type="text/plain")

    def app(self):
        a = web.Application()
        m = self.args.model_name
        a.router.add_post("/v1/completions", lambda r: self.generate(r, "openai", False))
        a.router.add_post("/v1/chat/completions", lambda r: self.generate(r, "openai", True))
        a.router.add_post("/api/generate", lambda r: self.generate(r, "ollama", False))
        a.router.add_post("/api/chat", lambda r: self.generate(r, "ollama", True))

        async def models(_):
            return web.json_response({"object": "list", "data": [{"id": m, "object": "model"}]})

        async def tags(_):
            return web.json_response({"models": [{"name": m, "model": m}]})

        async def ps(_):
            return web.json_response({"models": [{"name": m, "size": 1 << 20,
                                                  "size_vram": 0}]})

        a.router.add_get("/v1/models", models)
        a.router.add_get("/api/tags", tags)
        a.router.add_get("/api/ps", ps)
        a.router.add_get("/metrics", self.metrics)
        return a


async def main(args):
    server = Server(args)
    runner = web.AppRunner(server.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port, backlog=1024)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    print("slo_server: listening on %s:%d" % (args.host, port), flush=True)
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.replace(tmp, args.port_file)
    while True:
        await asyncio.sleep(3600)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file", help="the chosen port is written here once listening")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--ttft", type=parse_dist, default=parse_dist("uniform:20:60"))
    p.add_argument("--tpot", type=parse_dist, default=parse_dist("fixed:2"))
    p.add_argument("--slots", type=int, default=0, help="requests generated at once (0: any)")
    p.add_argument("--compute-iters", type=int, default=0,
                   help="256x256 matrix products per token (CPU work)")
    p.add_argument("--fail-every", type=int, default=0)
    p.add_argument("--hang-every", type=int, default=0)
    p.add_argument("--hang-s", type=float, default=30)
    p.add_argument("--die-after", type=int, default=0)
    p.add_argument("--model-name", default="tiny-bytes")
    p.add_argument("--log")
    args = p.parse_args()
    if args.host not in ("127.0.0.1", "::1", "localhost"):
        sys.exit("slo_server: loopback only (127.0.0.1, ::1)")
    asyncio.run(main(args))
