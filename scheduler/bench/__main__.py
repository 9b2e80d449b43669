"""``python -m scheduler.bench <benchmark> [options] [--json]``."""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from scheduler.bench import BENCHMARKS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler.bench", description=__doc__)
    sub = parser.add_subparsers(dest="benchmark", required=True)
    modules = {}
    for name, module_name in BENCHMARKS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue  # benchmark not built yet
        modules[name] = module
        p = sub.add_parser(name, help=(module.__doc__ or "").strip().splitlines()[0])
        p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
        module.add_arguments(p)
    args = parser.parse_args(argv)
    result = modules[args.benchmark].run(args)
    if args.json:
        print(json.dumps(result))
    else:
        width = max(len(k) for k in result)
        for key, value in result.items():
            print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
