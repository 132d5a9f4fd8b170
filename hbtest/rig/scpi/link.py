"""The one link between an SCPI driver and its instrument: every write, query and binary block
goes through :class:`ScpiLink`, which turns any transport failure (timeout, dropped
connection, garbage bytes, malformed IEEE 488.2 block) into one
:class:`hbtest.errors.InstrumentError` naming the instrument and the command.

The resource surface a driver needs is small and is exactly pyvisa's message-based resource:

- ``write(str)``, ``query(str) -> str`` (write/read termination set by whoever opened it);
- ``write_binary_values(str, values, datatype=..., is_big_endian=False)``: the command text
  followed by an IEEE 488.2 definite-length block ``#<n><len><bytes>`` and the termination;
- ``query_binary_values(str, datatype=..., is_big_endian=False, container=...)``;
- ``timeout`` [ms] (read/write attribute) and optionally ``clear()`` and ``close()``.

Timeouts are retried a bounded number of times (:data:`RETRIES`), after ``clear()`` drains any
late reply so it cannot be mistaken for the next one; other failures are not retried.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import InstrumentError

__all__ = ["ScpiLink", "RETRIES", "open_resource"]

RETRIES = 2  # extra attempts after a timeout (so at most 1 + RETRIES tries per command)
REPLY_SHOWN = 60  # characters of a bad reply quoted in an error message


def _is_timeout(e: BaseException) -> bool:
    if isinstance(e, TimeoutError):
        return True
    try:
        import pyvisa

        return isinstance(e, pyvisa.errors.VisaIOError) and e.error_code == pyvisa.constants.StatusCode.error_timeout
    except ImportError:  # pragma: no cover - pyvisa is a dependency
        return False


def _transport_errors() -> tuple[type[BaseException], ...]:
    errs: list[type[BaseException]] = [OSError, ValueError, UnicodeError, EOFError, TimeoutError]
    try:
        import pyvisa

        errs.append(pyvisa.errors.Error)
    except ImportError:  # pragma: no cover
        pass
    return tuple(errs)


@dataclass
class ScpiLink:
    """A resource plus the instrument's name (for errors) and the retry policy."""

    resource: object
    name: str
    retries: int = RETRIES

    def _call(self, what: str, fn, *args, **kw):
        errors = _transport_errors()
        for attempt in range(self.retries + 1):
            try:
                return fn(*args, **kw)
            except errors as e:
                if _is_timeout(e) and attempt < self.retries:
                    self._drain()
                    continue
                self._drain()
                why = "no reply (timeout)" if _is_timeout(e) else f"{type(e).__name__}: {e}"
                tries = f" after {attempt + 1} tries" if _is_timeout(e) else ""
                raise InstrumentError(f"{self.name}: {what!r} failed{tries}: {why}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _drain(self) -> None:
        clear = getattr(self.resource, "clear", None)
        if clear is None:
            return
        try:
            clear()
        except Exception:  # draining is best effort; the caller reports the original fault
            pass

    def write(self, command: str) -> None:
        self._call(command, self.resource.write, command)

    def query(self, command: str) -> str:
        reply = self._call(command, self.resource.query, command)
        if not isinstance(reply, str) or not reply.isprintable():
            raise self.bad_reply(command, reply, "not printable text")
        return reply.strip()

    def query_float(self, command: str) -> float:
        reply = self.query(command)
        try:
            v = float(reply)
        except ValueError:
            raise self.bad_reply(command, reply, "not a number") from None
        if not np.isfinite(v):
            raise self.bad_reply(command, reply, "not a finite number")
        return v

    def write_block(self, command: str, values: np.ndarray, datatype: str) -> None:
        self._call(command + "<block>", self.resource.write_binary_values, command, np.asarray(values), datatype=datatype, is_big_endian=False)

    def query_block(self, command: str, datatype: str) -> np.ndarray:
        return self._call(command, self.resource.query_binary_values, command, datatype=datatype, is_big_endian=False, container=np.array)

    def bad_reply(self, command: str, reply, problem: str) -> InstrumentError:
        shown = repr(reply)
        if len(shown) > REPLY_SHOWN:
            shown = shown[:REPLY_SHOWN] + "..."
        return InstrumentError(f"{self.name}: malformed reply to {command!r}: {problem}: {shown}")

    def set_timeout_ms(self, ms: float) -> None:
        try:
            self.resource.timeout = ms
        except Exception as e:  # a resource without a settable timeout is a wiring error
            raise InstrumentError(f"{self.name}: cannot set the timeout: {e}") from None

    def close(self) -> None:
        close = getattr(self.resource, "close", None)
        if close is not None:
            try:
                close()
            except Exception:
                pass


def open_resource(address: str, name: str, *, library: str = "@py", timeout_ms: float = 5000.0):
    """Open ``address`` through pyvisa (``library``: ``"@py"`` for pyvisa-py, ``"file.yaml@sim"``
    for pyvisa-sim) with ``\\n`` read/write termination and a bounded timeout. Errors name the
    instrument."""
    import pyvisa

    try:
        rm = pyvisa.ResourceManager(library)
        res = rm.open_resource(address, read_termination="\n", write_termination="\n", timeout=timeout_ms)
    except Exception as e:
        raise InstrumentError(f"{name}: cannot open {address!r} ({library}): {type(e).__name__}: {e}") from None
    return res
