"""One import name (specmon), and headless commands that never import Textual."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from scripts.lint_imports import package_dirs

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "tests" / "fixtures" / "logs" / "h200-0.5.16-plain-ready.log"

RUN_AND_REPORT = """
import sys
from specmon.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
ui = sorted({m.split('.')[0] for m in sys.modules} & {'textual', 'textual_plotext', 'plotext'})
ui += sorted(m for m in sys.modules if m.startswith(('specmon.widgets', 'specmon.tui')))
print('UI-MODULES:', ','.join(ui), file=sys.stderr)
"""

HEADLESS = {
    "log-summary": ["log-summary", str(LOG), "--json"],
    "bench": ["bench", "--url", "http://127.0.0.1:9", "--requests", "1", "--warmup", "0", "--json"],
    "gpus": ["gpus", "--json"],
    "check": ["check", "--url", "http://127.0.0.1:9", "--json"],
    "check-preset": ["check", "demo-eagle3-16", "--json"],
    "doctor": ["doctor", "{tmp}", "--json"],
    "fix-draft-keys": ["fix-draft-keys", "{tmp}", "{tmp}/out"],
    "presets": ["presets", "--json"],
    "results": ["results", "--dir", "{tmp}", "--format", "json"],
    "predict": ["predict", "no-such-run", "--dir", "{tmp}", "--json"],
    "emulate": ["emulate", "--model-path", "/m", "--no-such-flag"],
    "monitor --once": ["monitor", "--url", "http://127.0.0.1:9", "--once", "--window", "1", "--json"],
    "start": ["start", "no-such-preset", "--json"],
    "ps": ["ps", "--json"],
    "stop": ["stop", "no-such-server", "--json"],
    "switch": ["switch", "no-such-preset", "--json"],
    "sweep": ["sweep", "--resume", "no-such-sweep", "--json"],
    "fleet --once": ["fleet", "--prometheus", "http://127.0.0.1:9", "--once", "--json"],
    "fleet rules": ["fleet", "rules"],
    "fleet dashboard": ["fleet", "dashboard"],
    "ps --prometheus-sd": ["ps", "--prometheus-sd"],
    "traffic": ["traffic", "{tmp}", "--json"],
}


@pytest.mark.parametrize("command", sorted(HEADLESS))
def test_headless_command_never_imports_textual(command: str, tmp_path: Path) -> None:
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in HEADLESS[command]]
    done = subprocess.run(
        [sys.executable, "-c", RUN_AND_REPORT, *argv], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    report = [line for line in done.stderr.splitlines() if line.startswith("UI-MODULES:")]
    assert report, done.stderr[-2000:]
    assert report[-1] == "UI-MODULES: ", f"{command} imported {report[-1]}"


def test_every_headless_command_of_the_cli_is_checked() -> None:
    from specmon.cli import build_parser

    parser = build_parser()
    commands = set(parser._subparsers._group_actions[0].choices)
    headless = {name.split(" ")[0].split("-preset")[0] for name in HEADLESS}
    assert commands - {"demo", "monitor"} == headless - {"monitor"}


def test_no_generic_top_level_package_is_importable(tmp_path: Path) -> None:
    for name in ("tui", "widgets", "presets"):
        done = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode != 0 and "ModuleNotFoundError" in done.stderr, name
    done = subprocess.run(
        [sys.executable, "-c", "import specmon.cli, specmon.widgets, specmon.presets"], cwd=tmp_path
    )
    assert done.returncode == 0


def test_the_wheel_holds_one_top_level_package_with_its_data(tmp_path: Path) -> None:
    source = tmp_path / "src"  # a copy: building in the checkout would leave build/ there
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    folders = package_dirs()
    for folder in folders.values():
        shutil.copytree(folder, source / folder.name, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = tmp_path.glob("specmon-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"specmon", "specmon-" + wheel.name.split("-")[1] + ".dist-info"}
    for name, folder in folders.items():
        for init in folder.rglob("__init__.py"):
            installed = "/".join([*name.split("."), *init.relative_to(folder).parts])
            assert installed in names, init
    for data in ("specmon/presets/eagle3-16.toml", "specmon/tui/app.tcss", "specmon/bench/prompts_chat.jsonl",
                 "specmon/sglang/data/sglang-0.5.16.json"):
        assert data in names


def test_the_core_folder_is_its_import_path() -> None:
    import specmon.bench.stats
    import specmon.view.state

    assert Path(specmon.bench.stats.__file__) == ROOT / "specmon" / "bench" / "stats.py"
    assert Path(specmon.view.state.__file__) == ROOT / "specmon" / "view" / "state.py"
