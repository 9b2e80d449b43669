"""Option values coerced without pydantic (scheduler/cli/coercion.py) give exactly what
Typer's own pydantic coercion gives: the same value, or the same error message."""

from __future__ import annotations

import enum
import math
from typing import Any

import pytest
import typer
import typer.main
from hypothesis import given, settings
from hypothesis import strategies as st
from typer._click import Context
from typer._click.exceptions import BadParameter

from scheduler.cli import coercion


class Fmt(enum.StrEnum):
    table = "table"
    json = "json"
    wide = "Wide"


def _command() -> Any:
    app = typer.Typer()

    @app.command()
    def run(
        text: str = typer.Option("x"),
        count: int = typer.Option(0),
        ratio: float = typer.Option(0.0),
        interval: float = typer.Option(2.0, min=0.1),
        limit: int = typer.Option(5, min=1, max=1000),
        clamped: int = typer.Option(5, min=1, max=10, clamp=True),
        flag: bool = typer.Option(False),
        fmt: Fmt = typer.Option(Fmt.table),
        loose: Fmt = typer.Option(Fmt.table, case_sensitive=False),
    ) -> None:
        pass

    return typer.main.get_command(app)


COMMAND = _command()
PARAMS = {p.name: p for p in COMMAND.params}


def _outcome(runtime: Any, name: str, value: Any) -> tuple[str, Any]:
    param = PARAMS[name]
    ctx = Context(COMMAND)
    try:
        result = runtime._coerce_value(value, param=param, ctx=ctx)
    except BadParameter as exc:
        return "error", exc.format_message()
    if isinstance(result, float) and math.isnan(result):
        return "nan", None
    return "value", (type(result), result)


def _same(name: str, value: Any) -> None:
    descriptor = PARAMS[name].type_descriptor
    plain = coercion.build_runtime_param(descriptor)
    assert isinstance(plain, coercion.PlainParam)  # every parameter here is eligible
    assert _outcome(plain, name, value) == _outcome(
        coercion._typer_builder(descriptor), name, value
    ), (name, value)


NUMBERISH = st.one_of(
    st.from_regex(r"\A[ +\-]?[0-9_]{0,20}([.,][0-9]{0,20})?([eE][+\-]?[0-9]{1,3})?\s?\Z"),
    st.sampled_from(["", " ", "nan", "inf", "-inf", "0x10", "١٢", "1\u00a0", "00", "0.10"]),
    st.integers(-(10**20), 10**20).map(str),
    st.floats(allow_nan=True).map(repr),
)
VALUES = st.one_of(
    st.text(),
    NUMBERISH,
    st.integers(),
    st.floats(allow_nan=True),
    st.booleans(),
    st.sampled_from([*Fmt, "table", "TABLE", "wide", "Wide", "json ", "yes", "0", "1"]),
)


@settings(max_examples=400, deadline=None)
@given(name=st.sampled_from(sorted(PARAMS)), value=VALUES)
def test_plain_coercion_matches_typers_on_generated_values(name, value):
    _same(name, value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("count", "12"),
        ("count", "+12"),
        ("count", " 12"),
        ("count", "1_000"),
        ("count", "1.0"),
        ("count", "1.5"),
        ("count", "٣"),
        ("count", "9" * 40),
        ("ratio", "1.5"),
        ("ratio", "1e3"),
        ("ratio", ".5"),
        ("interval", "0.05"),
        ("interval", "0.1"),
        ("limit", "0"),
        ("limit", "1001"),
        ("limit", 1000),
        ("clamped", "50"),
        ("clamped", "0"),
        ("text", "caf\udce9"),  # an undecodable argv byte
        ("text", ""),
        ("fmt", "TABLE"),
        ("fmt", "nope"),
        ("loose", "WIDE"),
        ("flag", "yes"),
        ("flag", True),
    ],
)
def test_plain_coercion_matches_typers_on_edge_values(name, value):
    _same(name, value)


def test_canonical_values_are_coerced_without_building_typers_adapter(monkeypatch):
    built: list[Any] = []
    monkeypatch.setattr(coercion, "_typer_builder", lambda d: built.append(d))
    for name, value, expected in [
        ("text", "job-1", "job-1"),
        ("count", "42", 42),
        ("ratio", "2.5", 2.5),
        ("interval", 2.0, 2.0),
        ("limit", "1000", 1000),
        ("flag", False, False),
        ("fmt", "json", Fmt.json),
        ("loose", "WIDE", Fmt.wide),
    ]:
        runtime = coercion.build_runtime_param(PARAMS[name].type_descriptor)
        assert runtime._coerce_value(value, PARAMS[name], Context(COMMAND)) == expected
    assert built == []


def test_the_cli_installs_it():
    import typer.core

    import scheduler.cli  # noqa: F401 - installs on import

    assert typer.core.build_runtime_param is coercion.build_runtime_param
