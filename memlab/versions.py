"""Installed package versions, recorded next to every saved artefact (stage checkpoints,
memory folders) so a later load that behaves differently can be traced to an upgrade."""

from __future__ import annotations

from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version


def package_versions(packages: Iterable[str]) -> dict[str, str]:
    """``{package: version}`` for those of ``packages`` that are installed."""
    out = {}
    for package in packages:
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            pass
    return out
