"""``python -m citemon``: the ``citemon`` command."""

from citemon.cli import main

raise SystemExit(main())
