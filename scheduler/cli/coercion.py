"""Option and argument values coerced without pydantic when that gives the same value.

Typer 0.29 (the locked version) coerces every parameter of the command it runs through
a pydantic ``TypeAdapter`` built on first use: importing pydantic and building the
adapters is ~0.1 s of CPU of every command that parses options, a <TAB> included, most
of which only ever see plain words and numbers.

:func:`install` puts :class:`PlainParam` in front of Typer's builder
(``typer.core.build_runtime_param``) for the annotations whose coercion the standard
library does exactly: ``str``, ``bool``, ``int`` and ``float`` (within their ``min`` and
``max``) and Enum choices. A value in its canonical form is coerced here (``"12"`` for an
``int``, a word of the Enum's choices, a flag's True); any other value (a sign, spaces,
``1_000``, ``1e3``, a number out of its bounds, a word that is no choice, ...) goes to
Typer's own pydantic adapter, built only then, so what it accepts and every error message
stay Typer's. A value that is None needs no coercion (Typer answers it before). Other
annotations (paths, files, dates, lists, custom parsers) keep Typer's coercion unchanged.
tests/scheduler/cli/test_cli_coercion.py compares both on generated values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from typer import _coercion

if TYPE_CHECKING:
    from typer._click import Context
    from typer.core import _TyperParameter
    from typer.models import ParameterInfo

_INT = re.compile(r"[0-9]{1,18}")  # ASCII digits only: int() also reads other scripts'
_FLOAT = re.compile(r"[0-9]{1,15}(\.[0-9]{1,15})?")

# Typer's builder, kept for every value the fast path does not take
_typer_builder = _coercion.build_runtime_param


@dataclass(frozen=True)
class PlainParam(_coercion.RuntimeParam):
    """Typer's coercion contract (``RuntimeParam``) for ``str``, ``bool``, ``int``,
    ``float`` and Enum parameters: canonical values here, any other through Typer's
    pydantic adapter (``fallback``, built on first need).

    Attributes:
        descriptor: Typer's resolved type of the parameter.
    """

    descriptor: _coercion.TypeDescriptor = field(compare=False)
    _fallback: list[_coercion.RuntimeParam] = field(default_factory=list, compare=False)

    def fallback(self) -> _coercion.RuntimeParam:
        """Typer's own coercion of this parameter (imports pydantic the first time)."""
        if not self._fallback:
            self._fallback.append(_typer_builder(self.descriptor))
        return self._fallback[0]

    def _coerce_value(self, value: Any, param: _TyperParameter, ctx: Context) -> Any:
        coerced = _plain(self.annotation, self.parameter_info, value, ctx)
        if coerced is _NOT_PLAIN:
            return self.fallback()._coerce_value(value, param=param, ctx=ctx)
        return coerced


_NOT_PLAIN = object()


def _plain(annotation: Any, info: ParameterInfo, value: Any, ctx: Context) -> Any:
    """``value`` coerced to ``annotation`` when it is in a form whose result is certain,
    else :data:`_NOT_PLAIN`."""
    if annotation is str:
        return value if type(value) is str and _utf8(value) else _NOT_PLAIN
    if annotation is bool:  # a flag's True/False; a word ("yes", "0") goes to pydantic
        return value if type(value) is bool else _NOT_PLAIN
    if annotation in (int, float):
        number = _number(annotation, value)
        if number is _NOT_PLAIN:
            return number
        # inside its bounds (clamped or not, Typer would keep it); outside: Typer's error
        # or its clamping
        if (info.min is not None and not number >= info.min) or (
            info.max is not None and not number <= info.max
        ):
            return _NOT_PLAIN
        return number
    # an Enum (see _eligible): Typer's own choice matching, which needs no pydantic
    from typer._param_types import coerce_cli_choice

    try:
        return coerce_cli_choice(
            value, choices=tuple(annotation), case_sensitive=info.case_sensitive, ctx=ctx
        )
    except ValueError:  # no choice: Typer's adapter words the error
        return _NOT_PLAIN


def _number(annotation: type, value: Any) -> Any:
    """An int or float ``value`` as is, digits (and for a float one decimal point) as
    the number, else :data:`_NOT_PLAIN`."""
    if type(value) is annotation:
        return value
    if type(value) is str and (_INT if annotation is int else _FLOAT).fullmatch(value):
        return annotation(value)
    return _NOT_PLAIN


def _utf8(text: str) -> bool:
    """Whether ``text`` is valid Unicode (pydantic refuses the lone surrogates that
    undecodable bytes of argv become)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _eligible(descriptor: _coercion.TypeDescriptor) -> bool:
    """Whether :class:`PlainParam` coerces this parameter's values (see the module)."""
    info = descriptor.parameter_info
    if descriptor.file_annotation is not None or info.parser is not None:
        return False
    annotation = descriptor.annotation
    if annotation in (int, float, str, bool):
        return True
    return isinstance(annotation, type) and issubclass(annotation, Enum)


def build_runtime_param(descriptor: _coercion.TypeDescriptor) -> _coercion.RuntimeParam:
    """Typer's ``build_runtime_param`` with :class:`PlainParam` for the eligible
    parameters (``str``, ``bool``, ``int``, ``float``, Enum); Typer's for the others."""
    if _eligible(descriptor):
        return PlainParam(
            parameter_info=descriptor.parameter_info,
            annotation=descriptor.annotation,
            descriptor=descriptor,
        )
    return _typer_builder(descriptor)


def install() -> None:
    """Make Typer's parameters use :func:`build_runtime_param` (idempotent)."""
    import typer.core

    typer.core.build_runtime_param = build_runtime_param  # type: ignore[attr-defined]
