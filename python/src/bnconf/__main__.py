"""`python -m bnconf ARGS` runs the bnconf binary with ARGS (like `python -m ruff`)."""

import os
import subprocess
import sys

from ._find_bin import BnconfNotFoundError, find_bnconf_bin


def main() -> int:
    try:
        exe = find_bnconf_bin()
    except BnconfNotFoundError as e:
        print(f"bnconf: {e}", file=sys.stderr)
        return 2
    argv = [exe, *sys.argv[1:]]
    if sys.platform == "win32":
        return subprocess.run(argv).returncode
    os.execvp(exe, argv)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
