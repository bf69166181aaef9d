"""Every reader of outside files against hostile ones (tests/support/hostile_files.py): FIFOs nobody writes to,
links to /dev/zero, sparse files of 20 GiB, JSON and TOML nested 100,000 deep, counts that would allocate
gigabytes, names with terminal escapes. Each is refused with the file's name and why, in seconds, in little
memory, never a hang or a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.hostile_files import (
    DEEP_TOML,
    DRAFT_CONFIG,
    DRAFT_NAMES,
    deep_json_text,
    fifo,
    make_draft,
    sparse,
    zero_link,
)
from tests.support.peak_rss import peak_rss_mib

ROOT = Path(__file__).resolve().parents[2]


def specmon(tmp_path: Path, *args: str, timeout: float = 60, stdin: int | None = subprocess.DEVNULL):
    """specmon run as a user runs it, its peak memory measured; no traceback, whatever happens."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path / "home"),
           "SPECMON_STATE_DIR": str(tmp_path / "state"), "XDG_STATE_HOME": str(tmp_path / "xdg"),
           "XDG_CONFIG_HOME": str(tmp_path / "config")}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "tests.support.peak_rss", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT, stdin=stdin)
    took = time.monotonic() - started
    assert "Traceback" not in done.stderr, done.stderr
    peak = peak_rss_mib(done.stderr)
    assert peak is not None and peak < 200, (peak, done.stderr)
    assert took < 30, took
    return done


# ----- the bounded reader itself


@pytest.mark.timeout(20)
@pytest.mark.parametrize("make", ["fifo", "dev zero", "directory", "20 GiB sparse"])
def test_only_regular_files_of_bounded_size_are_read(tmp_path, make):
    from specmon.inputs import InputError, read_file

    path = tmp_path / "x.json"
    {"fifo": fifo, "dev zero": zero_link, "directory": Path.mkdir, "20 GiB sparse": sparse}[make](path)
    with pytest.raises(InputError) as caught:
        read_file(path, 1 << 20, what="config.json")
    says = {"fifo": "a FIFO", "dev zero": "a character device", "directory": "a directory",
            "20 GiB sparse": "20,480.0 MiB, more than a config.json may have (1.0 MiB)"}[make]
    assert str(caught.value).startswith(f"{path}: ") and says in str(caught.value)


@pytest.mark.parametrize("text", [deep_json_text(100_000), deep_json_text(100_000, "{"), deep_json_text(65)])
def test_json_nested_too_deep_is_refused_with_the_depth(text):
    from specmon.inputs import InputError, parse_json

    with pytest.raises(InputError, match="where: nested deeper than 64 levels"):
        parse_json(text, where="where")
    assert parse_json(deep_json_text(64), where="where") is not None


@pytest.mark.parametrize("name", list(DEEP_TOML))
def test_toml_nested_too_deep_is_refused_with_the_depth(name):
    from specmon.inputs import InputError, parse_toml

    with pytest.raises(InputError, match="nested deeper than 64 levels"):
        parse_toml(DEEP_TOML[name], where="preset.toml")


def test_a_file_with_nan_is_refused_when_numbers_must_be_finite(tmp_path):
    from specmon.inputs import InputError, load_json_file

    path = tmp_path / "x.json"
    path.write_text('{"a": NaN}')
    assert load_json_file(path, 100)["a"] != 0  # NaN read as Python reads it
    with pytest.raises(InputError, match="not finite"):
        load_json_file(path, 100, finite=True)


# ----- every command that reads files someone else wrote


def _presets(tmp_path: Path, make: Callable[[Path], object]) -> list[str]:
    folder = tmp_path / "presets"
    folder.mkdir()
    make(folder / "hostile.toml")
    return ["presets", "--presets", str(folder)]


PRESET_CASES = {
    "FIFO": (fifo, "a FIFO, not a preset"),
    "link to /dev/zero": (zero_link, "a character device, not a preset"),
    "20 GiB sparse": (sparse, "more than a preset may have"),
    **{f"TOML {name}": (lambda path, text=text: path.write_text(text), "nested deeper than 64 levels")
       for name, text in DEEP_TOML.items()},
    "not UTF-8": (lambda path: path.write_bytes(b"name = '\xff'\n"), "cannot read the file"),
}


@pytest.mark.parametrize("name", list(PRESET_CASES))
def test_presets_say_which_file_is_bad_and_list_the_others(tmp_path, name):
    make, says = PRESET_CASES[name]
    done = specmon(tmp_path, *_presets(tmp_path, make))
    assert "hostile.toml" in done.stdout + done.stderr and says in done.stdout + done.stderr
    assert "eagle3-10" in done.stdout  # the good presets still listed


def _spoil(path: Path, how: str) -> None:
    path.unlink(missing_ok=True)
    if how == "fifo":
        fifo(path)
    elif how == "dev zero":
        zero_link(path)
    elif how == "sparse":
        sparse(path, head=b'{"a": ' if path.suffix == ".json" else b"\x00" * 8)
    elif how == "deep":
        path.write_text(deep_json_text(10_000, "{"))
    elif how == "deep header":
        text = deep_json_text(100_000).encode()
        path.write_bytes(len(text).to_bytes(8, "little") + text)
    elif how == "absurd header length":
        path.write_bytes((10**15).to_bytes(8, "little") + b"{}")
    elif how == "sparse with a 90 MB header claim":
        sparse(path, size=200 << 20, head=(90 << 20).to_bytes(8, "little") + b"{")


DOCTOR_CASES = {
    "config.json FIFO": ("config.json", "fifo", "config.json: a FIFO, not a config.json"),
    "config.json /dev/zero": ("config.json", "dev zero", "a character device, not a config.json"),
    "config.json 20 GiB": ("config.json", "sparse", "more than a config.json may have"),
    "config.json nested": ("config.json", "deep", "config.json: nested deeper than 64 levels"),
    "index FIFO": ("model.safetensors.index.json", "fifo", "a FIFO, not a safetensors index"),
    "index /dev/zero": ("model.safetensors.index.json", "dev zero", "a character device"),
    "index nested": ("model.safetensors.index.json", "deep", "nested deeper than 64 levels"),
    "index 20 GiB": ("model.safetensors.index.json", "sparse", "more than a safetensors index may have"),
    "shard FIFO": ("model.safetensors", "fifo", "a FIFO, not a safetensors file"),
    "shard /dev/zero": ("model.safetensors", "dev zero", "a character device, not a safetensors file"),
    "shard header nested": ("model.safetensors", "deep header", "nested deeper than 64 levels"),
    "shard header length absurd": ("model.safetensors", "absurd header length", "is absurd"),
    "shard sparse, a 90 MB header": ("model.safetensors", "sparse with a 90 MB header claim", "not JSON"),
}


@pytest.mark.parametrize("name", list(DOCTOR_CASES))
def test_the_doctor_names_the_bad_file_and_why(tmp_path, name):
    file, how, says = DOCTOR_CASES[name]
    draft = make_draft(tmp_path)
    _spoil(draft / file, how)
    done = specmon(tmp_path, "doctor", str(draft))
    assert done.returncode == 1, done.stdout + done.stderr
    assert says in done.stdout, done.stdout


def test_the_doctor_checks_a_good_draft_so_the_cases_above_can_fail(tmp_path):
    done = specmon(tmp_path, "doctor", str(make_draft(tmp_path)))
    assert done.returncode == 0 and "no problems found" in done.stdout, done.stdout


@pytest.mark.parametrize("layers", [10**9, 10**18, 1e9, -1, 0, "1", True])
def test_an_absurd_layer_count_is_an_error_never_an_allocation(tmp_path, layers):
    draft = make_draft(tmp_path, names=[name.replace("midlayer", "layers.0") for name in DRAFT_NAMES],
                       config=DRAFT_CONFIG | {"num_hidden_layers": layers})
    done = specmon(tmp_path, "doctor", str(draft), "--sglang-version", "0.5.16")
    assert done.returncode == 1
    assert "num_hidden_layers" in done.stdout and "cannot be a draft's layer count" in done.stdout, done.stdout


def test_the_doctor_target_config_is_read_with_the_same_bounds(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    fifo(target / "config.json")
    done = specmon(tmp_path, "doctor", str(make_draft(tmp_path)), "--target", str(target))
    assert done.returncode == 1 and "a FIFO, not a config.json" in done.stdout, done.stdout


def test_tensor_names_with_terminal_escapes_are_shown_escaped(tmp_path):
    names = ["layers.0.\x1b]0;pwned\x07mlp.weight", "layers.0.\x1b[2Jnorm.weight", *DRAFT_NAMES]
    draft = make_draft(tmp_path, names=[n.replace("midlayer", "layers.0") for n in names])
    done = specmon(tmp_path, "doctor", str(draft), "--sglang-version", "0.5.9")
    assert done.returncode == 1
    assert "\x1b" not in done.stdout + done.stderr and "\x07" not in done.stdout
    assert "layers.0.\\x1b]0;pwned\\x07mlp.weight" in done.stdout, done.stdout
    fixed = specmon(tmp_path, "fix-draft-keys", str(draft), str(tmp_path / "fixed"))
    assert "\x1b" not in fixed.stdout + fixed.stderr, fixed.stdout
    assert "layers.0.\\x1b[2Jnorm.weight -> midlayer.\\x1b[2Jnorm.weight" in fixed.stdout, fixed.stdout


@pytest.mark.parametrize("how", ["fifo", "dev zero"])
def test_fix_draft_keys_copies_regular_files_only_and_leaves_nothing(tmp_path, how):
    draft = make_draft(tmp_path)
    _spoil(draft / "tokenizer.json", how)
    done = specmon(tmp_path, "fix-draft-keys", str(draft), str(tmp_path / "fixed"))
    assert done.returncode == 1 and "tokenizer.json" in done.stderr, done.stderr
    assert not (tmp_path / "fixed").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".fixed")] == []


def test_fix_draft_keys_refuses_a_folder_link_that_loops(tmp_path):
    draft = make_draft(tmp_path)
    (draft / "extra").mkdir()
    (draft / "extra" / "loop").symlink_to(draft / "extra")
    done = specmon(tmp_path, "fix-draft-keys", str(draft), str(tmp_path / "fixed"))
    assert done.returncode == 1 and "a link to a folder" in done.stderr, done.stderr


STORE_CASES = {
    "FIFO": ("fifo", "a FIFO"),
    "link to /dev/zero": ("dev zero", None),
    "nested": ("deep", "nested deeper than"),
}


@pytest.mark.parametrize("name", list(STORE_CASES))
def test_ps_lists_a_hostile_state_file_as_a_problem(tmp_path, name):
    how, says = STORE_CASES[name]
    servers = tmp_path / "state" / "servers"
    servers.mkdir(parents=True, mode=0o700)
    _spoil(servers / "bad.json", how)
    done = specmon(tmp_path, "ps", "--json")
    problems = json.loads(done.stdout)["problems"]
    assert any("bad.json" in json.dumps(p) for p in problems), problems
    if says:
        assert says in json.dumps(problems), problems


@pytest.mark.parametrize("name", list(STORE_CASES))
def test_results_skip_a_hostile_run_file_and_say_so(tmp_path, name):
    how, says = STORE_CASES[name]
    results = tmp_path / "results"
    results.mkdir()
    path = results / "20260101-000000-bad0.jsonl"
    if how == "deep":
        path.write_text(deep_json_text(100_000) + "\n")
    else:
        _spoil(path, how)
    done = specmon(tmp_path, "results", "--dir", str(results))
    assert "20260101-000000-bad0.jsonl" in done.stderr, done.stderr
    if says:
        assert says in done.stderr, done.stderr


@pytest.mark.parametrize("name", list(STORE_CASES))
def test_sweep_resume_refuses_a_hostile_plan(tmp_path, name):
    how, says = STORE_CASES[name]
    sweeps = tmp_path / "state" / "sweeps"
    sweeps.mkdir(parents=True, mode=0o700)
    _spoil(sweeps / "bad.json", how)
    done = specmon(tmp_path, "sweep", "--resume", "bad")
    assert done.returncode != 0
    assert "bad" in done.stderr, done.stderr
    if says and how != "dev zero":
        assert says in done.stderr, done.stderr


@pytest.mark.parametrize("how", ["fifo", "dev zero", "sparse"])
def test_an_api_key_file_that_is_no_file_is_refused(tmp_path, how):
    key = tmp_path / "key"
    _spoil(key, how)
    done = specmon(tmp_path, "check", "--url", "http://127.0.0.1:9", "--api-key-file", str(key))
    assert done.returncode == 1 and "cannot read the API key file" in done.stderr, done.stderr


@pytest.mark.parametrize("how", ["fifo", "dev zero"])
def test_log_summary_reads_files_and_sends_pipes_to_stdin(tmp_path, how):
    log = tmp_path / "server.log"
    _spoil(log, how)
    for extra in ([], ["--follow"]):
        done = specmon(tmp_path, "log-summary", str(log), *extra)
        assert done.returncode == 2, done.stderr
        assert "not a log file" in done.stderr and "`-`" in done.stderr, done.stderr


@pytest.mark.parametrize("how", ["fifo", "dev zero"])
def test_monitor_refuses_a_log_that_is_no_file(tmp_path, how):
    log = tmp_path / "server.log"
    _spoil(log, how)
    once = specmon(tmp_path, "monitor", "--once", "--url", "http://127.0.0.1:9", "--log", str(log), "--window", "1")
    app = specmon(tmp_path, "monitor", "--url", "http://127.0.0.1:9", "--log", str(log), "--headless",
                  "--duration", "1")
    for done in (once, app):
        assert done.returncode == 2 and "not a log file" in done.stderr, done.stderr


@pytest.mark.timeout(30)
@pytest.mark.parametrize("how", ["fifo", "dev zero", "deep"])
def test_prompts_files_are_read_with_the_same_bounds(tmp_path, how):
    from specmon.bench.prompts import PromptError, load_prompts

    path = tmp_path / "prompts.jsonl"
    if how == "deep":
        path.write_text(deep_json_text(100_000, "{") + "\n")
    else:
        _spoil(path, how)
    with pytest.raises(PromptError, match="prompts.jsonl"):
        load_prompts(str(path))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("reader", ["rules", "draft loader"])
@pytest.mark.parametrize("how", ["fifo", "dev zero", "nested"])
def test_an_installed_sglangs_source_is_read_with_the_same_bounds(tmp_path, how, reader):
    from specmon.sglang.draft_loader import read_draft_loader
    from specmon.sglang.rules import read_installed_rules
    from specmon.sglang.source import SGLangSourceError

    package = tmp_path / "sglang"
    (package / "srt" / "models").mkdir(parents=True)
    (package / "version.py").write_text('__version__ = "0.5.16"\n')
    source = package / "srt" / ("server_args.py" if reader == "rules" else "models/llama_eagle3.py")
    if how == "nested":
        source.write_text("x = " + "(" * 100_000 + ")" * 100_000 + "\n")
    else:
        _spoil(source, how)
    with pytest.raises(SGLangSourceError, match=source.name):
        (read_installed_rules if reader == "rules" else read_draft_loader)(package)


# ----- a private directory of specmon's that is a symbolic link: refused, in one line, never a traceback


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


SYMLINKED = {
    "sweeps: sweep": ("sweeps", ["sweep", "demo-baseline", "demo-eagle3-5", "--speed", "50", "--no-preflight",
                                 "--requests", "1"], 2),
    "sweeps: sweep --predict-only": ("sweeps", ["sweep", "demo-eagle3-5", "--predict-only", "--speed", "50",
                                                "--no-preflight", "--requests", "1"], 2),
    "servers: start": ("servers", ["start", "demo-eagle3-5", "--speed", "50", "--no-preflight", "--port", "{port}"], 1),
    "runs: start": ("runs", ["start", "demo-eagle3-5", "--speed", "50", "--no-preflight", "--port", "{port}"], 1),
    "demo: demo": ("demo", ["demo", "--headless", "--duration", "1", "--no-preflight"], 1),
}


@pytest.mark.parametrize("name", list(SYMLINKED))
def test_a_symlinked_state_directory_is_refused_in_one_line(tmp_path, name):
    import psutil

    folder, argv, code = SYMLINKED[name]
    state, elsewhere = tmp_path / "state", tmp_path / "elsewhere"
    state.mkdir(mode=0o700)
    elsewhere.mkdir()
    (state / folder).symlink_to(elsewhere)
    port = str(_free_port())
    try:
        done = specmon(tmp_path, *(part.replace("{port}", port) for part in argv))
    finally:  # had it launched anything despite the refusal, it is stopped here
        for proc in psutil.process_iter(["cmdline"]):
            if port in (proc.info["cmdline"] or []) or str(tmp_path) in " ".join(proc.info["cmdline"] or []):
                proc.kill()
    said = [line for line in (done.stdout + done.stderr).splitlines() if "is a symbolic link" in line]
    assert done.returncode == code and len(said) == 1, (done.returncode, done.stdout, done.stderr)
    assert str(state / folder) in said[0] and "PEAK_RSS" not in said[0]
    assert list(elsewhere.iterdir()) == []  # nothing written through the link
    assert "resume" not in done.stderr  # no sweep announced that was never saved


def test_a_private_file_that_is_a_symbolic_link_is_refused_by_every_command_that_meets_it(tmp_path, capsys,
                                                                                          monkeypatch):
    from specmon.cli import main
    from specmon.private_files import PrivatePathRefused, open_private_file

    target = tmp_path / "elsewhere"
    target.write_text("")
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(PrivatePathRefused):
        open_private_file(tmp_path / "link")

    def refusing(args):
        raise PrivatePathRefused(40, "is a symbolic link (refused)", str(tmp_path / "link"))

    monkeypatch.setattr("specmon.ps.run_ps", refusing)
    assert main(["ps"]) == 2
    err = capsys.readouterr().err
    assert err == f"specmon ps: {tmp_path / 'link'}: is a symbolic link (refused)\n", err
