"""Where the symbolic links of an archive lead, worked out from the archive alone.

A link may go through another stored after it, which no check made while reading could see;
so once every member is admitted, :class:`LinkResolver` follows each link as the kernel
would, through the links the archive holds, without recursion and remembering every link
it resolved, so that a chain of thousands of links costs time linear in the archive. A link
leading outside the project, or through more than :data:`MAX_LINK_HOPS` links (Linux's
ELOOP limit), is named with why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath

MAX_LINK_HOPS = 40
"""Most symbolic links one link may lead through, counting itself: Linux's limit."""


class _Outside(Exception):
    """The link being followed leads outside the project."""


class _TooManyHops(Exception):
    """The link being followed goes through more than MAX_LINK_HOPS links."""


@dataclass
class LinkResolver:
    """Resolves the archive's symbolic links: ``targets`` maps each link's normal path to
    its target, as stored (relative to the link's folder)."""

    targets: dict[str, str]
    _resolved: dict[str, tuple[tuple[str, ...], int]] = field(default_factory=dict)
    """Per link: the path it leads to, and how many links it goes through to get there."""

    def problem(self, path: str) -> str | None:
        """Why the link at ``path`` cannot be kept (it leads outside the project or through
        too many links), or None if it can."""
        try:
            self._resolve(PurePosixPath(path).parts)
        except _Outside:
            return "the link points outside the project through another link"
        except _TooManyHops:
            return f"the link goes through more than {MAX_LINK_HOPS} links"
        return None

    def _resolve(self, parts: tuple[str, ...]) -> tuple[str, ...]:
        """The path ``parts`` leads to, every link on the way followed."""
        resolved: list[str] = []
        # What is left to walk, last first; a link being expanded leaves a marker
        # (its path, and the hops counted when it began) to remember its result by.
        pending: list[str | tuple[str, int]] = list(reversed(parts))
        hops = 0
        while pending:
            part = pending.pop()
            if isinstance(part, tuple):
                link, hops_before = part
                self._resolved[link] = (tuple(resolved), hops - hops_before)
                continue
            hops = self._step(resolved, pending, part, hops)
        return tuple(resolved)

    def _step(
        self, resolved: list[str], pending: list[str | tuple[str, int]], part: str, hops: int
    ) -> int:
        """Walk one part of a path; the hops counted so far."""
        if part in ("", "."):
            return hops
        if part == "..":
            if not resolved:
                raise _Outside
            resolved.pop()
            return hops
        resolved.append(part)
        link = "/".join(resolved)
        if link not in self.targets:
            return hops
        known = self._resolved.get(link)
        if known is not None:
            target, link_hops = known
            resolved[:] = target
            hops += link_hops
        else:
            resolved.pop()
            hops += 1
            pending.append((link, hops - 1))
            pending.extend(reversed(PurePosixPath(self.targets[link]).parts))
        if hops > MAX_LINK_HOPS:
            raise _TooManyHops
        return hops


def link_problem(targets: dict[str, str]) -> tuple[str, str] | None:
    """The first link of ``targets`` (normal path -> target, in archive order) that leads
    outside the project or through too many links, with why; None if there is none."""
    resolver = LinkResolver(targets)
    for path in targets:
        if reason := resolver.problem(path):
            return path, reason
    return None


__all__ = ["MAX_LINK_HOPS", "LinkResolver", "link_problem"]
