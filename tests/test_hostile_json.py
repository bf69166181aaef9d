"""Every JSON specmon prints is strict: each `--json` command (and `ps --prometheus-sd`), run over hostile values
(NaN and Infinity in presets, state files, sweep plans, stored runs, a draft's config.json, a log, a server's
answers and Prometheus' answers), prints JSON that a strict parser reads, or nothing, and never a traceback.
The values are checked where they are read (a preset's `nan` and a state file's `NaN` are refused, and said),
and `specmon.text.strict_json` is the one place that writes JSON for others to read."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from specmon.cli import main
from tests.support.hostile_files import DRAFT_CONFIG, make_draft
from tests.support.hostile_http import SGLANG_METRICS, Answer, HostileServer, routes_of

ROOT = Path(__file__).resolve().parents[1]
NAN_INFO = b'{"version": "0.5.16", "max_running_requests": NaN, "max_total_num_tokens": Infinity}'
NAN_METRICS = SGLANG_METRICS + b'sglang:num_running_reqs{tp_rank="1"} NaN\nsglang:num_queue_reqs{tp_rank="1"} +Inf\n'
NAN_STREAM = (b'data: {"text": "a", "meta_info": {"completion_tokens": 1, "e2e_latency": NaN}}\n\n'
              b'data: {"text": "ab", "meta_info": {"completion_tokens": 2, "e2e_latency": 1e400}}\n\ndata: [DONE]\n\n')
NAN_LOG = ("[2026-01-01 00:00:00] server_args=ServerArgs(model_path='m', tp_size=1)\n"
           "[2026-01-01 00:00:05 TP0] Load weight end. type=Qwen, dtype=torch.bfloat16, avail mem=nan GB, "
           "mem usage=inf GB.\n"
           "[2026-01-01 00:00:06 TP0] KV Cache is allocated. #tokens: 1e400, K size: nan GB, V size: inf GB\n")
PROM_CONFIG = {"status": "success", "data": {"yaml": "global:\n  scrape_interval: 15s\n"}}
PROM_VECTOR = {"status": "success", "data": {"resultType": "vector", "result": [
    {"metric": {"__name__": "up", "job": "sglang", "instance": "10.0.0.1:30000", "specmon_column": "up"},
     "value": [1, "1"]},
    {"metric": {"__name__": "sglang:num_queue_reqs", "instance": "10.0.0.1:30000", "specmon_column": "gauges"},
     "value": [1, "NaN"]}]}}


def _refuse(constant: str) -> None:
    raise AssertionError(f"{constant} in what specmon printed: not strict JSON")


def strict(text: str) -> object:
    """`text` read as strict JSON (NaN, Infinity and -Infinity refused)."""
    return json.loads(text, parse_constant=_refuse)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """One hostile world: its presets, state directory, draft, log, SGLang server and Prometheus."""
    root = tmp_path_factory.mktemp("hostile-json")
    presets = root / "presets"
    presets.mkdir()
    (presets / "nan.toml").write_text('name = "nan-args"\n[server.args]\nmodel-path = "m"\nfoo = nan\n'
                                      "[bench]\ntemperature = inf\n")
    (presets / "inf-list.toml").write_text('name = "inf-list"\n[server.args]\ncuda-graph-bs = [1, -inf]\n')
    (presets / "evil.toml").write_text('name = "evil"\nextends = "demo-eagle3-10"\ndescription = "\\u001b[2J"\n')
    state = root / "state"
    servers, sweeps, results = state / "servers", state / "sweeps", state / "results"
    for folder in (servers, sweeps, results):
        folder.mkdir(parents=True, mode=0o700)
    record = {"id": "abc123", "preset": "evil", "argv": ["sleep", "1"], "pid": 99999, "pgid": 99999,
              "create_time": 1.0, "url": "http://127.0.0.1:9", "host": "127.0.0.1", "port": 9, "log": "x.log",
              "started_at": float("nan"), "gpu_baseline_mib": {"0": float("inf")}}
    (servers / "abc123.json").write_text(json.dumps(record))
    (servers / "def456.json").write_text(json.dumps(record | {"id": "def456", "started_at": 1.0}).replace(
        '"create_time": 1.0', '"create_time": 1e400'))
    plan = {"run_id": "20260101-000000-nan0", "steps": [
        {"preset": "demo-baseline", "baseline": True, "draft_tokens": None, "startup_s": float("nan")},
        {"preset": "demo-eagle3-10", "baseline": False, "draft_tokens": 11, "measure_s": float("inf")}],
        "created_at": float("nan"), "runner_pid": 99999, "runner_started": float("-inf")}
    (sweeps / "20260101-000000-nan0.json").write_text(json.dumps(plan))
    (results / "20260101-000000-nan1.jsonl").write_text(
        json.dumps({"kind": "run", "run_id": "20260101-000000-nan1", "preset": "evil", "started_at": float("nan")})
        + "\n" + json.dumps({"kind": "summary", "summary": {"decode_tok_s": {"median": float("inf")}}}) + "\n")
    for folder in (servers, sweeps):
        for path in folder.iterdir():
            path.chmod(0o600)
    draft = make_draft(root, config=DRAFT_CONFIG | {"hidden_size": float("nan"), "vocab_size": float("inf")})
    log = root / "server.log"
    log.write_text(NAN_LOG)
    sglang = HostileServer(routes_of(info=Answer(NAN_INFO), metrics=Answer.text(NAN_METRICS),
                                     generate=Answer(NAN_STREAM, content_type="text/event-stream"))).start()
    prometheus = HostileServer({"/api/v1/status/config": Answer.json(PROM_CONFIG),
                                "/api/v1/query": Answer.json(PROM_VECTOR),
                                "/api/v1/query_range": Answer.json({"status": "success", "data": {
                                    "resultType": "matrix", "result": []}})}).start()
    yield {"presets": str(presets), "state": str(state), "results": str(results), "draft": str(draft),
           "log": str(log), "url": sglang.url, "prometheus": prometheus.url}
    sglang.stop()
    prometheus.stop()


# name -> (argv, a text that says a hostile value was met: in what it printed, on stdout or stderr)
COMMANDS = {
    "presets": (["presets", "--presets", "{presets}", "--json"], "must be a finite number, not nan"),
    "ps": (["ps", "--json"], "not finite"),
    "ps --prometheus-sd": (["ps", "--prometheus-sd"], "too large to be finite"),
    "check PRESET": (["check", "evil", "--presets", "{presets}", "--json"], "evil"),
    "check --url": (["check", "--url", "{url}", "--json"], "not finite"),
    "doctor": (["doctor", "{draft}", "--json"], "hidden_size"),
    "log-summary": (["log-summary", "{log}", "--json"], None),
    "monitor --once": (["monitor", "--once", "--url", "{url}", "--window", "1", "--json"], "not finite"),
    "bench": (["bench", "--url", "{url}", "--requests", "1", "--warmup", "0", "--stall-timeout", "3",
               "--deadline", "10", "--json"], "not finite"),
    "results": (["results", "--dir", "{results}", "--format", "json"], "record skipped"),
    "predict": (["predict", "20260101", "--dir", "{results}", "--json"], None),
    "gpus": (["gpus", "--json"], None),
    "start": (["start", "nan-args", "--presets", "{presets}", "--json"], "must be a finite number"),
    "stop": (["stop", "abc123", "--json"], "abc123"),
    "switch": (["switch", "inf-list", "--presets", "{presets}", "--json"], "must be a finite number, not -inf"),
    "sweep --resume": (["sweep", "--resume", "20260101-000000-nan0", "--json"], "not finite"),
    "fleet --once": (["fleet", "--prometheus", "{prometheus}", "--once", "--json"], "NaN"),
}

MAY_PRINT_NOTHING = {"predict", "gpus", "sweep --resume"}
"""Commands that say a failure on stderr only (no run to predict from, no NVML, a plan refused)."""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_json_command_prints_strict_json_over_hostile_values(world, name, capsys, monkeypatch):
    argv, says = COMMANDS[name]
    monkeypatch.setenv("SPECMON_STATE_DIR", world["state"])
    monkeypatch.setenv("XDG_CONFIG_HOME", str(Path(world["state"]) / "config"))
    monkeypatch.delenv("SPECMON_API_KEY", raising=False)
    code = main([part.format(**world) for part in argv])
    captured = capsys.readouterr()
    assert code in (0, 1, 2), code
    if captured.out.strip():
        strict(captured.out)
    elif name not in MAY_PRINT_NOTHING:
        pytest.fail(f"{name} printed no JSON; stderr: {captured.err}")
    if says is not None:
        assert says in captured.out + captured.err, (captured.out[-2000:], captured.err[-2000:])


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
    "specmon/bench/h1.py", "specmon/bench/loopback.py",
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
