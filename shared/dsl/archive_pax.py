"""The records of a PAX extended header, checked in linear time before tarfile parses them.

tarfile (before Python 3.11.10 and 3.12.6, CVE-2024-6232) finds a PAX header's records with
regular expressions that backtrack over runs of digits: a 100 KB body of ``1`` takes
seconds, and the cost grows with the square of the body. :func:`pax_problem` reads the
records itself, in one pass, and refuses any body but well-formed records
(``"<length> <keyword>=<value>\\n"``, each ``length`` counting its whole record, the records
exactly filling the body) and any run of digits long enough to make that backtracking
costly, so the time tarfile then takes is linear in the body whatever Python's version.
"""

from __future__ import annotations

import re

MAX_LENGTH_DIGITS = 20
"""Most digits of a record's length field (a record longer than 10**20 bytes cannot be)."""
MAX_DIGIT_RUN = 32
"""Longest run of digits a PAX body may hold: a time with nanoseconds has 10 and 9, a size
20; tarfile's search for ``hdrcharset`` takes time growing with the square of the longest."""
_LONG_DIGIT_RUN = re.compile(rb"[0-9]{%d}" % (MAX_DIGIT_RUN + 1))
_NEWLINE = 0x0A


def pax_problem(body: bytes) -> str | None:
    """Why ``body`` (the data of a PAX header, without its padding) is not a sequence of
    well-formed records, or None if it is."""
    long_run = _LONG_DIGIT_RUN.search(body)
    if long_run is not None:
        return f"more than {MAX_DIGIT_RUN} digits in a row at byte {long_run.start()}"
    position = 0
    while position < len(body):
        problem = _record_problem(body, position)
        if isinstance(problem, str):
            return f"the PAX record at byte {position} {problem}"
        position = problem
    return None


def _record_problem(body: bytes, start: int) -> str | int:
    """Why the record at ``start`` is malformed, or where the next record starts."""
    space = body.find(b" ", start, start + MAX_LENGTH_DIGITS + 1)
    digits = body[start:space]
    if space < 0 or not digits.isdigit():
        return f"does not start with its length (at most {MAX_LENGTH_DIGITS} digits, a space)"
    end = start + int(digits)
    if end > len(body):
        return f"claims {int(digits)} bytes, past the end of the header"
    if end < space + 4 or body[end - 1] != _NEWLINE:
        return f"claims {int(digits)} bytes, which do not end with a newline"
    if body.find(b"=", space + 2, end - 1) < 0:
        return "is not 'keyword=value'"
    return end
