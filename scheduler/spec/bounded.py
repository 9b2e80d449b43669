"""Parse job text (YAML or JSON) with hard bounds, before anything looks at its fields.

Limits (a job file is a few KiB; these are far above any real one):

=====================  =========  ==================================================
MAX_SPEC_BYTES         1 MiB      text size, checked before parsing
MAX_DEPTH              32         nesting of mappings/sequences
MAX_ALIASES            128        ``*alias`` references in a YAML document
MAX_NODES              20,000     nodes, and nodes after alias expansion (what a consumer walks)
=====================  =========  ==================================================

An alias bomb (``a: &a [x, x, ...]``, ``b: &b [*a, *a, ...]``...) is refused while composing:
every node's expanded size is computed from its children's (an alias counts the full size
of its anchor), so a document that would expand to more than MAX_NODES nodes is refused
without expanding it (a few hundred bytes are refused in milliseconds, with no memory
growth); a running count of composed nodes stops a flat document early too. The loader is
PyYAML's Python ``Composer`` (whose ``compose_node`` counts depth, aliases and sizes) over
libyaml's C event parser when PyYAML has it (twice as fast), else over the pure-Python
parser; construction is ``SafeConstructor`` either way. (``CSafeLoader`` composes in C,
where no override is called, so it cannot be bounded.)

JSON (``as_json``) is read strictly (RFC 8259) first; a text that is not strict JSON is read
again as JSON5 by ``pyjson5`` (Cython; nesting bounded at 32 levels), so ``//`` and
``/* */`` comments are accepted as OpenPAI's own v1 submit page accepts them (microsoft/pai
src/webportal/src/app/job/job-submit/job-submit.component.js strips comments with
strip-json-comments before ``JSON.parse``). JSON5's other relaxations (trailing commas,
single quotes) come with it; a text neither reads is refused with the line and column
where JSON5 stopped.

Errors: :class:`~scheduler.spec.errors.DocumentError` naming the limit and the line.
"""

from __future__ import annotations

import json
import re

import pyjson5
import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from scheduler.spec.errors import DocumentError

MAX_SPEC_BYTES = 1024 * 1024
MAX_DEPTH = 32
MAX_ALIASES = 128
MAX_NODES = 20_000


def _where(node_or_event: object) -> str:
    mark = getattr(node_or_event, "start_mark", None)
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""


try:
    from yaml._yaml import CParser as _Parser  # libyaml's event parser (as yaml.cyaml's)

    _C_PARSER = True
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml.parser import Parser as _Parser  # type: ignore[assignment]
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    _C_PARSER = False


class BoundedLoader(Composer, _Parser, SafeConstructor, Resolver):
    """A safe loader that refuses deep nesting, many aliases and large expansions."""

    def __init__(self, stream: str) -> None:
        if _C_PARSER:
            _Parser.__init__(self, stream)
        else:  # pragma: no cover
            # typed against CParser, the pure-Python parser's mixins are not its bases
            Reader.__init__(self, stream)  # type: ignore[arg-type]
            Scanner.__init__(self)  # type: ignore[arg-type]
            _Parser.__init__(self)  # type: ignore[call-arg]
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self._depth = 0
        self._aliases = 0
        self._nodes = 0
        self._sizes: dict[int, int] = {}

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise DocumentError.one(
                    "", f"more than {MAX_ALIASES} YAML aliases{_where(event)}; refused"
                )
            return super().compose_node(parent, index)
        self._depth += 1
        self._nodes += 1
        if self._nodes > MAX_NODES:
            event = self.peek_event()
            raise DocumentError.one("", f"more than {MAX_NODES} nodes{_where(event)}; refused")
        if self._depth > MAX_DEPTH:
            event = self.peek_event()
            raise DocumentError.one(
                "", f"nested deeper than {MAX_DEPTH} levels{_where(event)}; refused"
            )
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = []
        size = 1 + sum(self._sizes.get(id(c), 1) for c in children)
        if size > MAX_NODES:
            raise DocumentError.one(
                "",
                f"expands to more than {MAX_NODES} nodes (YAML aliases){_where(node)}; refused",
            )
        self._sizes[id(node)] = size
        return node


def _check_size(text: str | bytes) -> None:
    if len(text) > MAX_SPEC_BYTES:
        raise DocumentError.one("", f"spec is {len(text)} bytes; at most {MAX_SPEC_BYTES} allowed")


def _json_problem(doc: object) -> str | None:
    """Why a parsed JSON value is over the depth or node limit (None: within them)."""
    stack = [(doc, 1)]
    nodes = 0
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            return f"more than {MAX_NODES} nodes; refused"
        if depth > MAX_DEPTH:
            return f"nested deeper than {MAX_DEPTH} levels; refused"
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
    return None


_JSON5_TOKENS = {"comma": "','", "colon": "':'", "JSON5Value": "a value"}


def _load_json(text: str) -> object:
    """Strict JSON, else JSON with comments (JSON5, see the module docstring). Raises
    DocumentError with the line and column of the problem."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        strict = f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
    except RecursionError:
        raise DocumentError.one("", f"nested deeper than {MAX_DEPTH} levels; refused") from None
    try:
        return pyjson5.loads(text)
    except pyjson5.Json5NestingTooDeep:
        raise DocumentError.one("", f"nested deeper than {MAX_DEPTH} levels; refused") from None
    except pyjson5.Json5Exception as exc:
        msg = str(exc.args[0]) if exc.args else ""
        near = re.search(r"near (\d+)", msg)
        if near is None:
            raise DocumentError.one("", strict) from None
        # pyjson5 reports the offset after the offending character ("found X"), else at it
        at = max(0, int(near.group(1)) - (1 if ", found" in msg else 0))
        line = text.count("\n", 0, at) + 1
        column = at - (text.rfind("\n", 0, at) + 1) + 1
        why = re.sub(r"U\+([0-9A-Fa-f]{4})", lambda m: repr(chr(int(m.group(1), 16))), msg)
        why = re.sub(r"b'(\w+)'", lambda m: _JSON5_TOKENS.get(m.group(1), m.group(1)), why)
        why = why.replace(f" near {near.group(1)}", "")
        raise DocumentError.one(
            "",
            f"malformed JSON at line {line} column {column}: {why} (read as JSON with comments)",
        ) from None


MAX_DOCUMENTS = 64
"""YAML documents in one file: several only as Kubernetes objects (``---``-separated
manifests, read as a ``kind: List``) or OpenPAI v2 jobs (read as ``{OPENPAI_JOBS: [...]}``);
anything else must be one document."""

OPENPAI_JOBS = "openpai_v2_jobs"
"""The key several ``---``-separated OpenPAI v2 jobs of one file are read under."""


def load_document(text: str | bytes, *, as_json: bool = False) -> object:
    """Parse one YAML (or, with ``as_json``, strict JSON) document within the limits above.

    Args:
        text: the document; bytes must be UTF-8.
        as_json: parse as JSON (RFC 8259, or JSON5 for comments) instead of YAML (which
            also reads most JSON).

    Returns:
        The parsed value (usually a dict; the caller checks the shape).

    Raises:
        DocumentError: not UTF-8, too large, malformed (with the line), several non-empty
            YAML documents, too deep, too many aliases or too large once aliases are expanded.
    """
    _check_size(text)
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DocumentError.one("", f"expected UTF-8 text, got bytes ({exc})") from None
    if not text.strip():
        raise DocumentError.one("", "expected a YAML or JSON document, got an empty text")
    if as_json:
        doc = _load_json(text)
        problem = _json_problem(doc)
        if problem:
            raise DocumentError.one("", problem)
        return doc
    loader = None
    try:
        loader = BoundedLoader(text)  # the reader refuses control characters here
        docs = []
        # empty documents ('---' at the end) are skipped; check_data is untyped in types-PyYAML
        while loader.check_data():  # type: ignore[no-untyped-call]
            doc = loader.get_data()
            if doc is not None:
                docs.append(doc)
            if len(docs) > MAX_DOCUMENTS:
                raise DocumentError.one("", f"more than {MAX_DOCUMENTS} YAML documents")
        if len(docs) > 1:
            if all(isinstance(d, dict) and "apiVersion" in d and "kind" in d for d in docs):
                # Kubernetes manifests (kubectl apply -f takes several): read as the
                # List kind kubectl also takes, whose items the Volcano translation reads
                return {"apiVersion": "v1", "kind": "List", "items": docs}
            if all(isinstance(d, dict) and str(d.get("protocolVersion")) == "2" for d in docs):
                # several OpenPAI v2 jobs (as a MARO schedule or Volcano manifests)
                return {OPENPAI_JOBS: docs}
            raise DocumentError.one(
                "", "several YAML documents in one file; submit one job per file"
            )
        return docs[0] if docs else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise DocumentError.one("", f"malformed YAML{where}: {problem}") from None
    except UnicodeError as exc:  # e.g. a lone surrogate in a str given by a caller
        raise DocumentError.one(
            "", f"expected UTF-8 text ({getattr(exc, 'reason', exc)})"
        ) from None
    except RecursionError:  # pragma: no cover - MAX_DEPTH is far below the interpreter's
        raise DocumentError.one("", f"nested deeper than {MAX_DEPTH} levels; refused") from None
    finally:
        if loader is not None:
            loader.dispose()
