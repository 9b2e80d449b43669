"""Structure of a rendered fluentd configuration, for molecule's verify step.

fluentd itself cannot be installed on the test machine (no reachable registry carries it),
so `fluentd --dry-run` cannot run here; the role runs it through `validate:` on real hosts.
This checks what can be checked without fluentd: every `<section arg>` is closed by its
`</section>` in order, and prints each section as JSON
`[{"path": "source/security", "arg": "", "params": {"shared_key": "..."}}, ...]`
so that verify.yml can assert on binds, servers, keys and output paths.
Exit code 1 with a message on unbalanced or stray directives.
"""

import json
import re
import sys

OPEN = re.compile(r"^<([a-z_]+)(?:\s+([^>]*))?>$")
CLOSE = re.compile(r"^</([a-z_]+)>$")


def main(path: str) -> int:
    stack: list[dict] = []
    sections: list[dict] = []
    with open(path, encoding="utf-8") as handle:
        for number, raw in enumerate(handle, start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if match := OPEN.match(line):
                section = {
                    "path": "/".join([s["name"] for s in stack] + [match.group(1)]),
                    "name": match.group(1),
                    "arg": (match.group(2) or "").strip(),
                    "params": {},
                }
                stack.append(section)
                sections.append(section)
            elif match := CLOSE.match(line):
                if not stack or stack[-1]["name"] != match.group(1):
                    opened = stack[-1]["name"] if stack else "nothing"
                    print(f"line {number}: </{match.group(1)}> closes {opened}", file=sys.stderr)
                    return 1
                stack.pop()
            elif stack:
                key, _, value = line.partition(" ")
                stack[-1]["params"][key] = value.strip()
            else:
                print(f"line {number}: parameter outside any section: {line}", file=sys.stderr)
                return 1
    if stack:
        print(f"unclosed <{stack[-1]['name']}> at end of file", file=sys.stderr)
        return 1
    print(json.dumps(sections))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
