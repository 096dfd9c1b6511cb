"""waitress's own answers, to requests it cannot read, as problem documents like every
other error of the API.

waitress answers a malformed request line, header or chunk (400), too large a header
block (431) or body (413) and a transfer coding it does not decode (501) itself, before
the application runs, as text/plain. Its channel class says which task writes those
answers: here one that writes ``application/problem+json``.
"""

from __future__ import annotations

import json

from waitress.channel import HTTPChannel
from waitress.task import ErrorTask

from services.api.errors import PROBLEM_MEDIA_TYPE, problem_document


class ProblemErrorTask(ErrorTask):  # type: ignore[misc]
    """waitress's error answer, its body a problem document; the connection then closes."""

    def execute(self) -> None:
        error = self.request.error
        body = json.dumps(problem_document(error.code, error.body)).encode()
        self.status = f"{error.code} {error.reason}"
        self.response_headers.append(("Content-Type", PROBLEM_MEDIA_TYPE))
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)


class ProblemChannel(HTTPChannel):  # type: ignore[misc]
    """waitress's connection, answering requests it cannot read with problem documents."""

    error_task_class = ProblemErrorTask
