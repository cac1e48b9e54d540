"""``python -m raygents``."""

from __future__ import annotations

import sys

from raygents.cli.main import main

sys.exit(main())
