"""SGLangClient against real HTTP on 127.0.0.1 replaying real SGLang 0.5.16 answers."""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path

import pytest

from specmon.ports import free_port
from specmon.serving.client import (
    AuthenticationFailed,
    SGLangClient,
    SGLangError,
    resolve_api_key,
    spec_settings,
)
from specmon.urls import base_url, is_loopback
from tests.support.serving_replay import API_FIXTURES, ReplayServer, first_stream


def _final_meta(name: str) -> dict:
    return json.loads(first_stream(name)[-2].decode()[len("data: ") :])["meta_info"]


def _server_info(name: str) -> dict:
    return json.loads((API_FIXTURES / name).read_text())


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("http://localhost:30000/", "http://127.0.0.1:30000"),
        ("localhost:30000", "http://127.0.0.1:30000"),
        ("https://gpu-box:8443", "https://gpu-box:8443"),
        ("http://10.0.0.5:30000", "http://10.0.0.5:30000"),
    ],
)
def test_base_url_is_normalised(given: str, expected: str) -> None:
    assert base_url(given) == expected


async def test_health_goes_from_starting_to_ready() -> None:
    with ReplayServer(health_codes=deque([503, 503])) as server:
        async with SGLangClient(server.url) as client:
            first, second, third = [await client.health() for _ in range(3)]
    assert (first.ok, first.status_code, first.error, first.state) == (False, 503, "starting", "starting")
    assert second.state == "starting"
    assert (third.ok, third.status_code, third.error, third.state) == (True, 200, None, "ready")
    assert third.latency_s is not None and 0 < third.latency_s < 5


async def test_health_of_a_closed_port_is_unreachable() -> None:
    async with SGLangClient(f"http://127.0.0.1:{free_port()}") as client:
        health = await client.health()
    assert (health.ok, health.status_code, health.error, health.state) == (False, None, "unreachable", "unreachable")


async def test_health_other_codes_are_unhealthy_and_generate_variant_is_used() -> None:
    with ReplayServer(health_codes=deque([500])) as server:
        async with SGLangClient(f"http://localhost:{server.port}") as client:
            assert client.base_url == server.url
            bad = await client.health(generate=True)
    assert (bad.state, bad.error) == ("unhealthy", "HTTP 500")
    assert server.behaviour.requests[0]["path"] == "/health_generate"


async def test_server_info_prefers_the_new_endpoint() -> None:
    with ReplayServer() as server:
        async with SGLangClient(server.url) as client:
            info = await client.server_info()
            await client.server_info()
            model = await client.model_info()
    assert info == _server_info("h200-0.5.16-server-info-eagle3.json")
    assert model["model_path"] == info["model_path"]
    paths = [r["path"] for r in server.behaviour.requests]
    assert paths == ["/server_info", "/server_info", "/model_info"]


async def test_server_info_falls_back_to_get_server_info_once_and_remembers() -> None:
    with ReplayServer(legacy_info_only=True) as server:
        async with SGLangClient(server.url) as client:
            info = await client.server_info()
            again = await client.server_info()
            model = await client.model_info()
    assert info == again and info["version"] == "0.5.16"
    assert model["is_generation"] is True
    paths = [r["path"] for r in server.behaviour.requests]
    assert paths == ["/server_info", "/get_server_info", "/get_server_info", "/model_info", "/get_model_info"]


async def test_flush_cache_retries_while_busy_then_flushes() -> None:
    with ReplayServer(flush_busy_times=2) as server:
        async with SGLangClient(server.url) as client:
            assert await client.flush_cache(retries=3, delay=0.01) is True
    posts = [r for r in server.behaviour.requests if r["path"] == "/flush_cache"]
    assert [r["method"] for r in posts] == ["POST"] * 3


async def test_flush_cache_gives_up_when_always_busy() -> None:
    with ReplayServer(flush_busy_times=100) as server:
        async with SGLangClient(server.url) as client:
            assert await client.flush_cache(retries=2, delay=0.01) is False
    assert len(server.behaviour.requests) == 3


async def test_api_key_is_sent_as_bearer_and_never_shown() -> None:
    secret = "sk-specmon-test-7f3a"
    with ReplayServer(api_key=secret) as server:
        async with SGLangClient(server.url) as anonymous:
            assert (await anonymous.health()).ok  # /health is exempt, as in SGLang
            with pytest.raises(AuthenticationFailed) as denied:
                await anonymous.server_info()
        async with SGLangClient(server.url, api_key="wrong-key") as wrong:
            with pytest.raises(AuthenticationFailed) as wrong_denied:
                await wrong.generate("hi", 8, stream=True)
        async with SGLangClient(server.url, api_key=secret) as client:
            info = await client.server_info()
            assert secret not in repr(client)
    assert denied.value.status_code == 401 and wrong_denied.value.status_code == 401
    assert secret not in str(denied.value) and "wrong-key" not in str(wrong_denied.value)
    assert info["speculative_algorithm"] == "EAGLE3"
    assert server.behaviour.requests[-1]["authorization"] == f"Bearer {secret}"


async def test_metrics_parsed_from_the_real_answer() -> None:
    text = (API_FIXTURES / "h200-0.5.16-metrics-eagle3.txt").read_text()
    line = next(li for li in text.splitlines() if li.startswith("sglang:spec_verify_calls_total{"))
    with ReplayServer() as server:
        async with SGLangClient(server.url) as client:
            snapshot = await client.metrics()
            raw = await client.metrics_text()
    assert raw == text
    assert snapshot is not None
    assert snapshot.spec_verify_calls == float(line.rsplit(" ", 1)[1])
    assert snapshot.generation_tokens is not None and snapshot.generation_tokens >= snapshot.spec_verify_calls


async def test_metrics_absent_is_none() -> None:
    with ReplayServer(metrics=None) as server:
        async with SGLangClient(server.url) as client:
            assert await client.metrics() is None


async def test_generate_non_streaming_sends_json_and_reads_meta_info() -> None:
    expected = _final_meta("h200-0.5.16-generate-eagle3.txt")
    with ReplayServer() as server:
        async with SGLangClient(server.url) as client:
            result = await client.generate("Hello", 48, temperature=0, ignore_eos=True)
    request = server.behaviour.requests[-1]
    assert request["content_type"] == "application/json"
    body = json.loads(request["body"])
    assert body == {
        "text": "Hello",
        "sampling_params": {"max_new_tokens": 48, "temperature": 0, "ignore_eos": True},
        "stream": False,
    }
    assert result.completion_tokens == expected["completion_tokens"]
    assert result.spec_verify_ct == expected["spec_verify_ct"]
    assert result.accept_length == pytest.approx(expected["spec_accept_length"])
    assert result.tokens_per_s == pytest.approx(expected["completion_tokens"] / expected["e2e_latency"])


async def test_generate_streaming_reads_to_done() -> None:
    events = first_stream("h200-0.5.16-generate-eagle3.txt")
    with ReplayServer() as server:
        async with SGLangClient(server.url) as client:
            result = await client.generate("Hello", 48, stream=True)
    assert result.chunks == len(events) - 1
    assert result.ttft_s is not None and result.ttft_s <= result.elapsed_s
    assert result.meta_info == _final_meta("h200-0.5.16-generate-eagle3.txt")
    assert json.loads(server.behaviour.requests[-1]["body"])["stream"] is True


async def test_generate_without_speculation_has_no_accept_length() -> None:
    with ReplayServer(generate="h200-0.5.16-generate-plain.txt") as server:
        async with SGLangClient(server.url) as client:
            result = await client.generate("Hello", 48)
    assert result.spec_verify_ct is None and result.accept_length is None
    assert result.completion_tokens > 0


def test_spec_settings_reads_the_effective_values() -> None:
    eagle = spec_settings(_server_info("h200-0.5.16-server-info-eagle3.json"))
    assert (eagle.algorithm, eagle.num_steps, eagle.eagle_topk, eagle.num_draft_tokens) == ("EAGLE3", 3, 1, 4)
    assert eagle.draft_model_path == "/tmp/tiny/eagle3" and eagle.version == "0.5.16"
    assert eagle.avg_spec_accept_length == 1.0 and eagle.enabled
    plain = spec_settings(_server_info("h200-0.5.16-server-info-plain.json"))
    assert not plain.enabled and plain.num_steps is None and plain.avg_spec_accept_length is None
    assert plain.last_gen_throughput is not None and plain.last_gen_throughput > 0


def test_topk1_rewrite_is_reported_against_the_preset() -> None:
    topk1 = spec_settings(_server_info("h200-0.5.16-topk1-server-info.json"))
    assert topk1.avg_spec_accept_length is None  # no decode-log window completed yet
    assert topk1.topk1_rewrite_possible
    argv = ["--speculative-algorithm", "eagle3", "--speculative-num-steps=1", "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "16", "--speculative-draft-model", "/tmp/tiny/eagle3"]
    differences = topk1.requested_vs_effective(argv)
    assert [str(d) for d in differences] == ["speculative_num_draft_tokens: 16 asked, 2 effective"]
    mapping = {"speculative-num-draft-tokens": 16, "speculative_num_steps": 2, "model-path": "x"}
    assert [d.name for d in topk1.requested_vs_effective(mapping)] == [
        "speculative_num_steps",
        "speculative_num_draft_tokens",
    ]
    assert topk1.requested_vs_effective([]) == []


def test_spec_settings_of_a_pre_6201_server_reads_top_level_accept_length() -> None:
    old = spec_settings({"speculative_algorithm": "EAGLE", "avg_spec_accept_length": 3.2, "version": "0.4.6"})
    assert old.avg_spec_accept_length == 3.2 and old.num_steps is None


def test_api_key_from_file_or_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("from-file\n")
    monkeypatch.setenv("SPECMON_API_KEY", "from-env")
    assert resolve_api_key(key_file) == "from-file"
    assert resolve_api_key(None) == "from-env"
    monkeypatch.delenv("SPECMON_API_KEY")
    assert resolve_api_key(None) is None
    with pytest.raises(OSError):
        resolve_api_key(tmp_path / "missing")


async def test_unparsable_answers_raise_sglang_errors(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.txt"
    garbage.write_text("<html>not metrics {</html>\n")
    with ReplayServer(metrics=str(garbage), server_info=str(garbage)) as server:
        async with SGLangClient(server.url) as client:
            with pytest.raises(SGLangError, match="not Prometheus text"):
                await client.metrics()
            with pytest.raises(SGLangError, match="not JSON"):
                await client.server_info()


async def test_loopback_servers_bypass_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    # A proxy that does not exist: a client that used it for 127.0.0.1 would find the server unreachable.
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("ALL_PROXY", f"http://127.0.0.1:{free_port()}")
    with ReplayServer() as server:
        async with SGLangClient(f"http://localhost:{server.port}") as client:
            assert (await client.health()).ok
    assert is_loopback("http://localhost:1") and is_loopback("http://[::1]:30000")
    assert not is_loopback("http://10.1.2.3:30000") and not is_loopback("http://gpu-box:30000")


def test_a_host_is_loopback_only_when_nothing_else_can_reach_it():
    from specmon.ports import is_loopback_host

    assert all(map(is_loopback_host, ["localhost", " LOCALHOST ", "127.0.0.1", "127.9.9.9", "::1", "[::1]"]))
    assert not any(map(is_loopback_host, ["0.0.0.0", "::", "10.1.2.3", "gpu-box", "", "localhost.evil.example"]))
