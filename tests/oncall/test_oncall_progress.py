"""The app's on-call core: a switch's steps and outcome as Server-pane notes, last results, the successor."""

from __future__ import annotations

from types import SimpleNamespace

from specmon.bench.model import AcceptFigures, DecodeFigures, ServerFacts, Speculative, Summary
from specmon.oncall.progress import (
    SwitchProgress,
    ago,
    history_for,
    last_results,
    result_line,
    successor,
    sweep_candidates,
    sweep_choices,
)
from specmon.oncall.switch import SwitchReport


def run(preset, started_at, status="finished", url="http://h:1", decode=100.0, accept=3.0, model="m", spec=True):
    summary = Summary(decode_tok_s=DecodeFigures(median=decode), accept_length=AcceptFigures(token_weighted=accept))
    server = ServerFacts(model_path=model, speculative=Speculative(algorithm="EAGLE3" if spec else None))
    return SimpleNamespace(preset=preset, started_at=started_at, status=status, url=url, summary=summary,
                           server=server, measured=[1])


def test_steps_replace_their_running_entry_and_show_times() -> None:
    progress = SwitchProgress("fast-b")
    assert progress.notes()[0][0] == "switch → fast-b: starting…"
    progress.step("stopping", "running", None)
    progress.step("stopping", "done", 1.23)
    progress.step("gpus free", "done", 0.5)
    progress.step("preflight", "running", None)
    text, style = progress.notes()[0]
    assert text == "switch → fast-b: stopping 1.2s ✓ · gpus free 0.5s ✓ · preflight …"
    assert style == "bold cyan"
    progress.step("preflight", "failed", 0.1)
    assert progress.notes()[0][1] == "bold red"


def test_outcome_shows_before_after_with_change_and_alerts() -> None:
    report = SwitchReport(from_="a", to="b", state="ready")
    report.sanity = {"decode_tok_s": 90.0, "accept_length": 2.0}
    report.before = {"preset": "a", "run_id": "r1", "decode_tok_s": 100.0, "accept_length": 3.0}
    report.change_pct = {"decode_tok_s": -10.0, "accept_length": -33.3}
    report.alerts = ["acceptance length fell 33.3% against what served before (a's run r1; noise 10%)"]
    progress = SwitchProgress("b")
    progress.finish(report)
    notes = [text for text, _ in progress.notes()[1:]]
    assert notes[0] == ("before → after: decode tok/s 100.0 → 90.0 (-10.0%) · "
                        "acceptance 3.00 → 2.00 (-33.3%) · a run r1 → b")  # fmt: skip
    assert progress.notes()[1][1] == "bold red", "an alert colours the comparison"
    assert notes[1] == "alert: acceptance length fell 33.3% against what served before (a's run r1; noise 10%)"
    first = SwitchReport(from_="a", to="b", state="ready", sanity={"decode_tok_s": 90.0, "accept_length": None})
    progress = SwitchProgress("b")
    progress.finish(first)
    assert progress.notes()[1][0] == ("before → after: decode tok/s – → 90.0 · "
                                      "acceptance – → – · nothing served before → b")  # fmt: skip
    live = SwitchReport(from_="a", to="b", state="ready", sanity={"decode_tok_s": 90.0, "accept_length": 2.5},
                        before={"preset": "a", "accept_length": 2.7, "live": {"accept_length": 2.7}})
    progress.finish(live)
    assert progress.notes()[1][0].endswith(" · a: live figures → b")
    failed = SwitchReport(from_="a", to="b", state="failed", error="the preflight failed: no GPU")
    progress.finish(failed)
    assert progress.notes()[1] == ("switch failed: the preflight failed: no GPU", "bold red")


def test_last_results_history_and_lines() -> None:
    results = [run("a", 10), run("a", 30, status="cancelled"), run("a", 20, decode=120.5), run("b", 5, url="x")]
    last = last_results(results)
    assert last["a"].started_at == 20 and last["b"].started_at == 5
    assert result_line(last["a"], now=20 + 7200) == "120.5 tok/s · accept 3.00 · 2 h ago"
    assert ago(100, now=130) == "just now" and ago(0, now=3 * 86400) == "3 d ago"
    assert history_for(results, "b", "http://h:1") == results
    assert history_for(results, None, "x") == [results[3]]


def test_re_attaching_brings_the_baseline_the_speedups_need() -> None:
    """A baseline measured on another URL (or under another preset name) still gives the speedup its base."""
    base_old = run("baseline", 1, url="http://other:2", spec=False)
    base = run("baseline", 2, url="http://other:2", spec=False)
    other_model = run("plain-x", 3, url="http://other:2", spec=False, model="other")
    mine = run("eagle3-5", 4)
    results = [base_old, base, other_model, mine]
    assert history_for(results, "eagle3-5", "http://h:1") == [base, mine]
    assert history_for([mine, other_model], "eagle3-5", "http://h:1") == [mine]
    with_own = [base, run("plain", 5, spec=False), mine]
    assert history_for(with_own, None, "http://h:1") == with_own[1:], "its own baseline is enough"


def test_successor_is_another_process_on_the_same_port() -> None:
    def found(pid: int, port: int = 30000, alive: bool = True, ours: bool = True) -> SimpleNamespace:
        return SimpleNamespace(pid=pid, port=port, create_time=float(pid), alive=alive, launched_by_specmon=ours)

    followed, same, other_port, dead, new = found(1), found(1), found(2, 30002), found(3, alive=False), found(4)
    assert successor([same, other_port, dead], followed) is None
    assert successor([same, other_port, dead, new], followed) is new
    # nobody named a server specmon did not launch: it never takes over from one specmon launched ...
    assert successor([same, found(5, ours=False)], followed) is None
    # ... but a server the user named by pid is followed across its own restarts
    named = found(6, ours=False)
    assert successor([found(7, ours=False)], named).pid == 7


def test_sweep_choices_offer_a_valid_plan_first() -> None:
    from specmon.launch.presets import load_presets

    presets = load_presets(user_dir=None)
    current = presets.get("demo-eagle3-10")
    candidates = sweep_candidates(presets.presets, current)
    names = {p.name for p in candidates}
    assert {"demo-baseline", "demo-eagle3-5", "demo-eagle3-10", "demo-eagle3-16"} <= names
    assert not any(name == "eagle3-10" for name in names), "real SGLang presets run another launcher"
    last = {"demo-eagle3-5": run("demo-eagle3-5", 0)}
    choices = {name: (about, on) for name, about, on in sweep_choices(candidates, last)}
    assert choices["demo-baseline"] == ("no result yet · baseline (no speculation)", True)
    assert choices["demo-eagle3-5"][0].startswith("100.0 tok/s · accept 3.00 · ")  # the numbers first
    assert choices["demo-eagle3-5"][0].endswith(" · EAGLE3 · draft tokens 5")
    assert all(on for _, on in choices.values())


def test_the_apps_stored_results_say_what_the_reader_skipped(tmp_path) -> None:
    from specmon.bench.results import ResultStore
    from specmon.oncall.progress import skipped_summary
    from tests.support.chains import PROMPT_TOKENS, trained_like_agreements, write_chain_run

    prompts = list(PROMPT_TOKENS)
    prompts[0] = 9000  # beyond the context length: a record that cannot be true
    run = write_chain_run(tmp_path, trained_like_agreements()[:6], 5, context_length=2048, prompt_tokens=prompts)
    loaded = ResultStore(tmp_path).load(run.run_id)
    text = skipped_summary([loaded], unreadable=1)
    assert text.startswith(f"1 stored run unreadable; run {run.run_id}: 1 stored record skipped (")
    assert "prompt_tokens is N, not a count of at most N (the context length)" in text
    assert skipped_summary([], 0) is None


def test_with_two_baselines_one_is_pre_selected_and_the_plan_runs_every_preset_selected() -> None:
    """Issue item 10 said the sweep dialog pre-selects every baseline and then drops one without a word: with two
    presets without speculation only the first is selected at first, and the plan made from what is selected
    runs each of them (the baseline first and last), none left out."""
    import dataclasses

    from specmon.launch.presets import load_presets
    from specmon.sweep.plan import plan_sweep

    presets = dict(load_presets(user_dir=None).presets)
    presets["my-baseline"] = dataclasses.replace(presets["demo-baseline"], name="my-baseline")
    candidates = sweep_candidates(presets, presets["demo-eagle3-10"])
    choices = sweep_choices(candidates, {})
    selected = [name for name, _, on in choices if on]
    assert [name for name, about, on in choices if "baseline" in about] == ["demo-baseline", "my-baseline"]
    assert "my-baseline" not in selected and "demo-baseline" in selected
    plan = plan_sweep([presets[name] for name in selected])
    assert {step.preset for step in plan.steps} == set(selected)
