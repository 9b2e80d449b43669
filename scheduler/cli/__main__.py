"""``python -m scheduler.cli``: the ``pasture`` command without the console script."""

from scheduler.cli import main

main()
