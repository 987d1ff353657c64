"""`python -m agenthub` runs the `agenthub` command."""

import sys

from agenthub.cli import main

sys.exit(main())
