"""SGLang's warmup thread: waits for the model info endpoint, sends one generation, then declares readiness."""

from __future__ import annotations

import json
import os
import signal
import time
import traceback
import urllib.request

from specmon.emulator.http_api import ServerState

WARMUP_BODY = {"text": "The capital city of France is", "sampling_params": {"temperature": 0, "max_new_tokens": 8}}


def _connect_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else host)


def run_warmup(state: ServerState, host: str, port: int, speed: float, delay_s: float | None = None) -> None:
    """Runs on its own thread once the port listens; on failure ends the process like SGLang."""
    base = f"http://{_connect_host(host)}:{port}"
    headers = {}
    key = state.server_args.get("api_key")
    if key:
        headers["Authorization"] = f"Bearer {key}"
    info_path = "/model_info" if state.family == "new" else "/get_model_info"
    time.sleep(1.0 / speed if delay_s is None else delay_s)
    if state.server_args.get("skip_server_warmup"):
        state.up.set()
        state.log.info("The server is fired up and ready to roll!")
        return
    try:
        for attempt in range(120):
            try:
                with urllib.request.urlopen(urllib.request.Request(base + info_path, headers=headers), timeout=5):
                    break
            except OSError:
                if attempt == 119:
                    raise
                time.sleep(1.0 / speed)
        request = urllib.request.Request(
            base + "/generate",
            data=json.dumps(WARMUP_BODY).encode(),
            headers={**headers, "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=600) as response:
            response.read()
    except Exception:
        state.log.error(f"Initialization failed. warmup error: {traceback.format_exc()}")
        os.kill(os.getpid(), signal.SIGKILL)
        return
    state.up.set()
    state.log.info("The server is fired up and ready to roll!")
