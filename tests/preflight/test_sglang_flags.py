"""SGLang's launch flags: the AST reader on synthetic sources, the shipped tables, the loader and the script."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specmon.sglang.flags import (
    DATA_DIR,
    Flag,
    load_shipped,
    read_installed,
    shipped_versions,
    table_from_data,
    version_key,
)
from specmon.sglang.source import SUPPRESS, SGLangSourceError, read_source

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "sglang_flags.py"
SHIPPED = ("0.4.6.post5", "0.5.9", "0.5.16", "0.5.23")


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root / "sglang"


ADD_ARGUMENT_LAYOUT = {
    "sglang/version.py": '__version__ = "0.4.9"\n',
    "sglang/srt/consts.py": 'LOAD_FORMATS = ["auto", "pt"]\n',
    "sglang/srt/server_args.py": """
        import argparse
        import dataclasses
        from typing import List, Optional

        from sglang.srt.consts import LOAD_FORMATS

        ATTENTION = ("flashinfer", "triton")


        @dataclasses.dataclass
        class ServerArgs:
            model_path: str
            port: int = 30000
            mem_fraction_static: Optional[float] = None
            load_format: str = "auto"
            lora_paths: List[str] = dataclasses.field(default_factory=list)

            @staticmethod
            def add_cli_args(parser: argparse.ArgumentParser):
                parser.add_argument("--model-path", "--model", type=str, required=True, help="The model.")
                parser.add_argument("--port", type=int, default=ServerArgs.port, help="The port.")
                parser.add_argument("--mem-fraction-static", type=float, default=ServerArgs.mem_fraction_static)
                parser.add_argument("--load-format", choices=LOAD_FORMATS, default=ServerArgs.load_format)
                parser.add_argument("--attention-backend", choices=list(ATTENTION) + ["fa3"])
                parser.add_argument("--speculative-algorithm", type=str, choices=["EAGLE", "EAGLE3"])
                parser.add_argument("--trust-remote-code", action="store_true", help=f"Port {ServerArgs.port}.")
                parser.add_argument("--old-flag", action=DeprecatedAction, help=argparse.SUPPRESS)
                parser.add_argument("--lora-paths", type=str, nargs="*", metavar="PATH", dest="lora_paths")
                parser.add_argument("--mystery", type=int, default=compute())


        class DeprecatedAction(argparse.Action):
            def __init__(self, option_strings, dest, nargs=0, **kwargs):
                super().__init__(option_strings, dest, nargs=nargs, **kwargs)
        """,
}

ANNOTATED_LAYOUT = {
    "sglang-0.5.16.dist-info/METADATA": "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.16\n",
    "sglang/srt/speculative/spec_info.py": """
        from enum import Enum, auto

        class SpeculativeAlgorithm(Enum):
            EAGLE = auto()
            EAGLE3 = auto()
            NONE = auto()
        """,
    "sglang/srt/arg_groups/speculative_hook.py": 'def handle(name):\n    return name == "NEXTN"\n',
    "sglang/srt/parser/registry.py": """
        class Parser:
            DetectorMap = {"qwen3": object, "kimi": object}
        """,
    "sglang/srt/server_args.py": """
        import argparse
        import dataclasses
        from typing import List, Literal, Optional

        from sglang.srt.arg_groups.arg_utils import A, Arg, add_cli_args_from_dataclass
        from sglang.srt.parser.registry import Parser

        DTYPES = ["auto", "half"]


        @dataclasses.dataclass
        class ServerArgs:
            model_path: A[str, Arg(help="The model.", aliases=["--model"])]
            tp_size: A[int, Arg(help="Tensor parallel size.", aliases=["--tp"])] = 1
            dtype: A[str, Arg(help="Data type.", choices=DTYPES)] = DTYPES[0]
            speculative_algorithm: A[Optional[str], "Speculative algorithm."] = None
            speculative_num_draft_tokens: A[Optional[int], "Draft tokens."] = None
            enable_metrics: A[bool, "Enable metrics."] = False
            mode: A[Literal["a", "b"], "A mode."] = "a"
            cuda_graph_bs: A[Optional[List[int]], "Batch sizes."] = None
            hidden_field: A[int, Arg(no_cli=True)] = 3
            plain_field: int = 7

            @staticmethod
            def add_cli_args(parser: argparse.ArgumentParser):
                add_cli_args_from_dataclass(parser, ServerArgs)
                parser_choices = list(Parser.DetectorMap.keys())
                parser.add_argument("--reasoning-parser", choices=["auto"] + parser_choices)
                parser.add_argument("--tp-size", type=int)  # a duplicate: the first registration wins
        """,
}

NAMESPACES_LAYOUT = {
    "sglang-0.5.23.dist-info/METADATA": "Version: 0.5.23\n",
    "sglang/srt/arg_groups/field_order.py": 'POSITIONAL_FIELD_ORDER = ("model_path", "port")\n',
    "sglang/srt/arg_groups/fields/__init__.py": """
        from sglang.srt.arg_groups.field_order import POSITIONAL_FIELD_ORDER

        def collect_input_fields(sources):
            return sources
        """,
    "sglang/srt/arg_groups/fields/spec.py": """
        import msgspec
        from typing import Optional
        from sglang.srt.arg_groups.arg_utils import A

        class Spec(msgspec.Struct):
            _NS_PATH = "spec"
            speculative_num_steps: A[Optional[int], "Steps."] = None
        """,
    "sglang/srt/arg_groups/fields/serving.py": """
        import msgspec
        from sglang.srt.arg_groups.arg_utils import A, Arg

        class Serving(msgspec.Struct):
            _NS_PATH = "serving"
            host: A[str, "Host."] = "127.0.0.1"
            port: A[int, "Port."] = 30000
            model_path: A[str, Arg(help="The model.")]
        """,
    "sglang/srt/server_args.py": """
        import argparse
        import msgspec
        from sglang.srt.arg_groups.arg_utils import add_cli_args_from_dataclass
        from sglang.srt.arg_groups.fields import collect_input_fields
        from sglang.srt.arg_groups.fields.serving import Serving
        from sglang.srt.arg_groups.fields.spec import Spec


        def _choices():
            from sglang.srt.arg_groups.field_order import POSITIONAL_FIELD_ORDER

            return list(POSITIONAL_FIELD_ORDER)


        class ServerArgs:
            @staticmethod
            def add_cli_args(parser: argparse.ArgumentParser):
                add_cli_args_from_dataclass(parser, ServerArgs)
                parser.add_argument("--sampling-backend", default=_declared_default("host"), choices=_choices())


        def _declared_default(name):
            return None


        _INPUT_NAMESPACES = [Spec, Serving]
        _annotations = collect_input_fields(_INPUT_NAMESPACES)
        ServerArgs = msgspec.defstruct("ServerArgs", [])
        """,
}


def flags_by_option(data: dict) -> dict[str, dict]:
    return {flag["option_strings"][0]: flag for flag in data["flags"]}


# --- The AST reader -------------------------------------------------------------------------------------


def test_reader_reads_add_argument_calls_with_resolved_defaults_and_choices(tmp_path):
    data = read_source(write(tmp_path, ADD_ARGUMENT_LAYOUT))
    assert data["version"] == "0.4.9" and data["layout"] == "add_argument"
    flags = flags_by_option(data)
    assert list(flags)[:3] == ["--model-path", "--port", "--mem-fraction-static"]
    assert flags["--model-path"]["option_strings"] == ["--model-path", "--model"]
    assert flags["--model-path"]["required"] is True
    assert flags["--port"] == {
        "option_strings": ["--port"], "dest": "port", "type": "int", "default": 30000, "choices": None,
        "nargs": None, "action": None, "help": "The port.", "metavar": None, "required": False, "unresolved": [],
    }
    assert flags["--mem-fraction-static"]["type"] == "float"
    assert flags["--load-format"]["choices"] == ["auto", "pt"]  # a constant imported from another module
    assert flags["--attention-backend"]["choices"] == ["flashinfer", "triton", "fa3"]
    assert flags["--trust-remote-code"]["action"] == "store_true"
    assert flags["--trust-remote-code"]["default"] is False
    assert flags["--trust-remote-code"]["help"] == "Port 30000."
    assert flags["--old-flag"]["nargs"] == 0 and flags["--old-flag"]["help"] == SUPPRESS
    assert flags["--lora-paths"]["nargs"] == "*" and flags["--lora-paths"]["metavar"] == "PATH"
    assert flags["--mystery"]["default"] is None and flags["--mystery"]["unresolved"] == ["default"]
    assert data["speculative_algorithms"] == ["EAGLE", "EAGLE3"]
    assert data["defaults"] == {"port": 30000, "mem_fraction_static": None, "load_format": "auto", "lora_paths": []}


def test_reader_expands_annotated_dataclass_fields_like_add_cli_args_from_dataclass(tmp_path):
    data = read_source(write(tmp_path, ANNOTATED_LAYOUT))
    assert data["version"] == "0.5.16" and data["layout"] == "annotated-dataclass"
    flags = flags_by_option(data)
    assert list(flags) == [
        "--model-path", "--tp-size", "--dtype", "--speculative-algorithm", "--speculative-num-draft-tokens",
        "--enable-metrics", "--mode", "--cuda-graph-bs", "--reasoning-parser",
    ]
    assert flags["--model-path"]["required"] is True and flags["--model-path"]["help"] == "The model."
    assert flags["--tp-size"]["option_strings"] == ["--tp-size", "--tp"]
    assert flags["--tp-size"]["type"] == "int" and flags["--tp-size"]["default"] == 1
    assert flags["--dtype"]["choices"] == ["auto", "half"] and flags["--dtype"]["default"] == "auto"
    assert flags["--speculative-num-draft-tokens"]["type"] == "int"
    assert flags["--enable-metrics"]["action"] == "store_true"
    assert flags["--mode"]["choices"] == ["a", "b"] and flags["--mode"]["type"] == "str"
    assert flags["--cuda-graph-bs"]["nargs"] == "+" and flags["--cuda-graph-bs"]["type"] == "int"
    assert flags["--reasoning-parser"]["choices"] == ["auto", "qwen3", "kimi"]
    assert data["speculative_algorithms"] == ["EAGLE", "EAGLE3", "NEXTN"]
    assert data["defaults"]["hidden_field"] == 3 and data["defaults"]["plain_field"] == 7
    assert "model_path" not in data["defaults"]


def test_reader_collects_namespace_fields_in_positional_order(tmp_path):
    data = read_source(write(tmp_path, NAMESPACES_LAYOUT))
    assert data["version"] == "0.5.23" and data["layout"] == "field-namespaces"
    flags = flags_by_option(data)
    assert list(flags) == ["--model-path", "--port", "--speculative-num-steps", "--host", "--sampling-backend"]
    assert flags["--sampling-backend"]["default"] == "127.0.0.1"
    assert flags["--sampling-backend"]["choices"] == ["model_path", "port"]
    assert data["defaults"] == {"port": 30000, "speculative_num_steps": None, "host": "127.0.0.1"}


def test_reader_fails_with_sglang_source_error(tmp_path):
    with pytest.raises(SGLangSourceError, match="srt/server_args.py"):
        read_source(tmp_path)
    broken = write(tmp_path, {"sglang/version.py": '__version__ = "1"\n', "sglang/srt/server_args.py": "def (:\n"})
    with pytest.raises(SGLangSourceError, match="cannot parse"):
        read_source(broken)
    no_class = write(tmp_path / "b", {"sglang/srt/server_args.py": "X = 1\n"})
    with pytest.raises(SGLangSourceError, match="no class ServerArgs"):
        read_source(no_class)


def test_read_installed_is_a_package_source_table(tmp_path):
    table = read_installed(write(tmp_path, ANNOTATED_LAYOUT))
    assert table.source == "package source" and table.version == "0.5.16"
    assert table.get("--tp").option == "--tp-size"


# --- The shipped tables ---------------------------------------------------------------------------------


def test_every_version_is_shipped_and_round_trips():
    assert shipped_versions() == SHIPPED
    for version in SHIPPED:
        path = DATA_DIR / f"sglang-{version}.json"
        text = path.read_text()
        data = json.loads(text)
        assert text == json.dumps(data, indent=1, ensure_ascii=False) + "\n"
        table = load_shipped(version)
        assert table.source == "shipped table" and table.version == version and table.exact
        assert [flag.option_strings for flag in table.flags] == [tuple(f["option_strings"]) for f in data["flags"]]
        assert dict(table.defaults) == data["defaults"]


@pytest.mark.parametrize("version", SHIPPED)
def test_draft_tokens_is_an_int_flag_in_every_version(version):
    flag = load_shipped(version).get("--speculative-num-draft-tokens")
    assert flag is not None and flag.type == "int" and flag.takes_value
    assert flag.check_value("16") is None
    assert flag.check_value("many") == "argument --speculative-num-draft-tokens: invalid int value: 'many'"


@pytest.mark.parametrize("version", ["0.5.9", "0.5.16", "0.5.23"])
def test_eagle3_is_a_speculative_algorithm_in_0_5(version):
    table = load_shipped(version)
    assert "EAGLE3" in table.speculative_algorithms and "NEXTN" in table.speculative_algorithms


def test_flags_come_and_go_between_versions():
    old, v059, v0516, new = (load_shipped(v) for v in SHIPPED)
    assert old.get("--speculative-algorithm").choices == ("EAGLE", "EAGLE3", "NEXTN")
    assert v059.get("--speculative-algorithm").check_value("STANDALONE") is None
    assert "choose from 'EAGLE', 'EAGLE3', 'NEXTN'" in old.get("--speculative-algorithm").check_value("NGRAM")
    assert "--speculative-draft-model-revision" in v059 and "--speculative-draft-model-revision" not in old
    assert "--nsa-prefill-backend" in v0516 and "--nsa-prefill-backend" not in new
    assert "--attn-dp-size" in new and "--attn-dp-size" not in v0516
    assert "UNO" in new.speculative_algorithms and "UNO" not in v0516.speculative_algorithms


def test_nearest_older_table_stands_in_and_says_so():
    between = load_shipped("0.5.12")
    assert between.version == "0.5.9" and between.requested_version == "0.5.12" and not between.exact
    assert "nearest older" in between.note
    assert load_shipped("0.5.16.post1").version == "0.5.16"
    assert load_shipped("0.6.0").version == "0.5.23"
    ancient = load_shipped("0.3.0")
    assert ancient.version == "0.4.6.post5" and "older than every shipped table" in ancient.note
    assert load_shipped().version == "0.5.23"
    assert version_key("0.4.6") < version_key("0.4.6.post5") < version_key("0.4.7rc1") < version_key("0.4.7")


def test_suggest_names_the_flag_meant():
    for version in SHIPPED:
        assert load_shipped(version).suggest("--num-speculative-tokens") == "--speculative-num-draft-tokens"
    table = load_shipped("0.5.16")
    assert table.suggest("--speculative-num-draft-tokens") is None
    assert table.suggest("--speculative_num_steps") == "--speculative-num-steps"
    assert table.suggest("--tensor-parallel-size") == "--tp-size"  # an alias: its flag's own option
    assert load_shipped("0.4.6.post5").suggest("--tp-size") == "--tensor-parallel-size"
    assert table.suggest("--context-lenght") == "--context-length"
    assert table.suggest("--zzz-nothing-like-it") is None


def test_value_checks_and_lookups():
    table = load_shipped("0.5.16")
    assert table.get("--mem-fraction-static=0.8").check_value("0.8") is None
    assert "invalid float value" in table.get("--mem-fraction-static").check_value("most")
    assert "invalid choice: 'slower'" in table.get("--tokenizer-mode").check_value("slower")
    assert not table.get("--enable-metrics").takes_value
    assert table.get("--speculative-dflash-draft-window-size").hidden
    assert table.get("--cuda-graph-max-bs").deprecated
    assert [flag.option for flag in table.by_dest("cuda_graph_max_bs_decode")] == [
        "--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"]


def test_malformed_tables_fail_clearly():
    with pytest.raises(SGLangSourceError):
        table_from_data([], "shipped table")
    with pytest.raises(SGLangSourceError, match="lacks"):
        table_from_data({"version": "1"}, "shipped table")
    with pytest.raises(SGLangSourceError, match="exactly"):
        Flag.from_data({"option_strings": ["--x"]})
    good = json.loads((DATA_DIR / "sglang-0.4.6.post5.json").read_text())
    good["flags"][0]["choices"] = "abc"
    with pytest.raises(SGLangSourceError, match="choices"):
        table_from_data(good, "shipped table")
    with pytest.raises(SGLangSourceError):
        version_key("latest")


# --- The script -----------------------------------------------------------------------------------------


def test_script_writes_exactly_what_the_reader_reads(tmp_path):
    package = write(tmp_path / "src", ANNOTATED_LAYOUT)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(package), "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    written = (tmp_path / "out" / "sglang-0.5.16.json").read_text()
    data = read_source(package, generated_from="sglang sglang/ source")
    assert written == json.dumps(data, indent=1, ensure_ascii=False) + "\n"
    table = table_from_data(json.loads(written), "shipped table")
    assert table.get("--model").option == "--model-path"


def test_script_reports_a_bad_source(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "not an sglang package directory" in done.stderr
