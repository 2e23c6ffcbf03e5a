"""Locate the `bnconf` binary installed by the wheel (the way ruff's `find_ruff_bin` does)."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig

ENV_VAR = "BNCONF_BIN"


class BnconfNotFoundError(FileNotFoundError):
    """The `bnconf` binary is not where the wheel installs it (and BNCONF_BIN is not set)."""


def _user_scheme() -> str:
    if sys.version_info >= (3, 10):
        return sysconfig.get_preferred_scheme("user")
    if os.name == "nt":
        return "nt_user"
    if sys.platform == "darwin" and getattr(sys, "_framework", None):
        return "osx_framework_user"
    return "posix_user"


def find_bnconf_bin() -> str:
    """Path of the `bnconf` executable.

    Order: the environment variable ``BNCONF_BIN`` (a path, or a command name on PATH);
    the scripts directory of the current install scheme (``sysconfig.get_path("scripts")``,
    e.g. ``.venv/bin``); the user scheme's scripts directory (``pip install --user``);
    ``bin/`` next to the package root (``pip install --target``).
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
    looked = []

    scripts = os.path.join(sysconfig.get_path("scripts"), exe)
    looked.append(scripts)
    if os.path.isfile(scripts):
        return scripts

    try:
        user = os.path.join(sysconfig.get_path("scripts", scheme=_user_scheme()), exe)
    except KeyError:
        user = None
    if user:
        looked.append(user)
        if os.path.isfile(user):
            return user

    # `pip install --target DIR` puts scripts in DIR/bin, next to the package.
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = os.path.join(pkg_root, "bin", exe)
    looked.append(target)
    if os.path.isfile(target):
        return target

    raise BnconfNotFoundError(
        "the bnconf binary was not found; looked at: "
        + ", ".join(looked)
        + f". Install the package with `pip install ./python` (it builds the binary), "
        f"or set {ENV_VAR} to the path of a bnconf executable (e.g. target/release/bnconf)."
    )
