"""``python -m scheduler.gpu_check``: :func:`scheduler.gpu_check.main`."""

import sys

from scheduler.gpu_check import main

sys.exit(main())
