"""``python -m scheduler.loop --config /etc/pasture/scheduler.yaml``."""

from scheduler.loop import main

main()
