"""``python -m gpulab.cli ...`` is ``gpulab ...`` (how a command re-runs itself under mpiexec)."""

import sys

from gpulab.cli import main

sys.exit(main())
