"""The ``spark-pg`` console script: :func:`spark_pg.cli.main` with Ctrl-C caught from the first import on.

``main()`` catches Ctrl-C while a command runs; one pressed while the CLI's modules are still loading
(psycopg, argparse, the command's own imports) reached the interpreter as a traceback. Here it is the same
one line and exit status 130 wherever it lands.
"""

from __future__ import annotations

import sys

INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C


def run() -> None:
    """Run the CLI on ``sys.argv`` and exit with its status."""
    try:
        from spark_pg.cli import main

        status = main()
    except KeyboardInterrupt:
        print("spark-pg: interrupted", file=sys.stderr)
        status = INTERRUPTED
    sys.exit(status)
