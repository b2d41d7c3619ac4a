"""Named logical versions: ``omni tag web release-1 --version 5``, then ``--as-of release-1``.

A tag is one logical commit (operation ``tag``) whose summary says which version the
label names. The summary is stored in the view version and in the family document of
that commit, so tags live in the catalog with everything else and their history is the
log: tagging a label again moves it, and the newest tag commit of a label wins.

The commit goes through :class:`TagVersion`, a typed update whose precondition is that
the tagged version exists in the state it is applied to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from catalog_ext.errors import InvalidIdentifierError, NoSuchVersionError
from catalog_ext.family import FamilyState
from catalog_ext.suggest import did_you_mean
from catalog_ext.updates import PreconditionFailed

SUMMARY_TAG = "omni.tag"
SUMMARY_TAG_VERSION = "omni.tag-version"
_LABEL = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]{0,63}$")


def check_label(label: str) -> str:
    """Labels start with a letter, so ``--as-of 5`` is always a version and never a label."""
    if not _LABEL.match(label):
        raise InvalidIdentifierError(
            f"invalid tag {label!r}: use a letter then letters, digits, '_', '.' or '-' (at most 64), "
            f"e.g. release-1"
        )
    return label


@dataclass(frozen=True)
class TagVersion:
    """Name logical version ``version`` ``label``; the mapping itself does not change."""

    label: str
    version: int

    def apply(self, s: FamilyState) -> dict:
        if not 1 <= self.version <= s.version:
            raise PreconditionFailed(
                f"cannot tag version {self.version} of {s.table.identifier}: it has versions 1..{s.version}"
            )
        return {}

    def summary(self) -> dict[str, str]:
        return {SUMMARY_TAG: self.label, SUMMARY_TAG_VERSION: str(self.version)}


def tags_from_summaries(summaries: list[dict[str, str]]) -> dict[str, int]:
    """label -> version, from version summaries oldest first (a later tag of a label moves it)."""
    out: dict[str, int] = {}
    for summary in summaries:
        if SUMMARY_TAG in summary and SUMMARY_TAG_VERSION in summary:
            out[summary[SUMMARY_TAG]] = int(summary[SUMMARY_TAG_VERSION])
    return out


def resolve(identifier: str, tags: dict[str, int], as_of: int | str | None) -> int | None:
    """An ``--as-of`` value (version number, digits or tag) as a version number."""
    if as_of is None or isinstance(as_of, int):
        return as_of
    text = str(as_of).strip()
    if text.lstrip("-").isdigit():
        return int(text)
    if text in tags:
        return tags[text]
    known = ", ".join(f"{k} (v{v})" for k, v in sorted(tags.items())) or "none"
    raise NoSuchVersionError(
        f"{identifier} has no version or tag {text!r}{did_you_mean(text, tags)} (tags: {known}); "
        f"--as-of takes a version number from 'omni log' or a tag from 'omni tag'"
    )


__all__ = ["TagVersion", "check_label", "resolve", "tags_from_summaries"]
