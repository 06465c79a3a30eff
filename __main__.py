"""`python -m taguru_server` runs the `taguru` command (as `python -m taguru_server.cli` does)."""

from __future__ import annotations

import sys

from taguru_server.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
