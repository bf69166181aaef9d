"""A loopback stand-in for SGLang's streaming `/generate` with known timing, for tests and accuracy scripts.

It streams in SGLang 0.5.16's exact shape (cumulative `text` and `completion_tokens`, several tokens per
chunk, `spec_verify_ct` and `finish_reason` in the final chunk, then `data: [DONE]`) on a keep-alive
HTTP/1.1 connection, and records when it sent each chunk (`time.perf_counter`, which is the same clock in
every process on one host). Faults can be switched on: HTTP errors, non-JSON bodies, garbled SSE, dropped
connections, a server that dies after some requests, `/flush_cache` answering 400, an API key.

Run it alone with `python -m specmon.testing.loopback_server --port 0 --tokens-per-s 100` (prints its URL);
`GET /_loopback/sent` answers what it sent: every stream's chunk send times and cumulative token counts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from specmon.sglang.metric_names import GENERATION_TOKENS_TOTAL, SPEC_VERIFY_CALLS_TOTAL

WORDS = (
    "the model server reads each prompt and writes a careful answer about cache memory speed tokens draft",
    "verify accept batch graph kernel latency throughput request stream chunk client timing budget preset",
    "warmup flush metric sample median interval bound report table chart panel value signal noise clock",
)
VOCABULARY = [word for line in WORDS for word in line.split()]


@dataclass
class LoopbackConfig:
    """How the loopback server behaves. `chunk_tokens` cycles: tokens per decode chunk (one verify step);
    `rate_jitter` varies the rate per prompt (the same prompt always gets the same rate), as content does."""

    tokens_per_s: float = 1000.0
    chunk_tokens: list[int] = field(default_factory=lambda: [3, 2, 4, 1])
    ttft_s: float = 0.002
    speculative: bool = True
    api_key: str | None = None
    fail_status: int | None = None
    fail_body: bytes = b'{"error": {"message": "boom"}}'
    non_json: bool = False
    garbled_after_chunks: int | None = None
    drop_after_chunks: int | None = None
    die_after_requests: int | None = None
    flush_failures: int = 0
    metrics: bool = True
    report_accept_length: float | None = None
    error_event: bool = False
    replay: bytes | None = None
    rate_jitter: float = 0.0
    incremental_text: bool = False
    replay_gap_s: float = 0.001


@dataclass
class SentStream:
    """What the server sent for one request: chunk send times and cumulative token counts."""

    rid: str
    send_times: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)

    @property
    def decode_tok_s(self) -> float:
        """The truth: (tokens after the first chunk) / (last send - first send)."""
        span = self.send_times[-1] - self.send_times[0]
        return (self.tokens[-1] - self.tokens[0]) / span if span > 0 else 0.0


class LoopbackServer:
    """The server on 127.0.0.1, run on its own thread: `start()` returns the base URL, `stop()` ends it."""

    def __init__(self, config: LoopbackConfig | None = None, port: int = 0) -> None:
        self.config = config or LoopbackConfig()
        self.port = port
        self.sent: list[SentStream] = []
        self.requests_seen: list[dict[str, Any]] = []
        self.headers_seen: list[dict[str, str]] = []
        self.flush_calls = 0
        self.connections = 0
        self.most_open = 0  # the most connections open at once
        self.generation_tokens = 0
        self.verify_calls = 0
        self._spec_tokens_since_flush = 0
        self._spec_steps_since_flush = 0
        self._served = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> str:
        self._thread = threading.Thread(target=self._run, name="loopback-sglang", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("loopback server did not start")
        return self.url

    def stop(self) -> None:
        if self._loop is not None and self._loop.is_running():
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> LoopbackServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._open())
        self._ready.set()
        self._loop.run_forever()
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    async def _open(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    # -- HTTP ----------------------------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        self.connections += 1
        self.most_open = max(self.most_open, len(self._writers))
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request_line, *header_lines = head.decode("latin-1").split("\r\n")
                method, path, _ = request_line.split(" ", 2)
                headers = {}
                for line in header_lines:
                    if ":" in line:
                        name, value = line.split(":", 1)
                        headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0") or 0)
                body = await reader.readexactly(length) if length else b""
                if not await self._route(method, path, headers, body, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _respond(
        self, writer: asyncio.StreamWriter, status: int, body: bytes, content_type: str = "application/json"
    ) -> None:
        reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found"}.get(status, "Error")
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\ncontent-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()

    async def _route(self, method: str, path: str, headers: dict[str, str], body: bytes, writer: Any) -> bool:
        cfg = self.config
        path = path.split("?", 1)[0]
        if cfg.api_key and not path.startswith(("/health", "/metrics")):
            self.headers_seen.append(headers)
            if headers.get("authorization") != f"Bearer {cfg.api_key}":
                await self._respond(writer, 401, b'{"error": "Unauthorized"}')
                return True
        if path == "/generate" and method == "POST":
            return await self._generate(json.loads(body), writer)
        if path in ("/server_info", "/get_server_info"):
            await self._respond(writer, 200, json.dumps(self._server_info()).encode())
        elif path == "/flush_cache":
            self.flush_calls += 1
            if self.flush_calls <= cfg.flush_failures:
                await self._respond(writer, 400, b"Cache flushed.\nPlease check backend logs", "text/plain")
            else:
                self._spec_tokens_since_flush = self._spec_steps_since_flush = 0
                await self._respond(writer, 200, b"Cache flushed.\n", "text/plain")
        elif path == "/metrics" and cfg.metrics:
            await self._respond(writer, 200, self._metrics_text().encode(), "text/plain; version=0.0.4")
        elif path == "/_loopback/sent":
            sent = [{"rid": x.rid, "send_times": x.send_times, "tokens": x.tokens} for x in self.sent]
            await self._respond(writer, 200, json.dumps(sent).encode())
        elif path == "/health":
            await self._respond(writer, 200, b"")
        else:
            await self._respond(writer, 404, b'{"detail": "Not Found"}')
        return True

    def _server_info(self) -> dict[str, Any]:
        cfg = self.config
        state: dict[str, Any] = {"last_gen_throughput": cfg.tokens_per_s}
        if cfg.speculative and self._spec_steps_since_flush:
            state["avg_spec_accept_length"] = (
                cfg.report_accept_length
                if cfg.report_accept_length is not None
                else self._spec_tokens_since_flush / self._spec_steps_since_flush
            )
        return {
            "version": "0.5.16-loopback",
            "model_path": "loopback/model",
            "tp_size": 1,
            "speculative_algorithm": "EAGLE3" if cfg.speculative else None,
            "speculative_num_steps": 3 if cfg.speculative else None,
            "speculative_eagle_topk": 1 if cfg.speculative else None,
            "speculative_num_draft_tokens": 4 if cfg.speculative else None,
            "internal_states": [state],
        }

    def _metrics_text(self) -> str:
        labels = '{model_name="loopback",engine_type="unified",tp_rank="0",pp_rank="0"}'
        return (
            f"# HELP {GENERATION_TOKENS_TOTAL} Number of generation tokens processed.\n"
            f"# TYPE {GENERATION_TOKENS_TOTAL} counter\n"
            f"{GENERATION_TOKENS_TOTAL}{labels} {float(self.generation_tokens)}\n"
            f"# HELP {SPEC_VERIFY_CALLS_TOTAL} Number of speculative verify calls.\n"
            f"# TYPE {SPEC_VERIFY_CALLS_TOTAL} counter\n"
            f"{SPEC_VERIFY_CALLS_TOTAL}{labels} {float(self.verify_calls)}\n"
        )

    async def _generate(self, request: dict[str, Any], writer: asyncio.StreamWriter) -> bool:
        cfg = self.config
        self.requests_seen.append(request)
        self._served += 1
        if cfg.die_after_requests is not None and self._served > cfg.die_after_requests:
            await self._shutdown()
            return False
        if cfg.fail_status:
            await self._respond(writer, cfg.fail_status, cfg.fail_body)
            return True
        if cfg.non_json:
            await self._respond(writer, 200, b"<html><body>502 Bad Gateway</body></html>", "text/html")
            return True
        if cfg.replay is not None:
            return await self._replay(cfg.replay, writer)
        max_new = int((request.get("sampling_params") or {}).get("max_new_tokens", 128))
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        rid = uuid.uuid4().hex
        rng = random.Random(str(request.get("text")))
        words = [rng.choice(VOCABULARY) for _ in range(max_new)]
        rate = cfg.tokens_per_s * (1.0 + cfg.rate_jitter * (2.0 * rng.random() - 1.0))
        sent = SentStream(rid)
        self.sent.append(sent)
        await asyncio.sleep(cfg.ttft_s)
        start = time.perf_counter()
        tokens, steps, chunk_no = 1, 0, 0
        sent_text = ""
        pattern = cfg.chunk_tokens or [1]
        while True:
            final = tokens >= max_new
            meta: dict[str, Any] = {
                "id": rid,
                "finish_reason": {"type": "length", "length": max_new} if final else None,
                "prompt_tokens": 9,
                "completion_tokens": tokens,
                "cached_tokens": 0,
            }
            if final:
                meta["e2e_latency"] = time.perf_counter() - start + cfg.ttft_s
                if cfg.speculative:
                    meta["spec_verify_ct"] = steps
                    meta["spec_accept_length"] = tokens / steps if steps else 1.0
            text = " ".join(words[:tokens])
            if cfg.incremental_text:  # --incremental-streaming-output: each chunk carries only the new text
                text, sent_text = text[len(sent_text) :], text
            else:
                sent_text = text
            event = {"text": text, "output_ids": list(range(tokens)), "meta_info": meta}
            data = b"data: " + json.dumps(event).encode() + b"\n\n"
            if cfg.garbled_after_chunks is not None and chunk_no >= cfg.garbled_after_chunks:
                data = b'data: {"text": "half an obj\n\n'
            if cfg.error_event and chunk_no == 2:
                data = b'data: {"error": {"message": "Request aborted: out of memory"}}\n\n'
            if cfg.drop_after_chunks is not None and chunk_no >= cfg.drop_after_chunks:
                writer.transport.abort()
                return False
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await writer.drain()
            sent.send_times.append(time.perf_counter())
            sent.tokens.append(tokens)
            chunk_no += 1
            if final:
                break
            step_tokens = min(pattern[steps % len(pattern)], max_new - tokens)
            steps += 1
            target = start + (tokens + step_tokens - 1) / rate
            tokens += step_tokens
            delay = target - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        done = b"data: [DONE]\n\n"
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
        await writer.drain()
        self.generation_tokens += tokens
        if cfg.speculative:
            self.verify_calls += steps
            self._spec_tokens_since_flush += tokens
            self._spec_steps_since_flush += steps
        return True

    async def _replay(self, recorded: bytes, writer: asyncio.StreamWriter) -> bool:
        """Send a recorded SSE body event by event, `replay_gap_s` apart."""
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        for event in recorded.split(b"\n\n"):
            if event.strip():
                data = event.strip() + b"\n\n"
                writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                await writer.drain()
                await asyncio.sleep(self.config.replay_gap_s)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A loopback SGLang /generate stream with known timing.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tokens-per-s", type=float, default=1000.0)
    parser.add_argument("--chunk-tokens", default="3,2,4,1", help="tokens per decode chunk, cycled")
    parser.add_argument("--ttft-s", type=float, default=0.002)
    args = parser.parse_args(argv)
    config = LoopbackConfig(
        tokens_per_s=args.tokens_per_s,
        chunk_tokens=[int(x) for x in args.chunk_tokens.split(",")],
        ttft_s=args.ttft_s,
    )
    server = LoopbackServer(config, port=args.port)
    print(server.start(), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
