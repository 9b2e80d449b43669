"""Before and around submit: ``pasture job validate FILE`` (offline) and
``pasture job resubmit NAME``, and the ``--name/--vc/--env/--set`` overrides both and
``job submit`` take.

Files are parsed with :func:`scheduler.spec.load_job` as the API parses what ``job
submit`` sends (:func:`read_job`: every format; imported only when needed, it loads
pydantic models). A spec with overrides is
sent to the API as the pasture-format JSON of the parsed spec.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from scheduler.cli.client import ApiClient, ApiError
from scheduler.cli.complete import complete_jobs
from scheduler.cli.config import load
from scheduler.cli.jobgroup import app, job_hint
from scheduler.cli.jobsecrets import SecretOpt, SecretsFileOpt, attach, read_secrets
from scheduler.cli.output import (
    REJECTED,
    JsonOpt,
    OutputFormat,
    OutputOpt,
    console,
    emit,
    err_console,
    fmt_resources,
    handle_errors,
    output_format,
)
from scheduler.cli.text import Table, esc, markup_state
from scheduler.services.records import spec_gpus

if TYPE_CHECKING:
    from scheduler.api.schemas import JobSubmitOut
    from scheduler.spec import ParsedJob

NameOpt = typer.Option(None, "--name", help="job name instead of the spec's")
VcOpt = typer.Option(None, "--vc", help="virtual cluster instead of the spec's")
EnvOpt = typer.Option(
    None, "--env", "-e", help="KEY=VALUE set in every task's environment (repeatable)"
)


def parse_env(pairs: list[str] | None) -> dict[str, str]:
    """``["KEY=VALUE", ...]`` -> dict.

    Raises:
        typer.BadParameter: an item without ``=`` or with an empty key.
    """
    env: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--env")
        env[key] = value
    return env


SetOpt = typer.Option(
    None,
    "--set",
    help="PATH=VALUE in the pasture-format spec, e.g. roles.worker.replicas=4 (repeatable;"
    " VALUE is YAML: 4, true, '[a, b]')",
)


def set_path(spec: dict[str, Any], assignment: str) -> None:
    """Apply ``"a.b.c=VALUE"`` to ``spec`` in place (VALUE parsed as YAML; missing
    mappings on the way are created; a number indexes a list).

    Raises:
        typer.BadParameter: no ``=``, an empty path, or a step into a scalar / past a
            list's end (the message names the step).
    """
    import yaml

    path, sep, text = assignment.partition("=")
    if not sep or not path.strip("."):
        raise typer.BadParameter(f"expected PATH=VALUE, got {assignment!r}", param_hint="--set")
    try:
        value = yaml.safe_load(text) if text else ""
    except yaml.YAMLError as exc:
        raise typer.BadParameter(f"{path}: VALUE is not YAML: {exc}", param_hint="--set") from None
    keys = path.split(".")
    node: Any = spec
    for i, key in enumerate(keys):
        where = ".".join(keys[: i + 1])
        last = i == len(keys) - 1
        if isinstance(node, list):
            if not key.isdigit() or int(key) >= len(node):
                raise typer.BadParameter(
                    f"{where}: no item {key} in a list of {len(node)}", param_hint="--set"
                )
            if last:
                node[int(key)] = value
            node = node[int(key)]
        elif isinstance(node, dict):
            if last:
                node[key] = value
            elif node.get(key) is None:
                node[key] = {}
            node = node[key]
        else:
            raise typer.BadParameter(
                f"{where}: cannot set inside a {type(node).__name__}", param_hint="--set"
            )


def apply_overrides(
    spec: dict[str, Any],
    name: str | None,
    vc: str | None,
    env: dict[str, str],
    sets: list[str] | None = None,
) -> dict[str, Any]:
    """A copy of the pasture-format ``spec`` dict with the name, VC and job-level
    environment (merged over the spec's ``env``) replaced where given, then each
    ``--set PATH=VALUE`` applied in order."""
    out: dict[str, Any] = json.loads(json.dumps(spec))  # a deep copy
    if name:
        out["name"] = name
    if vc:
        out["vc"] = vc
    if env:
        out["env"] = {**(spec.get("env") or {}), **env}
    for assignment in sets or []:
        set_path(out, assignment)
    return out


def spec_problems(exc: Exception) -> list[dict[str, Any]]:
    """The ``{"loc", "msg", "input"}`` problems of a spec error (one entry otherwise)."""
    errors = getattr(exc, "errors", None)
    if isinstance(errors, list) and errors:
        return [e for e in errors if isinstance(e, dict)]
    return [{"loc": "", "msg": str(exc), "input": None}]


def print_problems(source: str, problems: list[dict[str, Any]]) -> None:
    """The field / problem / given table of an invalid spec, on stderr."""
    err_console.print(f"[red]invalid job spec[/red] {esc(source)}:")
    table = Table("field", "problem", "given", box=None)
    for e in problems:
        given = "" if e.get("input") is None else json.dumps(e["input"], default=str)
        table.add_row(str(e.get("loc") or "(document)"), str(e.get("msg", "")), given[:60])
    err_console.print(table)


def read_job(path: Path) -> ParsedJob:
    """``path`` parsed exactly as ``job submit`` sends it and the API reads it: a ``.json``
    file as JSON (with comments and trailing commas read as JSON5, as OpenPAI's v1 submit
    page does), anything else as YAML; every format; the same checks and messages.
    Secret values may be missing (``--secret`` gives them at submit).

    Raises:
        scheduler.spec.SpecError (DocumentError for malformed or oversized text).
    """
    from scheduler.spec import load_job

    return load_job(
        path.read_bytes(), as_json=path.suffix.lower() == ".json", require_secret_values=False
    )


def load_spec(path: Path) -> dict[str, Any]:
    """The pasture-format dict of the spec in ``path`` (any accepted format); secrets
    are names only (see :func:`load_spec_and_secrets`).

    Raises:
        typer.Exit(REJECTED): the spec is invalid (its problems are printed).
    """
    return load_spec_and_secrets(path)[0]


def load_spec_and_secrets(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """(the pasture-format dict of the one job in ``path``, the secret values the file
    itself gives). A secret declared without a value is not an error here: ``--secret``
    may give it.

    Raises:
        typer.Exit(REJECTED): the spec is invalid (its problems are printed).
    """
    from scheduler.spec import SpecError

    try:
        parsed = read_job(path)
        if len(parsed.specs) != 1:
            raise SpecError.one("job_names", f"a MARO schedule of {len(parsed.specs)} jobs")
    except ValueError as exc:  # scheduler.spec.SpecError
        print_problems(str(path), spec_problems(exc))
        raise typer.Exit(REJECTED) from None
    return parsed.spec.model_dump(mode="json"), parsed.secrets


def spec_body(
    path: Path,
    name: str | None = None,
    vc: str | None = None,
    env: list[str] | None = None,
    sets: list[str] | None = None,
) -> tuple[bytes, bool]:
    """What to send for ``path``: ``(body, is_json)``. The file as it is when no override
    is given; else the pasture-format JSON of the parsed spec with the overrides applied."""
    pairs = parse_env(env)
    if not (name or vc or pairs or sets):
        return path.read_bytes(), path.suffix.lower() == ".json"
    spec = apply_overrides(load_spec(path), name, vc, pairs, sets)
    return json.dumps(spec).encode(), True


def submit_with_overrides(
    client: ApiClient,
    path: Path,
    name: str | None,
    vc: str | None,
    env: list[str] | None,
    sets: list[str] | None = None,
    secrets: dict[str, str] | None = None,
) -> JobSubmitOut | None:
    """Submit ``path`` with the overrides and the ``--secret`` values applied; None when
    there are none (the caller sends the file as it is)."""
    pairs = parse_env(env)
    if not (name or vc or pairs or sets or secrets):
        return None
    spec, known = load_spec_and_secrets(path)
    spec = attach(apply_overrides(spec, name, vc, pairs, sets), known, secrets or {})
    return client.submit(json.dumps(spec).encode(), json_body=True)


def _code_dir_problems(code_dirs: list[str | None]) -> list[dict[str, Any]]:
    """The ``code_dir`` problems of a job file when the CLI talks to a running dev
    cluster, whose share is a local directory (:func:`scheduler.services.dryrun.
    code_dir_problem`); [] otherwise (``job submit --dry-run`` checks any cluster's)."""
    if not any(code_dirs):
        return []
    from scheduler.cli import config, devstate

    try:
        in_use = config.load().source
    except config.ConfigError:
        return []
    share = devstate.share_dir()
    if share is None or not in_use.startswith("pasture dev up"):
        return []
    from scheduler.services.dryrun import code_dir_problem

    return [p for d in code_dirs if (p := code_dir_problem(d, share))]


@app.command()
@handle_errors
def validate(
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="job file (YAML/JSON)"),
    output: OutputFormat = OutputOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Check a job file offline (no cluster), reading it exactly as `job submit` does:
    pasture, OpenPAI protocol v1 (JSON, comments allowed) and v2, MARO job or schedule,
    Volcano Job. Prints the warnings submit would answer. Exit 0 when valid, 6 with a
    field / problem / given table when not (the field as written in the file). What needs
    the cluster (the VC exists, a node can hold the gang) is checked at submit; with a
    running dev cluster in use, ``code_dir`` is checked on its share (else
    ``job submit --dry-run`` checks it).

    -o json|yaml print the spec(s) as pasture will store them (other formats translated).
    """
    from scheduler.spec import parse_cpu

    try:
        parsed = read_job(file)
    except ValueError as exc:  # scheduler.spec.SpecError
        print_problems(str(file), spec_problems(exc))
        raise typer.Exit(REJECTED) from None
    problems = _code_dir_problems([s.code_dir for s in parsed.specs])
    if problems:
        print_problems(str(file), problems)
        raise typer.Exit(REJECTED)
    specs = [s.model_dump(mode="json") for s in parsed.specs]
    fmt = output_format(output, as_json)
    if emit(specs[0] if len(specs) == 1 else specs, fmt, [s["name"] for s in specs]):
        return
    for warning in parsed.warnings:
        err_console.print(f"[yellow]warning:[/yellow] {esc(warning)}")
    for spec in specs:
        console.print(
            f"[green]valid[/green] ({esc(parsed.format)}): job [bold]{esc(spec['name'])}[/bold],"
            f" vc {esc(spec['vc'])}, priority {spec['priority']}, {spec_gpus(spec)} gpu(s) in all"
        )
    table = Table("role", "replicas", "per task", "command")
    table.columns[0].no_wrap = True
    for role, r in specs[0]["roles"].items():
        res = r.get("resources") or {}
        per_task = {"cpu_m": parse_cpu(res.get("cpu", 1)), "memory": res.get("memory")}
        per_task["gpu"] = res.get("gpu", 0)
        command = r.get("command") or f"(image ENTRYPOINT) {' '.join(r.get('args') or [])}"
        table.add_row(role, str(r.get("replicas", 1)), fmt_resources(per_task), command)
    console.print(table)


def _free_name(client: ApiClient, base: str) -> str:
    """``base-r2``, ``base-r3``... : the first name no job has (names are at most 61
    characters, so ``base`` is shortened when needed)."""
    for k in range(2, 1000):
        suffix = f"-r{k}"
        candidate = base[: 61 - len(suffix)].rstrip("-") + suffix
        try:
            client.job(candidate)
        except ApiError as exc:
            if exc.status == 404:
                return candidate
            raise
    raise typer.BadParameter(f"no free name {base}-rN; give one with --name")


@app.command()
@handle_errors
def resubmit(
    name: str = typer.Argument(
        ..., help="the job whose spec to submit again", autocompletion=complete_jobs
    ),
    new_name: str | None = NameOpt,
    vc: str | None = VcOpt,
    env: list[str] | None = EnvOpt,
    sets: list[str] | None = SetOpt,
    replace: bool = typer.Option(
        False, "--replace", help="delete the old (finished) job and reuse its name"
    ),
    secret: list[str] | None = SecretOpt,
    secrets_file: Path | None = SecretsFileOpt,
) -> None:
    """Submit a job's stored spec again, as NAME-r2 (then -r3...) unless --name or
    --replace. --vc, --env and --set change the copy, not the original. A job with
    secrets needs their values again (--secret / --secrets-file): only sealed copies
    were kept, which no client can read."""
    client = ApiClient(load())
    with job_hint(client, name):
        old = client.job(name)
    spec = old.spec
    if not spec:
        raise typer.BadParameter(f"job {name} has no stored spec", param_hint="NAME")
    if replace:
        client.delete(name)  # refused (exit 6) while it has not finished
        target = new_name or name
    else:
        target = new_name or _free_name(client, name)
    given = read_secrets(secret, secrets_file)
    body = attach(apply_overrides(spec, target, vc, parse_env(env), sets), {}, given)
    job = client.submit(json.dumps(body).encode(), json_body=True)
    console.print(
        f"resubmitted {esc(name)} as job [bold]{esc(job.name)}[/bold] to vc {esc(job.vc)}"
        f" ({markup_state(job.state)})"
    )
