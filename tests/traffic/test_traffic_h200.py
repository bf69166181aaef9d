"""SGLang 0.5.16's own request records from the H200 (tests/fixtures/real-sglang-0.5.16/grid-20261203): the
hourly export files across a rotation and the JSON request log, read as they are."""

from __future__ import annotations

import json
import lzma
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from specmon.traffic.reader import ReadTally, read_records
from specmon.traffic.summary import OUTPUT_BUCKETS, PROMPT_BUCKETS, bucket

FIXTURE = Path(__file__).parents[1] / "fixtures" / "real-sglang-0.5.16" / "grid-20261203"
EXPORT = FIXTURE / "export"


def sglang_records() -> list[dict]:
    """Every exported record, as SGLang wrote it."""
    return [json.loads(line) for path in sorted(EXPORT.iterdir()) for line in path.read_text().splitlines()]


def test_every_per_request_tau_is_sglangs_own_and_every_record_is_accounted_for() -> None:
    theirs = sglang_records()
    speculative = {r["id"]: r for r in theirs if "spec_verify_ct" in r}
    tally = ReadTally()
    ours = {r.rid: r for r in read_records([str(EXPORT)], tally)}
    assert tally.files == 2 and len(speculative) >= 300
    assert ours.keys() == speculative.keys()
    for rid, record in speculative.items():
        assert ours[rid].accept_length == record["spec_accept_length"]  # exactly
        assert (ours[rid].completion_tokens, ours[rid].verify_ct) == (record["completion_tokens"],
                                                                      record["spec_verify_ct"])
    # the baseline's records (no speculation) are counted with their reason, not dropped
    assert sum(tally.skipped.values()) + sum(tally.left_out.values()) == len(theirs) - len(speculative)


def test_the_request_log_gives_the_same_tau_as_the_export_for_each_request(tmp_path: Path) -> None:
    log = tmp_path / "vm_0.log"
    log.write_bytes(lzma.decompress((FIXTURE / "requestlog-vm_0.log.xz").read_bytes()))
    tally = ReadTally()
    from_log = {r.rid: r for r in read_records([str(log)], tally)}
    exported = {r["id"]: r for r in sglang_records() if "spec_verify_ct" in r}
    shared = from_log.keys() & exported.keys()
    assert len(shared) >= 50
    for rid in shared:
        assert from_log[rid].accept_length == exported[rid]["spec_accept_length"]
    assert tally.left_out  # SGLang's own health checks are in the log and left out


def test_the_classes_reproduce_sglangs_spread() -> None:
    run = subprocess.run([sys.executable, "-m", "specmon", "traffic", str(EXPORT), "--json"], capture_output=True,
                         text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    sums: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for record in sglang_records():
        if "spec_verify_ct" not in record:
            continue
        for by, edges in (("prompt_tokens", PROMPT_BUCKETS), ("completion_tokens", OUTPUT_BUCKETS)):
            key = (by, bucket(record[by], edges))
            sums[key][0] += record["completion_tokens"]
            sums[key][1] += record["spec_verify_ct"]
    assert {(c["by"], c["value"]) for c in report["classes"]} == set(sums)
    for cls in report["classes"]:
        completion, verify = sums[(cls["by"], cls["value"])]
        assert abs(cls["accept_length"] - completion / verify) < 1e-9
    total = sum(c for (by, _), (c, _v) in sums.items() if by == "prompt_tokens")
    verify = sum(v for (by, _), (_c, v) in sums.items() if by == "prompt_tokens")
    assert abs(report["accept_length"]["token_weighted"] - total / verify) < 1e-9
    by_prompt = {c["value"]: c["accept_length"] for c in report["classes"] if c["by"] == "prompt_tokens"}
    assert len(by_prompt) >= 2 and max(by_prompt.values()) > min(by_prompt.values())

