"""The emulator's per-request records, as SGLang 0.5.16 writes them (the formats specmon.traffic.records reads).

`--export-metrics-to-file --export-metrics-to-file-dir DIR`: one JSON line per finished request in
`DIR/sglang-request-metrics-YYYYMMDD_HH.log` (the local hour), `{"request_parameters": json.dumps(obj's fields),
**meta_info}`. `--log-requests [--log-requests-level N] [--log-requests-format json|text]
[--log-requests-target stdout|DIR ...]`: json: a bare `{"timestamp", "event": "request.finished", "rid", "obj",
"out"}` line per target (stdout: SGLang's StreamHandler, i.e. stderr; DIR: `DIR/HOST_0.log`); text: `Finish:
obj=GenerateReqInput(...), out={...}` through the server log, after its dated prefix. Levels 0 and 1 leave the
prompt and output text out, level 0 also the sampling parameters; level 2 cuts strings at 2048 characters. With
--log-requests at level 0 or 1 the export file leaves out what the log does (SGLang hands its exporter the log's
skip list); without --log-requests it holds the prompt's text.
"""

from __future__ import annotations

import json
import os
import socket
from datetime import datetime
from typing import TYPE_CHECKING, Any

from specmon.emulator.meta import meta_info
from specmon.emulator.sglang_log import SGLangLogWriter

if TYPE_CHECKING:
    from specmon.emulator.scheduler import GenRequest

LEVEL2_MAX_CHARS = 2048
EXPORT_SKIPPED = {0: {"text", "input_ids", "sampling_params", "lora_path"}, 1: {"text", "input_ids", "lora_path"}}
"""What the export file leaves out of request_parameters with --log-requests at level 0 or 1: the request log's
skip list (request_logger.py `_compute_metadata`), which SGLang hands its exporter; without --log-requests, none."""


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def _cut(text: str, level: int) -> str:
    if level == 2 and len(text) > LEVEL2_MAX_CHARS:
        half = LEVEL2_MAX_CHARS // 2
        return text[:half] + "..." + text[-half:]
    return text


def _prompt(request: GenRequest, level: int) -> dict[str, Any]:
    """The request's prompt as its GenerateReqInput holds it: `text`, or `input_ids` where it came as token ids
    (kept whole: the emulator does not cut a list at level 2)."""
    if request.input_ids is not None:
        return {"input_ids": request.input_ids}
    return {"text": _cut(request.prompt, level)}


class RequestRecordWriter:
    """Writes each finished request's records where the launch's flags say; `enabled` is False with none."""

    def __init__(self, server_args: dict[str, Any], log: SGLangLogWriter, *, family: str, speculative: bool,
                 dp_groups: int) -> None:
        self.log = log
        self.family, self.speculative, self.dp_groups = family, speculative, dp_groups
        self.export_dir = server_args.get("export_metrics_to_file_dir") if server_args.get(
            "export_metrics_to_file") else None
        if self.export_dir:
            os.makedirs(self.export_dir, exist_ok=True)
        self.log_requests = bool(server_args.get("log_requests"))
        self.level = int(server_args.get("log_requests_level") or 0)
        self.format = server_args.get("log_requests_format") or "text"
        targets = server_args.get("log_requests_target") or ["stdout"]
        self.targets = [targets] if isinstance(targets, str) else list(targets)
        for target in self.targets:
            if target.lower() != "stdout":
                os.makedirs(target, exist_ok=True)

    @property
    def enabled(self) -> bool:
        return bool(self.export_dir) or self.log_requests

    def _obj(self, request: GenRequest) -> dict[str, Any]:
        obj: dict[str, Any] = {**_prompt(request, self.level), "sampling_params": request.sampling,
                               "rid": request.rid, "stream": False}
        if request.custom_labels is not None:
            obj["custom_labels"] = request.custom_labels
        if self.level <= 1:
            obj = {k: v for k, v in obj.items() if k not in EXPORT_SKIPPED[1]}
        if self.level == 0:
            del obj["sampling_params"]
        return obj

    def write(self, request: GenRequest) -> None:
        meta = meta_info(request, request.completion_tokens, family=self.family, speculative=self.speculative,
                         dp_groups=self.dp_groups, final=True)
        if self.export_dir:
            params = {**_prompt(request, 3), "sampling_params": request.sampling, "rid": request.rid, "stream": False}
            if request.custom_labels is not None:
                params["custom_labels"] = request.custom_labels
            if self.log_requests and self.level <= 1:  # SGLang's exporter skips what the request log skips
                params = {k: v for k, v in params.items() if k not in EXPORT_SKIPPED[self.level]}
            name = f"sglang-request-metrics-{datetime.now():%Y%m%d_%H}.log"
            _append(os.path.join(self.export_dir, name), json.dumps({"request_parameters": json.dumps(params), **meta}))
        if not self.log_requests:
            return
        out: dict[str, Any] = {"text": _cut(request.text, self.level), "output_ids": request.output_ids,
                               "meta_info": meta}
        if self.level <= 1:
            del out["text"], out["output_ids"]
        if self.format == "json":
            line = json.dumps({"timestamp": datetime.now().isoformat(), "event": "request.finished",
                               "rid": request.rid, "obj": self._obj(request), "out": out}, ensure_ascii=False)
            for target in self.targets:
                if target.lower() == "stdout":
                    self.log.raw(line)
                else:
                    _append(os.path.join(target, f"{socket.gethostname()}_0.log"), line)
        else:
            fields = ", ".join(f"{key}={value!r}" for key, value in self._obj(request).items())
            self.log.info(f"Finish: obj=GenerateReqInput({fields}), out={out!r}")
