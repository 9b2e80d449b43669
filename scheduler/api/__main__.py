"""``python -m scheduler.api --config /etc/pasture/scheduler.yaml``: serve the API."""

from __future__ import annotations

import argparse
import sys

from scheduler.api.server import serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler.api", description=__doc__)
    parser.add_argument("--config", default=None, help="scheduler.yaml (default: PASTURE_CONFIG)")
    parser.add_argument("--host", default=None, help="override api.host")
    parser.add_argument("--port", type=int, default=None, help="override api.port")
    args = parser.parse_args(argv)
    try:
        serve(args.config, host=args.host, port=args.port)
    except (OSError, ValueError) as exc:  # unreadable or invalid settings, TLS files
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
