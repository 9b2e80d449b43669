"""The bounded parse: alias bombs, deep nesting and odd numbers are refused cleanly (a
DocumentError / SpecError, never RecursionError or OverflowError), quickly and without
memory growth."""

from __future__ import annotations

import json
import time
import tracemalloc

import pytest

from scheduler.spec import DocumentError, SpecError, load_document, load_job, parse_job_spec
from scheduler.spec.bounded import MAX_DEPTH


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.serial  # times CPU-bound parsing: alone, not beside other workers
def test_alias_bomb_is_refused_fast_with_bounded_memory():
    bomb = alias_bomb()
    assert len(bomb) < 600  # 9**9 = 387M leaves once expanded
    tracemalloc.start()
    start = time.perf_counter()
    with pytest.raises(DocumentError) as info:
        load_document(bomb)
    elapsed = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert "aliases" in info.value.errors[0]["msg"]
    assert elapsed < 0.5
    assert peak < 5 * 2**20


def test_many_aliases_are_refused_even_when_small():
    text = "a: &x 1\nb: [" + ", ".join(["*x"] * 500) + "]\n"
    with pytest.raises(DocumentError, match="aliases"):
        load_document(text)


def test_a_few_anchors_and_merge_keys_still_work():
    doc = load_document("base: &b {cpu: 1}\nw: {<<: *b, gpu: 1}\n")
    assert doc["w"] == {"cpu": 1, "gpu": 1}


@pytest.mark.parametrize(
    ("text", "as_json"),
    [
        ("[" * 5000 + "]" * 5000, True),
        ('{"a":' * 100_000 + "1" + "}" * 100_000, True),
        ("[" * 5000 + "]" * 5000, False),
        ("a:\n" + "".join("  " * i + "b:\n" for i in range(1, MAX_DEPTH + 5)), False),
    ],
)
def test_deep_nesting_is_a_document_error(text, as_json):
    with pytest.raises(DocumentError, match="nested deeper"):
        load_document(text, as_json=as_json)


def test_several_documents_are_refused_but_a_trailing_separator_is_not():
    with pytest.raises(DocumentError, match="several YAML documents"):
        load_document("a: 1\n---\nb: 2\n")
    with pytest.raises(DocumentError, match="several YAML documents"):  # one v2 job only
        load_document("protocolVersion: 2\n---\nb: 2\n")
    assert load_document("a: 1\n---\n") == {"a": 1}


def test_control_characters_and_bad_utf8_are_document_errors():
    with pytest.raises(DocumentError):
        load_document("a: \x01\n")
    with pytest.raises(DocumentError, match="UTF-8"):
        load_document(b"a: \xff\n")


JOB = {"name": "n", "roles": {"w": {"command": "true"}}}


def with_resources(**res) -> dict:
    return {"name": "n", "roles": {"w": {"command": "true", "resources": res}}}


@pytest.mark.parametrize("cpu", [1e308, float("nan"), float("inf"), "1e308", "9" * 40, 10**30, -1])
def test_absurd_cpu_is_a_spec_error(cpu):
    with pytest.raises(SpecError) as info:
        parse_job_spec(with_resources(cpu=cpu))
    assert info.value.errors[0]["loc"] == "roles.w.resources.cpu"


def test_json_infinity_and_huge_memory_are_spec_errors():
    text = json.dumps(with_resources(memory=1e308))
    with pytest.raises(SpecError) as info:
        load_job(text, as_json=True)
    assert info.value.errors[0]["loc"] == "roles.w.resources.memory"
    with pytest.raises(SpecError):
        load_job(
            '{"name": "n", "roles": {"w": {"command": "t", "resources": {"cpu": Infinity}}}}',
            as_json=True,
        )


@pytest.mark.serial  # times CPU-bound parsing: alone, not beside other workers
@pytest.mark.parametrize("as_json", [True, False])
def test_a_flat_document_of_too_many_nodes_is_refused(as_json):
    text = "[" + ",".join(["1"] * 50_000) + "]"
    start = time.perf_counter()
    with pytest.raises(DocumentError, match="more than 20000 nodes"):
        load_document(text, as_json=as_json)
    assert time.perf_counter() - start < 5.0  # stops at the cap (~0.5 s), not after all of it


def test_a_lone_surrogate_is_a_document_error():
    with pytest.raises(DocumentError, match="UTF-8"):
        load_document("a: \ud800")


def test_json_comments_are_read_as_openpai_s_submit_page_reads_them():
    text = '{\n  // a line comment\n  "name": "c", /* block */ "roles": {"w": {"command": "t"}}\n}'
    assert load_document(text, as_json=True) == {"name": "c", "roles": {"w": {"command": "t"}}}
    with pytest.raises(DocumentError) as info:
        load_document('{\n  // comment\n  "a": 1\n  "b": 2\n}', as_json=True)
    msg = info.value.errors[0]["msg"]
    assert msg.startswith("malformed JSON at line 4 column 3: Expected ',' or '}'"), msg
    # JSON5's bounds hold on that path too
    with pytest.raises(DocumentError, match="nested deeper"):
        load_document("// c\n" + "[" * 5000 + "]" * 5000, as_json=True)
    with pytest.raises(DocumentError, match="more than 20000 nodes"):
        load_document("// c\n[" + ",".join(["1"] * 50_000) + "]", as_json=True)
