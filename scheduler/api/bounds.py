"""Bounds on a parsed request document before anything walks it recursively.

YAML aliases make a parsed document a graph whose expanded size can be exponential in its
text (a 368-byte "billion laughs" body expands to millions of nodes): validating,
printing or JSON-encoding it then costs seconds of CPU in C code that holds the GIL (so
even a worker thread stalls the event loop) and gigabytes of memory. The parser's own
limits belong to ``scheduler.spec``; this module is the API's guard on what reaches
validation, whatever the parser let through: at most ``max_nodes`` values counted with
every alias expanded, at most ``max_depth`` levels deep, and no non-finite number (JSON's
``Infinity``/``NaN`` extensions, YAML's ``.inf``/``.nan``: a stored infinity could never
be sent back as JSON). The walk is iterative and stops at the first bound passed, so its
own cost is bounded by ``max_nodes`` steps.
"""

from __future__ import annotations

import math

from scheduler.services.errors import InvalidSpecError

MAX_NODES = 100_000
MAX_DEPTH = 64


def check_document(
    document: object, max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH
) -> None:
    """Raise when ``document`` (parsed YAML/JSON: dicts, lists, scalars) is too big.

    Args:
        max_nodes: values allowed, counting each alias expansion again (every dict key,
            dict value and list item is one).
        max_depth: nesting levels allowed (the top-level mapping is level 1).

    Raises:
        InvalidSpecError (422): the limit passed, named with both numbers, or a non-finite
            number, with its field path.
    """
    stack: list[tuple[object, int, tuple[str, ...]]] = [(document, 1, ())]
    seen = 0
    while stack:
        value, depth, loc = stack.pop()
        seen += 1
        if isinstance(value, float) and not math.isfinite(value):
            msg = f"expected a finite number, got {value}"
            where = ".".join(loc) or "(top)"
            raise InvalidSpecError(
                f"invalid job spec: {where}: {msg}",
                [{"loc": list(loc), "msg": msg, "type": "finite_number", "input": str(value)}],
            )
        if seen > max_nodes:
            msg = (
                f"expected at most {max_nodes} values (YAML aliases expanded), "
                f"got more: the document is too large"
            )
            raise InvalidSpecError(
                f"job spec: {msg}", [{"loc": [], "msg": msg, "type": "too_large"}]
            )
        if depth > max_depth:
            msg = f"expected at most {max_depth} levels of nesting, got more"
            raise InvalidSpecError(
                f"job spec: {msg}", [{"loc": [], "msg": msg, "type": "too_deep"}]
            )
        if isinstance(value, dict):
            for k, v in value.items():
                stack.append((k, depth + 1, loc))
                stack.append((v, depth + 1, (*loc, str(k)[:64])))
        elif isinstance(value, list | tuple | set):
            stack.extend((v, depth + 1, (*loc, str(i))) for i, v in enumerate(value))
