"""Locate the `bnconf` binary installed by the wheel (the way ruff's `find_ruff_bin` does)."""

from __future__ import annotations

import os
import shutil
import sysconfig

ENV_VAR = "BNCONF_BIN"


class BnconfNotFoundError(FileNotFoundError):
    """The `bnconf` binary is not where the wheel installs it (and BNCONF_BIN is not set)."""


def find_bnconf_bin() -> str:
    """Path of the `bnconf` executable.

    Order: the environment variable ``BNCONF_BIN`` (a path, or a command name on PATH); the
    binary the wheel puts in the package (``bnconf/_bin/bnconf``, whatever the install scheme:
    a venv, ``--user``, ``--target``). The ``bnconf`` command a pip install creates is a
    Python script that runs this binary (``bnconf.__main__``).
    Raises :class:`BnconfNotFoundError` naming every place looked at.
    """
    override = os.environ.get(ENV_VAR)
    if override:
        if os.path.isfile(override):
            return os.path.abspath(override)
        found = shutil.which(override)
        if found:
            return found
        raise BnconfNotFoundError(f"{ENV_VAR}={override!r} is neither a file nor a command on PATH")

    exe = "bnconf" + (sysconfig.get_config_var("EXE") or "")
    packaged = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", exe)
    if os.path.isfile(packaged):
        return packaged

    raise BnconfNotFoundError(
        f"the bnconf binary was not found; looked at: {packaged}. Install the package with "
        f"`pip install ./python` (it builds the binary), or set {ENV_VAR} to the path of a "
        "bnconf executable (e.g. target/release/bnconf)."
    )
