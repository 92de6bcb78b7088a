"""Log output: text for a terminal (the default) or JSON for a log pipeline.

JSON is one object per line, `ts` (RFC 3339, UTC, milliseconds), `level`, `logger`, `msg`, then
the record's structured fields: what a caller passed as `extra` (`pod`, `node`, `policy` on the
per-pod decision lines) and `exc` with a traceback. Fluent Bit, Vector, Loki and Elasticsearch
then index pods and nodes without parsing the message.

Per-pod decision lines (bound, unschedulable) are DEBUG: kube-scheduler logs its "Successfully
bound pod to node" at -v=2, which is not on by default either; at 1000 pods/s they are the
bulk of the output.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Attributes every LogRecord has: anything else on a record came from `extra`.
_STANDARD = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)).keys()
    | {"message", "asctime", "taskName"}
)


class JsonFormatter(logging.Formatter):
    """One JSON object per record; structured fields never overwrite the four fixed ones."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC)
        out: dict[str, Any] = {
            "ts": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_") and key not in out:
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def one_line(exc: BaseException, limit: int = 500) -> str:
    """An exception as one line of at most `limit` characters, with its type: what a start-up
    failure or a configuration error prints and posts (events, stderr)."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return " ".join(text.split())[:limit]


class ShutdownDuringStartup(logging.Filter):
    """kopf warns "Activity ... is cancelled. Will escalate." and "Startup activity is only
    partially executed due to cancellation." when SIGTERM comes while the start-up handler is
    still retrying (an API server not reachable yet, say): an orderly stop, not a problem.
    Those two records become one INFO line; kopf's other warnings pass unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.name == "kopf._core.reactor.running" and message.startswith(
            "Startup activity is only partially executed due to cancellation"
        ):
            return False
        if record.name == "kopf.activities.startup" and message.endswith(
            "is cancelled. Will escalate."
        ):
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg, record.args = "stopped during start-up (SIGTERM or SIGINT)", ()
        return True


def setup(level: str, fmt: LogFormat = "text") -> None:
    """Configure the root logger for `loadwise run` (replacing any earlier configuration)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    logging.captureWarnings(True)  # Python warnings too: no line outside the format
    # kopf logs every handled pod event at DEBUG/INFO: keep it quiet on the hot path.
    logging.getLogger("kopf").setLevel(logging.WARNING)
    handler.addFilter(ShutdownDuringStartup())
