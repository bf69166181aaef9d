"""The emulator writes SGLang's request records (export files, JSON events, Finish lines) and `specmon traffic`
reads back each request's own figures and each class's known acceptance."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from specmon.emulator.speed_model import SpecShape, SpeedModel, class_accept_prob
from specmon.traffic.reader import ReadTally, read_records
from tests.emulator.test_emulator import EAGLE3, launch

pytestmark = pytest.mark.timeout(120)
FAST = ["--emulator-speed", "50", "--emulator-decode-speed", "50"]
CODE = "Fix this:\n```python\ndef f(x):\n    return x +\n```\n"


def traffic(*args: str) -> dict:
    run = subprocess.run([sys.executable, "-m", "specmon", "traffic", *args, "--json"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_records_in_every_format_hold_each_requests_own_figures(tmp_path):
    export, target = tmp_path / "export", tmp_path / "requests"
    emu = launch(tmp_path, *EAGLE3, *FAST, "--export-metrics-to-file", "--export-metrics-to-file-dir", str(export),
                 "--log-requests", "--log-requests-level", "2", "--log-requests-format", "json",
                 "--log-requests-target", str(target), "stdout")
    answers = {}
    try:
        emu.wait_ready()
        for i in range(6):
            prompt = (CODE if i % 2 else "Tell me about rivers.") + f" #{i}"
            body = {"text": prompt, "rid": f"req-{i}", "custom_labels": {"kind": "code" if i % 2 else "prose"},
                    "sampling_params": {"max_new_tokens": 80, "ignore_eos": True}}
            answers[f"req-{i}"] = httpx.post(emu.url + "/generate", json=body, timeout=30).json()["meta_info"]
    finally:
        emu.stop()
    (hourly,) = export.iterdir()
    assert hourly.name.startswith("sglang-request-metrics-") and hourly.name.endswith(".log")
    for source in (export, target, emu.log_path):  # the export, the JSON target file, the JSON on stderr
        tally = ReadTally()
        records = {r.rid: r for r in read_records([str(source)], tally)}
        assert set(answers) <= set(records) and not tally.skipped, (source, tally)  # and the warmup's
        for rid, meta in answers.items():
            assert records[rid].completion_tokens == meta["completion_tokens"]
            assert records[rid].verify_ct == meta["spec_verify_ct"]
            assert records[rid].accept_length == pytest.approx(meta["spec_accept_length"], rel=1e-12)
    whole = traffic(str(export))
    everything = list(read_records([str(export)], ReadTally()))
    assert whole["requests"] == len(everything)
    tokens = sum(r.completion_tokens for r in everything)
    verify = sum(r.verify_ct for r in everything)
    assert whole["accept_length"]["token_weighted"] == pytest.approx(tokens / verify)


def test_the_text_finish_lines_are_read(tmp_path):
    emu = launch(tmp_path, *EAGLE3, *FAST, "--log-requests", "--log-requests-level", "2")
    try:
        emu.wait_ready()
        body = {"text": "it's 'meta_info': {'completion_tokens': 5", "rid": "t-1",
                "sampling_params": {"max_new_tokens": 70, "ignore_eos": True}}
        meta = httpx.post(emu.url + "/generate", json=body, timeout=30).json()["meta_info"]
    finally:
        emu.stop()
    result = traffic(str(emu.log_path))
    assert result["requests"] == 2 and result["skipped"]["count"] == 0
    (mine,) = [r for r in read_records([str(emu.log_path)], ReadTally()) if r.rid == "t-1"]
    assert mine.accept_length == pytest.approx(meta["spec_accept_length"], rel=1e-12)


def test_code_accepts_more_than_prose_as_the_emulator_knows(tmp_path):
    export = tmp_path / "export"
    emu = launch(tmp_path, *EAGLE3, *FAST, "--export-metrics-to-file", "--export-metrics-to-file-dir", str(export))
    try:
        emu.wait_ready()
        for i in range(16):
            code = i % 2 == 1
            body = {"text": (CODE if code else "Describe a quiet harbor town.") + f" {i}",
                    "custom_labels": {"kind": "code" if code else "prose"},
                    "sampling_params": {"max_new_tokens": 300, "ignore_eos": True}}
            httpx.post(emu.url + "/generate", json=body, timeout=60)
    finally:
        emu.stop()
    # the class is the prompt's; request_parameters hold the text, so --by text would class each prompt apart
    result = traffic(str(export), "--by", "sampling_params.max_new_tokens")
    assert result["requests"] == 17  # and the warmup
    records = [r for r in read_records([str(export)], ReadTally()) if r.completion_tokens == 300]
    code = [r for r in records if "```" in r.params["text"]]
    prose = [r for r in records if "```" not in r.params["text"]]
    tau = lambda rs: sum(r.completion_tokens for r in rs) / sum(r.verify_ct for r in rs)  # noqa: E731
    shape = SpecShape(3, 1, 4)
    assert tau(code) == pytest.approx(SpeedModel(shape, class_accept_prob(0.75, "code")).expected_accept_length(),
                                      abs=0.15)
    assert tau(prose) == pytest.approx(SpeedModel(shape, 0.75).expected_accept_length(), abs=0.15)
    assert tau(code) > tau(prose) + 0.3


@pytest.mark.parametrize("form", ["json", "text"])
def test_a_request_sent_as_token_ids_is_recorded_with_its_ids(tmp_path, form):
    """As SGLang's GenerateReqInput holds it: `input_ids`, no `text`, in the export and the request log at level 3;
    a list that is not token ids is refused as SGLang refuses a request without a prompt."""
    export, target = tmp_path / "export", tmp_path / "requests"
    emu = launch(tmp_path, *EAGLE3, *FAST, "--export-metrics-to-file", "--export-metrics-to-file-dir", str(export),
                 "--log-requests", "--log-requests-level", "3", "--log-requests-format", form,
                 "--log-requests-target", str(target))
    ids = [7731, 2**31 - 1, *range(40)]
    try:
        emu.wait_ready()
        body = {"input_ids": ids, "rid": "ids-1", "sampling_params": {"max_new_tokens": 30, "ignore_eos": True}}
        assert httpx.post(emu.url + "/generate", json=body, timeout=30).status_code == 200
        refused = httpx.post(emu.url + "/generate", json={**body, "input_ids": [1, "2"], "rid": "ids-2"}, timeout=30)
        assert refused.status_code == 400
    finally:
        emu.stop()
    sources = [export] + ([target] if form == "json" else [emu.log_path])
    for source in sources:
        tally = ReadTally()
        (mine,) = [r for r in read_records([str(source)], tally) if r.rid.startswith("ids-")]
        assert mine.params["input_ids"] == ids and "text" not in mine.params, source
        assert mine.prompt_tokens == len(ids) and mine.completion_tokens == 30
