"""SGLang's per-request records, one line at a time, as SGLang writes them (read from its own source).

Three formats, each with the file it comes from (sgl-project/sglang, python/sglang/srt/):
- the export file (`--export-metrics-to-file --export-metrics-to-file-dir DIR`), present in 0.5.16:
  observability/request_metrics_exporter.py, `FileRequestMetricsExporter.write_record`: one JSON object per line,
  `{"request_parameters": json.dumps(<GenerateReqInput fields that are not None>), **out["meta_info"]}`, in
  `DIR/sglang-request-metrics-YYYYMMDD_HH.log` (one file per local hour); health checks are not written.
- the request log, JSON (`--log-requests --log-requests-format json`): utils/request_logger.py,
  `RequestLogger.log_finished_request`: `{"timestamp": isoformat, "event": "request.finished", "rid", "obj":
  {...}, "out": {"text", "output_ids", "meta_info": {...}}}` (a file target writes the bare message; read
  after any dated prefix too).
- the request log, text (`--log-requests`, the default format): the same function, `logger.info(f"Finish:
  obj={GenerateReqInput(...)}, out={...}")` through SGLang's logging, so after its `[YYYY-MM-DD HH:MM:SS] `
  prefix; values are Python reprs (`'text'`, `None`, `nan`), strings cut to `'head' ... 'tail'` at level 2 (and
  lists over 2,048 items to `[head] ... [tail]`); read: scalars, strings up to 200 characters, whole `input_ids`.
The acceptance fields are `meta_info`'s: `completion_tokens`, `spec_verify_ct` (0.5.9+: only when > 0),
`spec_accept_length` (0.5.9+, = completion_tokens / spec_verify_ct), `spec_accept_histogram` (steps per
number of accepted drafts, as long as the most drafts any step accepted + 1). Health checks have rids starting
`HEALTH_CHECK` (sglang/srt/constants.py, HEALTH_CHECK_RID_PREFIX).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from specmon.text import printable, strict_json

HEALTH_CHECK_PREFIX = "HEALTH_CHECK"
EXPORT_FILE = re.compile(r"sglang-request-metrics-(\d{8})_(\d{2})\.log\Z")
MAX_TOKENS = 10_000_000
"""More tokens than this in one request is not a request (the longest contexts served are ~10^6)."""
MAX_HISTOGRAM = 64
LABEL_CHARS = 64
"""A label (a rid, a `--by` value) is printable and at most this long; longer ones end in `…`."""
ACCEPT_LENGTH_TOLERANCE = 1e-6
_INF = math.inf

_DATED = re.compile(r"\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})")
_FINISH_TEXT = "Finish: obj="
_FINISH_JSON = '"request.finished"'
_META_TEXT = "'meta_info': {"
_TEXT_VALUE = r"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|nan|-?inf|None|True|False|\[[-\d, ]*\])"
_TEXT_FIELD = re.compile(r"'(completion_tokens|prompt_tokens|spec_verify_ct|spec_accept_length|"
                         r"request_finished_ts|spec_accept_histogram|id)': (" + _TEXT_VALUE[1:-1] + r"|'[^']{0,200}')")


class Unusable(Exception):
    """A record that cannot be used; its message is the reason, counted as it is (so: no values in it)."""


@dataclass(slots=True)
class RequestRecord:
    """One finished request's acceptance, checked: `accept_length` = completion_tokens / verify_ct. Not frozen
    (a frozen dataclass took 2 µs to make, a fifth of reading a record), but never changed once made."""

    rid: str
    prompt_tokens: int | None
    completion_tokens: int
    verify_ct: int
    finished_ts: float | None
    histogram: tuple[int, ...]
    params: dict[str, Any] | None  # request_parameters (or the log's obj), for --by

    @property
    def accept_length(self) -> float:
        return self.completion_tokens / self.verify_ct


def label(value: object) -> str:
    """Outside text as a label: control characters escaped, at most LABEL_CHARS characters."""
    if type(value) is str and len(value) <= LABEL_CHARS and value.isprintable():  # the common case, at once
        return value
    text = value if isinstance(value, str) else strict_json(value, sort_keys=True)
    text = printable(text)
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def is_health_check(rid: object) -> bool:
    return isinstance(rid, str) and rid.startswith(HEALTH_CHECK_PREFIX)


def _count(value: object, key: str, *, required: bool = True) -> int | None:
    if type(value) is int and 0 <= value <= MAX_TOKENS:  # the common case, at once
        return value
    if value is None:
        if required:
            raise Unusable(f"no {key}")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Unusable(f"{key} is not a number")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Unusable(f"{key} is NaN or infinite")
        if value != int(value):
            raise Unusable(f"{key} is not a whole number")
        value = int(value)
    if value < 0:
        raise Unusable(f"{key} is negative")
    if value > MAX_TOKENS:
        raise Unusable(f"{key} over {MAX_TOKENS:,}")
    return value


def _histogram(value: object, verify_ct: int) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_HISTOGRAM or (value and (
            set(map(type, value)) != {int} or min(value) < 0 or max(value) > MAX_TOKENS)):
        raise Unusable("spec_accept_histogram is not a list of counts")
    if value and sum(value) != verify_ct:
        raise Unusable("spec_accept_histogram does not sum to spec_verify_ct")
    return tuple(value)


def checked(rid: object, meta: dict[str, Any] | _ExportRecord, params: dict[str, Any] | None,
            finished_ts: float | None) -> RequestRecord:
    """The record of one request's `meta_info` (a dict, or an export line's fields as decoded), every value
    checked; Unusable says why not."""
    get = meta.get if isinstance(meta, dict) else meta.__getattribute__
    completion, verify = get("completion_tokens"), get("spec_verify_ct")
    if not (type(completion) is int and type(verify) is int and 0 < verify <= completion <= MAX_TOKENS):
        completion = _count(completion, "completion_tokens")
        assert completion is not None
        verify = _count(verify, "spec_verify_ct", required=False)
        if verify is None:
            raise Unusable("no spec_verify_ct (no speculation, or no verify step)")
        if verify == 0:
            raise Unusable("spec_verify_ct is 0")
        if verify > completion:
            raise Unusable("spec_verify_ct over completion_tokens")
    prompt = _count(get("prompt_tokens"), "prompt_tokens", required=False)
    reported = get("spec_accept_length")
    if reported is not None:
        if type(reported) is not float and (isinstance(reported, bool) or not isinstance(reported, int | float)):
            raise Unusable("spec_accept_length is not a finite number")
        if not -_INF < reported < _INF:
            raise Unusable("spec_accept_length is not a finite number")
        if abs(reported - completion / verify) > ACCEPT_LENGTH_TOLERANCE * max(1.0, reported):
            raise Unusable("spec_accept_length disagrees with completion_tokens / spec_verify_ct")
    ts = get("request_finished_ts")
    if (type(ts) is not float and (ts is None or isinstance(ts, bool) or not isinstance(ts, int | float))
            or not 0 <= ts < _INF):
        ts = finished_ts
    return RequestRecord(label(rid if rid is not None else "?"), prompt, completion, verify, ts,
                         _histogram(get("spec_accept_histogram"), verify), params)


def _loads(text: str | bytes) -> Any:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    try:
        return json.loads(text, parse_constant=lambda name: float(name.replace("Infinity", "inf")))
    except RecursionError:
        raise Unusable("JSON nested too deep") from None
    except ValueError:
        raise Unusable("not JSON (truncated or another format)") from None


class _ExportRecord(msgspec.Struct):
    """The fields of an export line that are read, decoded by msgspec without building a dict of the rest; each
    value is checked by `checked` as a dict's would be."""

    request_parameters: Any = None
    id: Any = None
    prompt_tokens: Any = None
    completion_tokens: Any = None
    spec_verify_ct: Any = None
    spec_accept_length: Any = None
    spec_accept_histogram: Any = None
    request_finished_ts: Any = None


_EXPORT_DECODER = msgspec.json.Decoder(_ExportRecord)
_ANY_DECODER = msgspec.json.Decoder()


def _decoded_export(line: str | bytes) -> _ExportRecord | dict[str, Any]:
    """The export line decoded: by msgspec (fast), else by json (NaN, deep nesting, not an object: said as
    `_loads` says them)."""
    try:
        return _EXPORT_DECODER.decode(line)
    except (msgspec.DecodeError, RecursionError):
        record = _loads(line)
        if not isinstance(record, dict):
            raise Unusable("not a JSON object") from None
        return record


def _params(raw: str) -> Any:
    try:
        return _ANY_DECODER.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return _loads(raw)


def parse_export(line: str | bytes, want_params: bool = False) -> RequestRecord | None:
    """One line of an export file; None for a health check. request_parameters (a second JSON document) is parsed
    only when wanted (--by) or when meta_info has no id to name the request."""
    record = _decoded_export(line)
    get = record.get if isinstance(record, dict) else record.__getattribute__
    raw_params = get("request_parameters")
    if not isinstance(raw_params, str):
        raise Unusable("no request_parameters (another SGLang version's record?)")
    params = None
    rid = get("id")
    if want_params or not isinstance(rid, str):
        params = _params(raw_params)
        if not isinstance(params, dict):
            raise Unusable("request_parameters is not a JSON object")
    if not isinstance(rid, str):
        rid = params.get("rid") if params else None
    if is_health_check(rid):
        return None
    return checked(rid, record, params, None)


def _dated(line: str) -> float | None:
    match = _DATED.match(line.lstrip())
    if not match:
        return None
    try:
        return datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").timestamp()
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class LaunchedShape:
    """The speculative configuration one launch in a server's log ran with, from its `server_args` line (None
    where the line does not say)."""

    algorithm: str | None
    num_steps: int | None
    eagle_topk: int | None
    num_draft_tokens: int | None
    model: str | None = None
    """The target's weights, by the last part of its path (a local folder or a hub id)."""
    draft_model: str | None = None
    """The draft's, likewise."""

    def describe(self) -> str:
        """E.g. "EAGLE3 steps 3 topk 1 draft 4" (what the line does not say left out), or "no speculation"."""
        if self.algorithm is None:
            return "no speculation"
        said = (("steps", self.num_steps), ("topk", self.eagle_topk), ("draft", self.num_draft_tokens))
        return " ".join([self.algorithm, *(f"{name} {value}" for name, value in said if value is not None)])


def launched_shape(line: str) -> LaunchedShape | None:
    """The configuration a log's `server_args` line launched (None: not such a line)."""
    from specmon.logs.patterns import LAUNCH_BEGIN, SPEC_ALGORITHM, SPEC_SHAPE_ARG, WEIGHTS_PATH_ARG

    if not any(begin in line for begin in LAUNCH_BEGIN):
        return None
    algorithm = SPEC_ALGORITHM.search(line)
    shape = {name: None if value == "None" else int(value) for name, value in SPEC_SHAPE_ARG.findall(line)}
    weights = {name: weights_name(path) for name, path in WEIGHTS_PATH_ARG.findall(line)}
    return LaunchedShape(algorithm.group(1).upper() if algorithm else None, shape.get("num_steps"),
                         shape.get("eagle_topk"), shape.get("num_draft_tokens"), weights.get("model_path"),
                         weights.get("speculative_draft_model_path"))


def weights_name(path: str | None) -> str | None:
    """The last part of a weights path or hub id ("/models/llama-70b/" → "llama-70b"), shown safely: two
    servers' weights are compared by it, so one folder mounted at two places reads the same."""
    if not path:
        return None
    name = path.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1]
    return printable(name[:200]) or None


def is_finish_line(line: str) -> bool:
    """Whether a request-log line is a finished request (the other lines of a log are not records)."""
    return _FINISH_TEXT in line or (_FINISH_JSON in line and '"event"' in line)


def parse_log_line(line: str) -> RequestRecord | None:
    """One finished-request line of a request log (JSON event or text); None for a health check."""
    if _FINISH_TEXT in line and not line.lstrip().startswith("{"):
        return _parse_finish_text(line)
    start = line.find("{")
    if start < 0:
        raise Unusable("not JSON (truncated or another format)")
    event = _loads(line[start:])
    if not isinstance(event, dict) or event.get("event") != "request.finished":
        raise Unusable("not a request.finished event")
    obj, out = event.get("obj"), event.get("out")
    if not isinstance(out, dict) or not isinstance(out.get("meta_info"), dict):
        raise Unusable("no out.meta_info (multimodal or another version's event)")
    rid = event.get("rid", out["meta_info"].get("id"))
    if is_health_check(rid):
        return None
    ts = None
    if isinstance(event.get("timestamp"), str):
        try:
            ts = datetime.fromisoformat(event["timestamp"][:40]).timestamp()
        except ValueError:
            ts = None
    return checked(rid, out["meta_info"], obj if isinstance(obj, dict) else None, ts if ts is not None else _dated(line))


def _text_value(text: str) -> Any:
    if text.startswith("'"):
        return text[1:-1]
    if text.startswith("["):
        return [int(n) for n in text[1:-1].split(",") if n.strip()]
    constants = {"None": None, "True": True, "False": False, "nan": math.nan, "inf": math.inf, "-inf": -math.inf}
    if text in constants:
        return constants[text]
    return float(text) if any(c in text for c in ".eE") else int(text)


_OBJ_FIELD = re.compile(r"[(,] (\w+)=('[^']{0,200}'|-?\d+(?:\.\d+)?|None|True|False)(?=[,)])")
_OBJ_IDS = re.compile(r"GenerateReqInput\((?:text=None, )?input_ids=(\[[\d, ]*\])(?=[,)])")
"""A prompt sent as token ids: `input_ids` is the field after `text` (None then), so before any string a client
wrote (a text could spell a fake one further on); cut at level 2 (`[…] ... […]`), it is not read."""


def _parse_finish_text(line: str) -> RequestRecord | None:
    start = line.rfind(_META_TEXT)
    if start < 0:
        raise Unusable("Finish line without meta_info (multimodal, or cut)")
    meta: dict[str, Any] = {}
    for match in _TEXT_FIELD.finditer(line, start + len(_META_TEXT)):
        meta.setdefault(match.group(1), _text_value(match.group(2)))
    obj_end = line.find(", out={")
    obj_text = line[line.find(_FINISH_TEXT) + len(_FINISH_TEXT): obj_end if obj_end > 0 else start]
    params = {m.group(1): _text_value(m.group(2)) for m in _OBJ_FIELD.finditer(obj_text)}
    if ids := _OBJ_IDS.match(obj_text):
        params["input_ids"] = _text_value(ids.group(1))
    rid = meta.get("id", params.get("rid"))  # meta_info's id is the rid; obj's text could fake a rid=
    if is_health_check(rid) or is_health_check(params.get("rid")):
        return None
    return checked(rid, meta, params, _dated(line))
