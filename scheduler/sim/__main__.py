"""``python -m scheduler.sim``: see :mod:`scheduler.sim.cli`."""

from scheduler.sim.cli import app

if __name__ == "__main__":
    app(prog_name="python -m scheduler.sim")
