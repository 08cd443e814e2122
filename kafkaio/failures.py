"""Connection failures of kafka-python clients, told in one line with the cause kafka-python logged (its exceptions
only say that it could not bootstrap)."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator

from elrwatch.kafkaio.config import SourceError


class _ConnectionFailureTap(logging.Handler):
    """Keeps the most telling connection failure kafka-python logs (SASL authentication, TLS handshake, refused):
    its exceptions only say that it could not bootstrap. The messages name hosts and causes, never credentials."""

    #: Causes worth naming, most telling first; a plain "socket disconnected" is kept only when nothing else came.
    SPECIFIC = ("Authentication", "SSL", "Handshake", "certificate", "refused", "UnsupportedVersion")
    #: A retry cut short by the deadline ("SASL Authentication timed out") says less than an earlier attempt's answer
    #: (the broker rejecting the credentials): it is named only when no attempt got further.
    CUT_SHORT = ("timed out", "TimeoutError")
    PREFIX = re.compile(r"^Bootstrap connection to \S+ failed: (.*?)(?: \(backoff [^)]*\))?$")

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.specific: str | None = None
        self.generic: str | None = None
        self._cut_short = False

    @property
    def last(self) -> str | None:
        """The last specific cause seen, else the last failure seen (None when none was logged)."""
        return self.specific or self.generic

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = " ".join(record.getMessage().split())
        except Exception:  # a malformed log call must not break the client
            return
        match = self.PREFIX.match(message)
        if match is None:
            return
        cause = match.group(1)[:300]
        if any(marker in cause for marker in self.SPECIFIC):
            cut_short = any(marker in cause for marker in self.CUT_SHORT)
            if not cut_short or self.specific is None or self._cut_short:
                self.specific, self._cut_short = cause, cut_short
        else:
            self.generic = cause


@contextlib.contextmanager
def connection_failures() -> Iterator[_ConnectionFailureTap]:
    """While inside, ``.last`` holds the last connection failure kafka-python logged (None if none)."""
    tap = _ConnectionFailureTap()
    logger = logging.getLogger("kafka")
    level, propagate = logger.level, logger.propagate
    if logger.getEffectiveLevel() > logging.WARNING:
        # Someone silenced kafka-python (e.g. `elrwatch bridge`, which counts failures itself): the tap still needs
        # its warnings, and nothing else gets them.
        logger.setLevel(logging.WARNING)
        logger.propagate = False
    logger.addHandler(tap)
    try:
        yield tap
    finally:
        logger.removeHandler(tap)
        logger.setLevel(level)
        logger.propagate = propagate


def unreachable_error(
    servers: str | None, timeout_s: float, exc: BaseException, last: str | None, security_protocol: str = "PLAINTEXT"
) -> SourceError:
    """The one-line error for a Kafka client that could not connect, with the cause kafka-python logged. Over SASL,
    kafka-python sometimes sees only the broker closing the connection after rejecting the credentials."""
    cause = f"; last connection error: {last}" if last else ""
    named = last is not None and any(marker in last for marker in _ConnectionFailureTap.SPECIFIC)
    if security_protocol.upper().startswith("SASL") and not named:
        # kafka-python may see only the connection closed, or a request timing out after it, not the broker's answer
        cause += (
            " (with SASL, a connection that fails without a named cause usually means the broker rejected the "
            "credentials or mechanism)"
        )
    return SourceError(f"cannot reach Kafka at {servers} within {timeout_s:g}s: {type(exc).__name__}{cause}")
