"""Benchmark prompts: the built-in chat set and user JSONL files."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from specmon.bench.prompts import (
    MAX_PROMPT_IDS,
    PromptError,
    ids_hash,
    load_prompts,
    parse_prompts,
    prompt_set_hash,
    render_messages,
)


def test_builtin_chat_set_is_about_forty_varied_prompts():
    prompts = load_prompts("builtin:chat")
    assert 38 <= len(prompts) <= 60
    assert len({p.id for p in prompts}) == len(prompts)
    categories = Counter(p.category for p in prompts)
    assert set(categories) == {"writing", "coding", "math", "reasoning", "extraction", "multi-turn"}
    assert min(categories.values()) >= 5
    multi = [p for p in prompts if p.category == "multi-turn"]
    assert all(p.text.startswith("User: ") and p.text.endswith("Assistant:") for p in multi)
    assert all(p.text.count("User: ") >= 2 for p in multi)
    assert prompt_set_hash(prompts) == prompt_set_hash(load_prompts())


def test_user_jsonl_with_strings_and_conversations(tmp_path):
    path = tmp_path / "mine.jsonl"
    lines = [
        {"prompt": "Summarise the French revolution."},
        "# a comment",
        {"id": "conv", "prompt": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                                  {"role": "user", "content": "Tell me a joke."}]},
        {"messages": [{"role": "user", "content": "Only messages"}]},
    ]
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n\n")
    prompts = load_prompts(str(path))
    assert [p.id for p in prompts] == ["p000", "conv", "p002"]
    assert prompts[0].text == "Summarise the French revolution."
    assert prompts[1].text == "User: Hi\n\nAssistant: Hello!\n\nUser: Tell me a joke.\n\nAssistant:"
    assert prompts[2].text == "User: Only messages\n\nAssistant:"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"prompt": "ok"}\nnot json\n', "mine.jsonl:2: not JSON"),
        ('{"text": "wrong key"}\n', 'mine.jsonl:1: needs "prompt"'),
        ('["a list"]\n', "mine.jsonl:1: not a JSON object"),
        ("\n# only a comment\n", "mine.jsonl: no prompts"),
    ],
)
def test_bad_prompt_files_say_where(tmp_path, text, message):
    path = tmp_path / "mine.jsonl"
    path.write_text(text)
    with pytest.raises(PromptError, match=message):
        load_prompts(str(path))


def test_unknown_builtin_and_missing_file(tmp_path):
    with pytest.raises(PromptError, match="unknown built-in prompt set 'builtin:nope'"):
        load_prompts("builtin:nope")
    with pytest.raises(PromptError, match="cannot read prompts"):
        load_prompts(str(tmp_path / "missing.jsonl"))


def test_render_keeps_an_open_assistant_turn_once():
    assert render_messages([{"role": "user", "content": " q "}]) == "User: q\n\nAssistant:"
    assert parse_prompts('{"prompt": "x"}')[0].text == "x"


def test_a_prompt_file_may_give_token_ids(tmp_path):
    path = tmp_path / "ids.jsonl"
    path.write_text(json.dumps({"id": "t", "input_ids": [1, 2, 2**31 - 1], "category": "tok"}) + "\n"
                    + json.dumps({"prompt": "1,2,2147483647"}) + "\n")
    ids, text = load_prompts(str(path))
    assert (ids.id, ids.text, ids.input_ids, ids.category, ids.sent) == ("t", "", (1, 2, 2**31 - 1), "tok",
                                                                         (1, 2, 2**31 - 1))
    assert ids.prompt_hash == ids_hash((1, 2, 2**31 - 1)) != text.prompt_hash
    assert prompt_set_hash([ids]) != prompt_set_hash([text])


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ([1, -2], r"ids.jsonl:1: input_ids holds something not a token id \(an int in 0..2147483647\)\Z"),
        ([2**31], "something not a token id"),
        ([1, "2"], "something not a token id"),
        ([1.5], "something not a token id"),
        ([True], "something not a token id"),
        ([[1, 2]], "something not a token id"),
        ([], r"input_ids is not a non-empty list\Z"),
        ("1 2 3", "input_ids is not a non-empty list"),
        ([0] * (MAX_PROMPT_IDS + 1), f"holds {MAX_PROMPT_IDS + 1:,} ids, over {MAX_PROMPT_IDS:,}"),
    ],
)
def test_token_ids_that_are_not_token_ids_are_refused_in_one_line(tmp_path, ids, message):
    path = tmp_path / "ids.jsonl"
    path.write_text(json.dumps({"input_ids": ids}) + "\n")
    with pytest.raises(PromptError, match=message) as refused:
        load_prompts(str(path))
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 300


def test_ten_million_token_ids_are_refused_and_a_prompt_with_ids_too(tmp_path):
    path = tmp_path / "ids.jsonl"
    path.write_text('{"input_ids": [' + "1," * (10**7 - 1) + "1]}\n")
    with pytest.raises(PromptError, match=f"ids.jsonl:1: input_ids holds 10,000,000 ids, over {MAX_PROMPT_IDS:,}"):
        load_prompts(str(path))
    path.write_text(json.dumps({"prompt": "x", "input_ids": [1]}) + "\n")
    with pytest.raises(PromptError, match="gives both a prompt and input_ids"):
        load_prompts(str(path))
