"""`python -m taguru_server.cli` runs the `taguru` command."""

from __future__ import annotations

import sys

from taguru_server.cli.main import main

sys.exit(main())
