"""``python -m raygents``."""

from __future__ import annotations

import sys

from raygents.cli import main

sys.exit(main())
