"""The proxy's logs never carry a credential (issue 13 item 3).

A filter on the proxy's own logger and on uvicorn's access and error loggers rewrites each
record's message and arguments: secret shapes and credential query parameters (`?key=…`)
by the session's redactor, and the exact credential values the proxy has seen in requests.
"""

from __future__ import annotations

import logging
from typing import Any

from hashreplay.engine.session import Session

__all__ = ["LOGGERS", "SecretLogFilter", "install_log_filter"]

#: Loggers whose records a `hashreplay serve` process scrubs.
LOGGERS = ("hashreplay.serve", "hashreplay", "uvicorn.access", "uvicorn.error")


class SecretLogFilter(logging.Filter):
    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session

    def scrub(self, text: str) -> str:
        return self.session.seen_secrets.text(self.session.redactor.text(text))

    def _arg(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, (int, float, type(None))):
            return value
        return self.scrub(str(value))

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = self.scrub(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(self._arg(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: self._arg(v) for k, v in record.args.items()}
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            record.exc_text = self.scrub(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


def install_log_filter(session: Session) -> SecretLogFilter:
    """Put one filter for `session` on each of `LOGGERS` (replacing an earlier one)."""
    new = SecretLogFilter(session)
    for name in LOGGERS:
        log = logging.getLogger(name)
        for old in [f for f in log.filters if isinstance(f, SecretLogFilter)]:
            log.removeFilter(old)
        log.addFilter(new)
    return new
