"""SGLang's HTTP API on the emulator's port (stdlib ThreadingHTTPServer, HTTP/1.1 keep-alive, chunked SSE)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from specmon.emulator.launch_args import public_args
from specmon.emulator.meta import meta_info
from specmon.emulator.metrics import EmulatorMetrics
from specmon.emulator.scheduler import EmulatedScheduler, GenRequest
from specmon.emulator.sglang_log import SGLangLogWriter
from specmon.emulator.speed_model import count_prompt_tokens

FLUSH_BODY = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, "
    "the operation will not be performed.)\n"
)


@dataclass
class ServerState:
    """What the HTTP handlers read: settings, the scheduler, the startup results, and whether warmup is done."""

    server_args: dict[str, Any]
    family: str
    scheduler: EmulatedScheduler
    log: SGLangLogWriter
    metrics: EmulatorMetrics | None
    max_total_num_tokens: int
    memory_usage: dict[str, float]
    seed: int = 0
    up: threading.Event = field(default_factory=threading.Event)
    architecture: str = "LlamaForCausalLM"
    model_type: str = "llama"

    @property
    def version(self) -> str:
        return "0.5.16-emulated" if self.family == "new" else "0.5.3-emulated"

    def server_info(self) -> dict[str, Any]:
        args = public_args(self.server_args)
        internal = dict(args)
        internal["last_gen_throughput"] = self.scheduler.last_gen_throughput
        internal["memory_usage"] = dict(self.memory_usage)
        internal["effective_max_running_requests_per_dp"] = args.get("max_running_requests")
        if args.get("speculative_algorithm"):
            internal["max_speculative_num_draft_tokens"] = args.get("speculative_num_draft_tokens")
        if (step_times := self.scheduler.step_times()) is not None:
            internal["step_time_dict"] = step_times
        avg = self.scheduler.avg_spec_accept_length()
        if avg is not None:
            internal["avg_spec_accept_length"] = avg
        info = dict(args)
        info.update(
            {
                "max_total_num_tokens": self.max_total_num_tokens,
                "max_req_input_len": int(args.get("context_length") or 32768) - 6,
                "internal_states": [internal],
                "status": "ready" if self.up.is_set() else "starting",
                "version": self.version,
                "emulator": True,
            }
        )
        if self.family == "new":
            info.setdefault("kv_events", None)
        return info

    def model_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "model_path": self.server_args.get("model_path"),
            "tokenizer_path": self.server_args.get("tokenizer_path"),
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
        }
        if self.family == "new":
            info.update(
                {
                    "has_image_understanding": False,
                    "has_audio_understanding": False,
                    "model_type": self.model_type,
                    "architectures": [self.architecture],
                }
            )
        info["emulator"] = True
        return info


class SGLangRequestHandler(BaseHTTPRequestHandler):
    """Routes SGLang's endpoints; access lines go to stdout in uvicorn's format."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    server: SGLangHTTPServer
    _status: int | None  # the status sent for the request being answered (None before it is sent)

    # --- plumbing -----------------------------------------------------------------------------
    @property
    def state(self) -> ServerState:
        return self.server.state

    def version_string(self) -> str:
        return "uvicorn"

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        try:
            status = int(code)
        except (TypeError, ValueError):
            return
        self.state.log.access(self.client_address, self.requestline, status)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        return

    def send_response(self, code: int, message: str | None = None) -> None:
        self._status = code
        super().send_response(code, message)

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj, separators=(",", ":")).encode())

    def _read_body(self) -> bytes:
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _read_json_object(self) -> dict[str, Any] | None:
        """The request's JSON object; None after answering 400 when the body is not one."""
        body = self._read_body()
        content_type = (self.headers.get("content-type") or "").lower()
        try:
            if content_type.startswith("application/x-www-form-urlencoded"):
                raise ValueError("form-encoded body")
            parsed = json.loads(body or b"{}")
        except ValueError:
            self._error(400, "The request body must be JSON.")
            return None
        if not isinstance(parsed, dict):
            self._error(400, "The request body must be a JSON object.")
            return None
        return parsed

    def _authorized(self, path: str) -> bool:
        key = self.state.server_args.get("api_key")
        if not key or self.command == "OPTIONS" or path.startswith("/health") or path.startswith("/metrics"):
            return True
        return self.headers.get("authorization", "") == f"Bearer {key}"

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _sse(self, obj: Any) -> None:
        payload = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
        self._chunk(f"data: {payload}\n\n".encode())

    # --- dispatch -----------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802
        self._dispatch()

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch()

    def _dispatch(self) -> None:
        """Route one request, counted by SGLang's HTTP middleware metrics (`http_requests_total`, ...)."""
        path = urlsplit(self.path).path
        metrics = self.state.metrics
        self._status = None
        if metrics is not None:
            metrics.http_started(path, self.command)
        try:
            self._route(path)
        finally:
            if metrics is not None:
                metrics.http_finished(path, self.command, self._status)

    def _route(self, path: str) -> None:
        if not self._authorized(path):
            self._read_body()
            self._json(401, {"error": "Unauthorized"})
            return
        route = self._routes().get((self.command, path)) or self._routes().get(("*", path))
        if route is None:
            self._read_body()
            self._json(404, {"detail": "Not Found"})
            return
        try:
            route()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _routes(self) -> dict[tuple[str, str], Any]:
        new = self.state.family == "new"
        routes: dict[tuple[str, str], Any] = {
            ("*", "/health"): self._health,
            ("*", "/health_generate"): self._health,
            ("GET", "/get_model_info"): self._get_model_info,
            ("GET", "/get_server_info"): self._get_server_info,
            ("*", "/flush_cache"): self._flush_cache,
            ("POST", "/generate"): self._generate,
            ("POST", "/v1/completions"): self._v1_completions,
            ("POST", "/v1/chat/completions"): self._v1_chat,
            ("GET", "/v1/models"): self._v1_models,
        }
        if new:
            routes[("GET", "/model_info")] = self._model_info
            routes[("GET", "/server_info")] = self._server_info
        if self.state.metrics is not None:
            routes[("GET", "/metrics")] = self._metrics
        return routes

    # --- simple endpoints ---------------------------------------------------------------------
    def _health(self) -> None:
        self._read_body()
        if not self.state.up.is_set():
            self._send(503, b"", "text/plain")
            return
        if self.state.family == "new":
            self.state.log.info(
                "Prefill batch, #new-seq: 1, #new-token: 1, #cached-token: 0, token usage: 0.00, "
                "#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, "
                "input throughput (token/s): 0.49"
            )
        self._send(200, b"", "text/plain")

    def _deprecated(self, old: str, new: str) -> None:
        if self.state.family == "new":
            self.state.log.warning(
                f"Endpoint '{old}' is deprecated and will be removed in a future version. Please use '{new}' instead."
            )

    def _model_info(self) -> None:
        self._json(200, self.state.model_info())

    def _get_model_info(self) -> None:
        self._deprecated("/get_model_info", "/model_info")
        self._model_info()

    def _server_info(self) -> None:
        self._json(200, self.state.server_info())

    def _get_server_info(self) -> None:
        self._deprecated("/get_server_info", "/server_info")
        self._server_info()

    def _flush_cache(self) -> None:
        self._read_body()
        ok = self.state.scheduler.flush_cache()
        self._send(200 if ok else 400, FLUSH_BODY.encode(), "text/plain; charset=utf-8")

    def _metrics(self) -> None:
        assert self.state.metrics is not None
        self._send(200, self.state.metrics.render(), "text/plain; version=0.0.4; charset=utf-8")

    # --- generation ---------------------------------------------------------------------------
    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": {"message": message}})

    def _new_request(self, prompt: str, prompt_tokens: int, sampling: dict[str, Any]) -> GenRequest:
        return self.state.scheduler.new_request(prompt, prompt_tokens, sampling, self.state.seed)

    def _prompts(self, body: dict[str, Any]) -> list[tuple[str, int, list[int] | None]] | None:
        """Each prompt of the body: its text (token ids spelt out), its tokens, its ids where it came as ids."""
        text, input_ids = body.get("text"), body.get("input_ids")
        if text is not None:
            texts = text if isinstance(text, list) else [text]
            return [(str(t), count_prompt_tokens(str(t)), None) for t in texts]
        if isinstance(input_ids, list) and input_ids:
            batches = input_ids if isinstance(input_ids[0], list) else [input_ids]
            if not all(ids and all(type(i) is int for i in ids) for ids in batches):
                return None
            return [(" ".join(str(i) for i in ids), len(ids), ids) for ids in batches]
        return None

    def _generate(self) -> None:
        body = self._read_json_object()
        if body is None:
            return
        prompts = self._prompts(body)
        if not prompts:
            self._error(400, "Either text, input_ids or input_embeds should be provided.")
            return
        sampling = body.get("sampling_params") or {}
        if not isinstance(sampling, dict):
            self._error(400, "sampling_params must be an object.")
            return
        try:
            requests = [self._new_request(p, n, sampling) for p, n, _ in prompts]
        except (TypeError, ValueError) as error:
            self._error(400, f"Invalid sampling_params: {error}")
            return
        for request, (_, _, ids) in zip(requests, prompts, strict=True):
            request.input_ids = ids
        if body.get("rid") and len(requests) == 1:
            requests[0].rid = str(body["rid"])
        for request in requests:
            self.state.scheduler.submit(request)
        if body.get("stream"):
            self._stream_generate(requests[0])
            return
        results = [self._wait_final(request) for request in requests]
        batched = isinstance(body.get("text"), list) or (
            isinstance(body.get("input_ids"), list) and body["input_ids"] and isinstance(body["input_ids"][0], list)
        )
        self._json(200, results if batched else results[0])

    def _wait_final(self, request: GenRequest) -> dict[str, Any]:
        while True:
            _text, count, finished = request.events.get()
            if finished:
                return self._chunk_obj(request, request.text, count, final=True)

    def _chunk_obj(self, request: GenRequest, text: str, count: int, *, final: bool, first: bool = False) -> dict:
        scheduler = self.state.scheduler
        return {
            "text": text,
            "output_ids": request.output_ids[:count],
            "meta_info": meta_info(request, count, family=scheduler.family, speculative=scheduler.speed.shape.enabled,
                                   dp_groups=scheduler.dp_groups, final=final, first=first),
        }

    def _stream_generate(self, request: GenRequest) -> None:
        try:
            self._start_stream()
            first = True
            while True:
                text, count, finished = request.events.get()
                self._sse(self._chunk_obj(request, text, count, final=finished, first=first))
                first = False
                if finished:
                    break
            self._sse("[DONE]")
            self._end_stream()
        except (BrokenPipeError, ConnectionResetError):
            request.aborted = True
            self.close_connection = True

    # --- OpenAI-compatible ---------------------------------------------------------------------
    def _openai_sampling(self, body: dict[str, Any]) -> dict[str, Any]:
        sampling: dict[str, Any] = {
            "max_new_tokens": body.get("max_completion_tokens") or body.get("max_tokens") or 128,
            "temperature": body.get("temperature", 1.0),
            "ignore_eos": body.get("ignore_eos", False),
        }
        if body.get("stop"):
            sampling["stop"] = body["stop"]
        if body.get("seed") is not None:
            sampling["sampling_seed"] = body["seed"]
        return sampling

    def _v1_models(self) -> None:
        name = self.state.server_args.get("served_model_name")
        self._json(
            200,
            {"object": "list", "data": [{"id": name, "object": "model", "created": int(time.time()),
                                          "owned_by": "sglang", "root": name, "max_model_len":
                                          self.state.server_args.get("context_length")}]},
        )

    def _v1_completions(self) -> None:
        self._openai(chat=False)

    def _v1_chat(self) -> None:
        self._openai(chat=True)

    def _openai(self, *, chat: bool) -> None:
        body = self._read_json_object()
        if body is None:
            return
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                self._error(400, "messages must be a non-empty list.")
                return
            prompt = "\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in messages
                               if isinstance(m, dict))
        else:
            given = body.get("prompt")
            if isinstance(given, list):
                given = given[0] if given else ""
            if not isinstance(given, str):
                self._error(400, "prompt must be a string.")
                return
            prompt = given
        try:
            request = self._new_request(prompt, count_prompt_tokens(prompt), self._openai_sampling(body))
        except (TypeError, ValueError) as error:
            self._error(400, f"Invalid request: {error}")
            return
        self.state.scheduler.submit(request)
        cid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        model = body.get("model") or self.state.server_args.get("served_model_name")
        if body.get("stream"):
            self._openai_stream(request, cid, created, model, chat, body)
        else:
            self._wait_final(request)
            self._json(200, self._openai_final(request, cid, created, model, chat))

    def _usage(self, request: GenRequest) -> dict[str, Any]:
        return {
            "prompt_tokens": request.prompt_tokens,
            "completion_tokens": request.completion_tokens,
            "total_tokens": request.prompt_tokens + request.completion_tokens,
            "prompt_tokens_details": None,
        }

    @staticmethod
    def _finish(request: GenRequest) -> tuple[str | None, Any]:
        reason = request.finish_reason
        if reason is None:
            return None, None
        return reason["type"], reason.get("matched")

    def _openai_final(self, request: GenRequest, cid: str, created: int, model: object, chat: bool) -> dict:
        finish, matched = self._finish(request)
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": request.text},
                      "logprobs": None, "finish_reason": finish, "matched_stop": matched}
        else:
            choice = {"index": 0, "text": request.text, "logprobs": None, "finish_reason": finish,
                      "matched_stop": matched}
        return {"id": cid, "object": "chat.completion" if chat else "text_completion", "created": created,
                "model": model, "choices": [choice], "usage": self._usage(request)}

    def _openai_stream(self, request: GenRequest, cid: str, created: int, model: object, chat: bool, body) -> None:
        kind = "chat.completion.chunk" if chat else "text_completion"
        sent = ""
        try:
            self._start_stream()
            first = True
            while True:
                text, _count, finished = request.events.get()
                delta, sent = text[len(sent):], text
                finish = self._finish(request)[0] if finished else None
                if chat:
                    delta_obj = {"role": "assistant", "content": delta} if first else {"content": delta}
                    choice = {"index": 0, "delta": delta_obj, "logprobs": None, "finish_reason": finish}
                else:
                    choice = {"index": 0, "text": delta, "logprobs": None, "finish_reason": finish}
                self._sse({"id": cid, "object": kind, "created": created, "model": model, "choices": [choice]})
                first = False
                if finished:
                    break
            if (body.get("stream_options") or {}).get("include_usage"):
                self._sse({"id": cid, "object": kind, "created": created, "model": model, "choices": [],
                           "usage": self._usage(request)})
            self._sse("[DONE]")
            self._end_stream()
        except (BrokenPipeError, ConnectionResetError):
            request.aborted = True
            self.close_connection = True


class StopRequested(Exception):
    """`SGLangHTTPServer.serve_forever` returns by raising this once `request_stop` was called."""


class SGLangHTTPServer(ThreadingHTTPServer):
    """The emulator's SGLang port. Binding is separate (`bind_and_listen`) so a taken port fails like uvicorn."""

    daemon_threads = True
    allow_reuse_address = True
    stop_requested = False

    def request_stop(self) -> None:
        """End `serve_forever` within its poll interval. Safe in a signal handler, as it takes no lock: a handler
        that takes one (a log write, `shutdown`'s event, a new thread) deadlocks when the signal lands while the
        main thread holds that lock, as a second SIGTERM in the middle of the first one's log line did."""
        self.stop_requested = True

    def service_actions(self) -> None:
        if self.stop_requested:
            raise StopRequested

    def __init__(self, host: str, port: int, state: ServerState) -> None:
        self.state = state
        super().__init__((host, port), SGLangRequestHandler, bind_and_activate=False)

    def bind_and_listen(self) -> None:
        self.server_bind()
        self.server_activate()
