"""Every command's output over hostile values (NaN and Infinity, terminal escapes, bidirectional overrides) in
presets, state files, sweep plans, stored runs, a draft's config.json, a log, a server's answers and Prometheus'
answers. With `--json` (and `ps --prometheus-sd`) it prints JSON a strict parser reads, or nothing; as text it
prints no control character (each is shown as an escape: `specmon.text.printable`); never a traceback. The
values are checked where they are read (a preset's `nan` and a state file's `NaN` are refused, and said), and
`specmon.text.strict_json` is the one place that writes JSON for others to read."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from specmon.cli import main
from tests.support.hostile_files import DRAFT_CONFIG, make_draft
from tests.support.hostile_http import SGLANG_INFO, SGLANG_METRICS, Answer, HostileServer, routes_of

ROOT = Path(__file__).resolve().parents[2]
NEVER = "/nonexistent/specmon-test-never"
"""The launcher of the presets a command here could launch had it taken a hostile value: nothing starts."""
ESC = "\x1b[2J\x1b]0;pwned\x07\u202e\x9b"
"""Clears the screen, retitles the terminal, rings the bell, reverses the text after it, a C1 CSI."""
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
NAN_INFO = b'{"version": "0.5.16", "max_running_requests": NaN, "max_total_num_tokens": Infinity}'
NAN_METRICS = SGLANG_METRICS + b'sglang:num_running_reqs{tp_rank="1"} NaN\nsglang:num_queue_reqs{tp_rank="1"} +Inf\n'
NAN_STREAM = (b'data: {"text": "a", "meta_info": {"completion_tokens": 1, "e2e_latency": NaN}}\n\n'
              b'data: {"text": "ab", "meta_info": {"completion_tokens": 2, "e2e_latency": 1e400}}\n\ndata: [DONE]\n\n')
ESC_INFO = json.loads(SGLANG_INFO) | {"version": "0.5.16" + ESC, "model_path": "m" + ESC,
                                      "speculative_algorithm": "EAGLE3" + ESC}
ESC_STREAM = ("data: " + json.dumps({"text": ESC, "meta_info": {"completion_tokens": 1, "finish_reason": ESC}})
              + "\n\ndata: [DONE]\n\n").encode()
LOG = ("[2026-01-01 00:00:00] server_args=ServerArgs(model_path='m" + ESC + "', tp_size=1)\n"
       "[2026-01-01 00:00:05 TP0] Load weight end. type=Qwen" + ESC + ", dtype=torch.bfloat16, avail mem=nan GB, "
       "mem usage=inf GB.\n"
       "[2026-01-01 00:00:06 TP0] KV Cache is allocated. #tokens: 1e400, K size: nan GB, V size: inf GB\n"
       "[2026-01-01 00:00:07 TP0] Decode batch. #running-req: 1, #token: 90, token usage: 0.00, accept len: 2.50, "
       "gen throughput (token/s): 100.00, #queue-req: 0, " + ESC + "\n"
       "[2026-01-01 00:00:08 TP0] Scheduler hit an exception: RuntimeError: " + ESC + "\n")
PROM_CONFIG = {"status": "success", "data": {"yaml": "global:\n  scrape_interval: 15s\n"}}
INSTANCE = "10.0.0.1:30000" + ESC
PROM_VECTOR = {"status": "success", "data": {"resultType": "vector", "result": [
    {"metric": {"__name__": "up", "job": "sglang", "instance": INSTANCE, "specmon_column": "up"}, "value": [1, "1"]},
    {"metric": {"__name__": "sglang:num_queue_reqs", "instance": INSTANCE, "specmon_column": "gauges"},
     "value": [1, "NaN"]}]}}


def _refuse(constant: str) -> None:
    raise AssertionError(f"{constant} in what specmon printed: not strict JSON")


def strict(text: str) -> object:
    """`text` read as strict JSON (NaN, Infinity and -Infinity refused)."""
    return json.loads(text, parse_constant=_refuse)


def _state(state: Path) -> None:
    servers, sweeps, results = state / "servers", state / "sweeps", state / "results"
    for folder in (servers, sweeps, results):
        folder.mkdir(parents=True, mode=0o700)
    record = {"id": "abc123", "preset": "evil", "argv": ["sleep", "1"], "pid": 99999, "pgid": 99999,
              "create_time": 1.0, "url": "http://127.0.0.1:9", "host": "127.0.0.1", "port": 9, "log": "x.log",
              "started_at": float("nan"), "gpu_baseline_mib": {"0": float("inf")}}
    (servers / "abc123.json").write_text(json.dumps(record))
    (servers / "def456.json").write_text(json.dumps(record | {"id": "def456", "started_at": 1.0}).replace(
        '"create_time": 1.0', '"create_time": 1e400'))
    (servers / "e5c000.json").write_text(json.dumps(record | {
        "id": "e5c000", "started_at": 1.0, "gpu_baseline_mib": {}, "preset": "p" + ESC, "argv": ["sleep" + ESC],
        "url": "http://127.0.0.1:9/" + ESC, "log": "/tmp/" + ESC + ".log", "gpu_url": ESC}))
    plan = {"run_id": "20260101-000000-nan0", "steps": [  # presets that cannot launch, whatever goes wrong
        {"preset": "never-base", "baseline": True, "draft_tokens": None, "startup_s": float("nan")},
        {"preset": "never-spec", "baseline": False, "draft_tokens": 11, "measure_s": float("inf")}],
        "created_at": float("nan"), "runner_pid": 99999, "runner_started": float("-inf")}
    (sweeps / "20260101-000000-nan0.json").write_text(json.dumps(plan))
    escaped = {"run_id": "20260101-000001-esc0", "steps": [
        {"preset": "b" + ESC, "baseline": True, "draft_tokens": None, "state": "measured", "error": ESC},
        {"preset": "s" + ESC, "baseline": False, "draft_tokens": 11, "error": ESC}], "created_at": 1.0,
        "left_serving": ESC, "recommended": ESC}
    (sweeps / "20260101-000001-esc0.json").write_text(json.dumps(escaped))
    (results / "20260101-000000-nan1.jsonl").write_text(
        json.dumps({"kind": "run", "run_id": "20260101-000000-nan1", "preset": "evil", "started_at": float("nan")})
        + "\n" + json.dumps({"kind": "summary", "summary": {"decode_tok_s": {"median": float("inf")}}}) + "\n")
    (results / "20260101-000002-esc1.jsonl").write_text(json.dumps(
        {"kind": "run", "run_id": "20260101-000002-esc1", "preset": "p" + ESC, "url": ESC, "started_at": 1.0,
         "settings": {"prompts": ESC}}) + "\n")
    for folder in (servers, sweeps):
        for path in folder.iterdir():
            path.chmod(0o600)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """One hostile world: its presets, state directory, draft, log, SGLang servers and Prometheus."""
    root = tmp_path_factory.mktemp("hostile-output")
    presets = root / "presets"
    presets.mkdir()
    (presets / "nan.toml").write_text('name = "nan-args"\n[server.args]\nmodel-path = "m"\nfoo = nan\n'
                                      "[bench]\ntemperature = inf\n")
    (presets / "inf-list.toml").write_text('name = "inf-list"\n[server.args]\ncuda-graph-bs = [1, -inf]\n')
    (presets / "evil.toml").write_text('name = "evil"\nextends = "demo-eagle3-10"\n'
                                       f'description = {json.dumps(ESC)}\n[server.env]\nX = {json.dumps(ESC)}\n')
    for name, spec in (("never-base", ""), ("never-spec", 'speculative-algorithm = "NGRAM"\n')):
        (presets / f"{name}.toml").write_text(f'name = "{name}"\n[server]\nlauncher = ["{NEVER}"]\n'
                                              f'[server.args]\nmodel-path = "m"\nport = 9\n{spec}')
    (presets / "typo.toml").write_text(f'name = "typo"\nextends = {json.dumps("nowhere" + ESC)}\n')
    (presets / f"{ESC}.toml").write_text(f'bogus{json.dumps(ESC)} = 1\n')
    _state(root / "state")
    draft = make_draft(root, config=DRAFT_CONFIG | {"hidden_size": float("nan"), "vocab_size": float("inf"),
                                                    "architectures": ["LlamaForCausalLMEagle3" + ESC]})
    log = root / "server.log"
    log.write_text(LOG)
    nan = HostileServer(routes_of(info=Answer(NAN_INFO), metrics=Answer.text(NAN_METRICS),
                                  generate=Answer(NAN_STREAM, content_type="text/event-stream"))).start()
    escapes = HostileServer(routes_of(info=Answer.json(ESC_INFO), metrics=Answer(ESC.encode(), status=500),
                                      generate=Answer(ESC_STREAM, content_type="text/event-stream"),
                                      health_generate=Answer(ESC.encode(), status=503))).start()
    prometheus = HostileServer({"/api/v1/status/config": Answer.json(PROM_CONFIG),
                                "/api/v1/query": Answer.json(PROM_VECTOR),
                                "/api/v1/query_range": Answer.json({"status": "success", "data": {
                                    "resultType": "matrix", "result": []}})}).start()
    yield {"presets": str(presets), "state": str(root / "state"), "results": str(root / "state" / "results"),
           "draft": str(draft), "log": str(log), "nan_url": nan.url, "escapes_url": escapes.url,
           "prometheus": prometheus.url}
    for server in (nan, escapes, prometheus):
        server.stop()


BENCH = ["--requests", "1", "--warmup", "0", "--stall-timeout", "3", "--deadline", "10"]
# name -> (argv without --json, a text that says a hostile value was met, in what --json printed or on stderr)
COMMANDS = {
    "presets": (["presets", "--presets", "{presets}"], "must be a finite number, not nan"),
    "ps": (["ps"], "not finite"),
    "check PRESET": (["check", "evil", "--presets", "{presets}"], "evil"),
    "check --url, NaN": (["check", "--url", "{nan_url}"], "not finite"),
    "check --url, escapes": (["check", "--url", "{escapes_url}"], None),
    "doctor": (["doctor", "{draft}"], "hidden_size"),
    "log-summary": (["log-summary", "{log}"], None),
    "monitor --once, NaN": (["monitor", "--once", "--url", "{nan_url}", "--window", "1"], "not finite"),
    "monitor --once, escapes": (["monitor", "--once", "--url", "{escapes_url}", "--window", "1", "--log", "{log}"],
                                "HTTP 500"),
    "bench, NaN": (["bench", "--url", "{nan_url}", *BENCH], "not finite"),
    "bench, escapes": (["bench", "--url", "{escapes_url}", *BENCH], None),
    "results": (["results", "--dir", "{results}"], "record skipped"),
    "predict": (["predict", "20260101", "--dir", "{results}"], None),
    "gpus": (["gpus"], None),
    "start": (["start", "nan-args", "--presets", "{presets}"], "must be a finite number"),
    "stop": (["stop", "abc123"], "abc123"),
    "switch": (["switch", "inf-list", "--presets", "{presets}"], "must be a finite number, not -inf"),
    "sweep --resume, NaN": (["sweep", "--resume", "20260101-000000-nan0", "--presets", "{presets}"], "not finite"),
    "sweep --resume, escapes": (["sweep", "--resume", "20260101-000001-esc0", "--presets", "{presets}",
                                 "--leave", "none"], None),
    "fleet --once": (["fleet", "--prometheus", "{prometheus}", "--once"], "NaN"),
}
JSON_FLAG = {"results": ["--format", "json"]}
MAY_PRINT_NOTHING = {"predict", "gpus", "sweep --resume, NaN", "sweep --resume, escapes"}
"""Commands that say a failure on stderr only (no run to predict from, no NVML, a plan refused)."""


def _run(world, argv: list[str], capsys, monkeypatch) -> tuple[int, str, str]:
    monkeypatch.setenv("SPECMON_STATE_DIR", world["state"])
    monkeypatch.setenv("XDG_CONFIG_HOME", str(Path(world["state"]) / "config"))
    monkeypatch.delenv("SPECMON_API_KEY", raising=False)
    code = main([part.format(**world) for part in argv])
    captured = capsys.readouterr()
    assert code in (0, 1, 2), code
    return code, captured.out, captured.err


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", list(COMMANDS) + ["ps --prometheus-sd"])
def test_every_json_command_prints_strict_json_over_hostile_values(world, name, capsys, monkeypatch):
    if name == "ps --prometheus-sd":
        argv, says = ["ps", "--prometheus-sd"], "too large to be finite"
    else:
        argv, says = COMMANDS[name]
        argv = argv + JSON_FLAG.get(name, ["--json"])
    _, out, err = _run(world, argv, capsys, monkeypatch)
    if out.strip():
        strict(out)
    elif name not in MAY_PRINT_NOTHING:
        pytest.fail(f"{name} printed no JSON; stderr: {err}")
    if says is not None:
        assert says in out + err, (out[-2000:], err[-2000:])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_prints_outside_text_without_its_control_characters(world, name, capsys, monkeypatch):
    _, out, err = _run(world, COMMANDS[name][0], capsys, monkeypatch)
    for stream, text in (("stdout", out), ("stderr", err)):
        found = CONTROL.search(text)
        assert found is None, (stream, text[max(0, found.start() - 200):found.end() + 100])


def test_strict_json_writes_null_for_what_json_cannot_hold():
    from specmon.text import strict_json

    hostile = {"nan": float("nan"), "inf": [float("inf"), (float("-inf"), 1.5)], 3: 10**5000, "ok": 10**20,
               "path": Path("/x")}
    assert strict(strict_json(hostile)) == {"nan": None, "inf": [None, [None, 1.5]], "3": None, "ok": 10**20,
                                            "path": "/x"}


PRINTS_JSON_ELSEWHERE = {
    # files specmon writes for itself or for other programs' own formats, not what a command prints
    "specmon/oncall/state.py", "specmon/sweep/plan.py", "specmon/bench/results.py", "specmon/preflight/fixkeys.py",
    "specmon/preflight/safetensors.py", "specmon/preflight/locate.py", "specmon/fleet/dashboard.py",
    "specmon/http/client.py", "specmon/testing/loopback_server.py",
}


def test_json_is_written_in_one_place():
    """Every command's JSON goes through `strict_json`: a json.dump(s) elsewhere is a second way (and would print
    NaN), unless it writes a file of specmon's own or a request body."""
    found = []
    for folder in ("specmon", "tui", "widgets"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith("specmon/emulator/") or relative == "specmon/text.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in ("dump", "dumps") and isinstance(node.func.value, ast.Name)
                        and node.func.value.id == "json" and relative not in PRINTS_JSON_ELSEWHERE):
                    found.append(f"{relative}:{node.lineno}")
    assert found == [], found
