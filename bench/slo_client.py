#!/usr/bin/env python3
"""The plain client devgate slo is held against (bench/slo_overhead.sh): one
thread, one asyncio event loop, N keep-alive connections in a closed loop
against an OpenAI completions endpoint (HTTP/1.1, a Content-Length or a
chunked body), each request's TTFT (the first "data: {" bytes) and E2E (the
last byte) from time.monotonic() as the bytes are read. The standard library
only, so it runs wherever devgate's bench does. Prints one JSON line:
requests, E2E and TTFT median and p99 in ms, and the CPU time this process
used per request.

  python3 slo_client.py --url http://127.0.0.1:PORT/v1/completions --streams 64 --seconds 10
"""
import argparse
import asyncio
import json
import os
import time
from urllib.parse import urlsplit


def pct(v, p):
    v = sorted(v)
    if not v:
        return None
    pos = p * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (pos - lo) * (v[hi] - v[lo])


async def one(reader, writer, request):
    """Sends one request on the connection; (ttft, e2e) in s, or None."""
    t0 = time.monotonic()
    writer.write(request)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    first = None
    length, chunked = None, False
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
        elif k.strip().lower() == b"transfer-encoding" and b"chunked" in v.lower():
            chunked = True
    ok = head.startswith(b"HTTP/1.1 200")
    if chunked:
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            data = await reader.readexactly(size + 2)
            if first is None and b"data: {" in data:
                first = time.monotonic()
            if size == 0:
                break
    else:
        got = 0
        while got < (length or 0):
            data = await reader.read(length - got)
            if not data:
                return None
            got += len(data)
            if first is None and b"data: {" in data:
                first = time.monotonic()
    end = time.monotonic()
    return (first - t0, end - t0) if ok and first is not None else None


async def stream(host, port, request, until, ttft, e2e):
    reader, writer = await asyncio.open_connection(host, port)
    while time.monotonic() < until:
        r = await one(reader, writer, request)
        if r:
            ttft.append(r[0] * 1e3)
            e2e.append(r[1] * 1e3)
    writer.close()


async def main(args):
    u = urlsplit(args.url)
    body = json.dumps({"model": "m", "prompt": "bench", "max_tokens": args.max_tokens,
                       "stream": True, "stream_options": {"include_usage": True}}).encode()
    request = (b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % (u.path.encode(), u.netloc.encode(), len(body))
               + body)
    ttft, e2e = [], []
    # Warm-up: a short round per stream, not counted.
    await asyncio.gather(*(stream(u.hostname, u.port, request, time.monotonic() + 0.2, [], [])
                           for _ in range(args.streams)))
    cpu0 = os.times()
    until = time.monotonic() + args.seconds
    await asyncio.gather(*(stream(u.hostname, u.port, request, until, ttft, e2e)
                           for _ in range(args.streams)))
    cpu1 = os.times()
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    print(json.dumps({"client": "asyncio", "streams": args.streams, "requests": len(e2e),
                      "e2e_p50_ms": pct(e2e, 0.5), "e2e_p99_ms": pct(e2e, 0.99),
                      "ttft_p50_ms": pct(ttft, 0.5), "ttft_p99_ms": pct(ttft, 0.99),
                      "cpu_s_per_request": cpu / len(e2e) if e2e else None}))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True)
    p.add_argument("--streams", type=int, default=1)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--max-tokens", type=int, default=1)
    asyncio.run(main(p.parse_args()))
