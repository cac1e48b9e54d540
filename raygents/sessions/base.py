"""What every session shares: the protocol, the session id rules, loading and saving a run's
conversation, and the checks and merges of stored messages."""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from pydantic import ValidationError

from raygents.core.messages import Message
from raygents.errors import RaygentsError, UserError
from raygents.ids import validate_id

__all__ = [
    "Session",
    "build_messages",
    "check_compacted",
    "check_input_len",
    "compacted_edit",
    "fallback_tail",
    "dump_messages",
    "load_session",
    "merge_compacted",
    "merge_save",
    "plain_messages",
    "recompact",
    "save_edit",
    "save_session",
    "splice",
    "validate_session_id",
]

log = logging.getLogger(__name__)

_SURROGATE = re.compile("[\ud800-\udfff]")
_FIELDS = set(Message.model_fields)
_T = TypeVar("_T")


@runtime_checkable
class Session(Protocol):
    """Where conversations live between runs, keyed by session id.

    Either method may be ``async def``; the runtime awaits what they return, and runs plain
    (blocking) methods in a worker thread so they never stall an agent actor's event loop.
    Implementations must pickle: agents carry their session to Ray actors.

    A session may also have ``save_run(session_id, messages, *, input_len)`` (found with
    ``hasattr``; sync or async), which the runtime then uses to save a completed run:
    ``messages`` is the run's conversation, whose first ``input_len`` messages were its input
    (the history it loaded from the session, then what it was given). It must store the
    current conversation followed by the run's messages after the history it loaded, in one
    atomic step, so that a run that suspended and resumed keeps what another run on the
    session saved in between (the shipped sessions do). Without it the runtime calls
    ``save``, which replaces the conversation.

    A session may also have ``save_compacted(session_id, messages, *, compacted)``, which
    the runtime uses for a run whose history a compaction policy shortened:
    ``compacted`` is ``(loaded, upto, summary_len)``: the run loaded ``loaded`` messages, and
    the first ``summary_len`` of ``messages`` stand for the first ``upto`` of those; the next
    ``loaded - upto`` are the rest of them, verbatim, and the others are the run's own. It
    must, in one atomic step, replace the first ``upto`` messages of the conversation with
    the summary and append the run's own messages, keeping those other runs saved since
    (where the conversation no longer holds what the run loaded, it appends the run's own
    messages, with the summary if that stands for all it loaded: nothing is lost). Without
    it the runtime calls ``save``.
    """

    def load(self, session_id: str) -> list[Message] | Awaitable[list[Message]]:
        """The stored conversation, oldest first; ``[]`` for an unknown id."""
        ...

    def save(self, session_id: str, messages: list[Message]) -> Awaitable[None] | None:
        """Replace the stored conversation with ``messages``."""
        ...


def validate_session_id(session_id: str) -> str:
    """Check a session id and return it.

    A session id is 1 to 128 ASCII characters: letters, digits, ``.``, ``_`` and ``-``,
    starting with a letter, digit or ``_``, without ``..`` (a store key segment).

    Raises:
        UserError: the id is not a str or breaks a rule.
    """
    return validate_id(session_id, "session id")


async def load_session(session: Session, session_id: str) -> list[Message]:
    """Load a conversation through any session, sync or async (for the runtime).

    Each message comes back a plain, checked :class:`Message` (a subclass's extra fields and
    lone surrogates would break the run's checkpoints).

    Raises:
        RaygentsError: the session failed (other errors are wrapped, naming the session and
            the id) or returned something that is not a list of valid messages.
    """
    validate_session_id(session_id)
    messages = await _call(session, "load", session_id)
    if messages is None:
        return []
    if not isinstance(messages, Sequence) or isinstance(messages, str | bytes):
        raise RaygentsError(f"{session!r}.load returned {type(messages).__name__}, not a list")
    out = []
    for index, message in enumerate(messages):
        if not isinstance(message, Message):
            raise RaygentsError(
                f"{session!r}.load returned a {type(message).__name__} in its list, not a Message"
            )
        try:  # a subclass or an unchecked message must not reach the run's checkpoints
            out.append(_plain(message))
        except (ValidationError, TypeError) as exc:
            raise RaygentsError(
                f"{session!r}.load returned a message raygents cannot use (message {index}, "
                f"{_shown(message)}): {_first_error(exc)}"
            ) from None
    return out


async def save_session(
    session: Session,
    session_id: str,
    messages: Sequence[Message],
    *,
    input_len: int | None = None,
    compacted: tuple[int, int, int] | None = None,
) -> None:
    """Save a conversation through any session, sync or async (for the runtime).

    With ``input_len`` (a completed run's: its first ``input_len`` messages were its input,
    loaded history included), through the session's ``save_run`` if it has one (see
    :class:`Session`), which keeps what other runs saved since; with ``compacted`` (a
    compacted run's), through its ``save_compacted`` if it has one; else through ``save``.

    Raises:
        RaygentsError: the session failed; other errors are wrapped, naming the session and id.
    """
    validate_session_id(session_id)
    if compacted is not None and callable(getattr(session, "save_compacted", None)):
        await _call(session, "save_compacted", session_id, list(messages), compacted=compacted)
    elif input_len is not None and callable(getattr(session, "save_run", None)):
        await _call(session, "save_run", session_id, list(messages), input_len=input_len)
    else:
        await _call(session, "save", session_id, list(messages))


async def _call(session: Session, method: str, *args: Any, **kwargs: Any) -> Any:
    function = getattr(session, method)
    try:
        if inspect.iscoroutinefunction(function):
            return await function(*args, **kwargs)
        out = await asyncio.to_thread(function, *args, **kwargs)
        return await out if inspect.isawaitable(out) else out
    except RaygentsError:
        raise
    except Exception as exc:  # user code: keep foreign exception types out of the run
        raise RaygentsError(
            f"cannot {method} session {args[0]!r} with {session!r}: {type(exc).__name__}: {exc}"
        ) from exc


def _dirty(value: Any) -> bool:
    """Whether ``value`` (JSON-mode data) holds a lone surrogate in its text."""
    if isinstance(value, str):
        return _SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(_dirty(k) or _dirty(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_dirty(v) for v in value)
    return False


def _scrub(value: Any) -> Any:
    """``value`` (JSON-mode data) with every lone surrogate in its text replaced by U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v) for v in value]
    return value


def _plain(message: Message) -> Message:
    """``message`` as a plain, checked :class:`Message`: a subclass's extra fields would make
    every later load fail, and lone surrogates (which cannot be encoded as UTF-8) become
    U+FFFD.

    Raises:
        ValidationError: the message is not a valid Message (it was built unchecked).
    """
    data = message.model_dump(mode="json", include=_FIELDS, warnings=False)
    return Message.model_validate(_scrub(data) if _dirty(data) else data)


def plain_messages(messages: Sequence[Message]) -> list[Message]:
    """Messages as a session stores them: each a plain, checked Message (see :func:`_plain`).

    Raises:
        UserError: ``messages`` is not a list of messages, or one would not load back.
    """
    if isinstance(messages, str) or not isinstance(messages, Sequence):
        raise UserError(f"a session saves a list of messages, not {type(messages).__name__}")
    out = []
    for index, message in enumerate(messages):
        if not isinstance(message, Message):
            raise UserError(f"a session saves Message objects, not {type(message).__name__}")
        try:  # Message has a custom __init__, which pydantic calls: bad data may raise TypeError
            out.append(_plain(message))
        except (ValidationError, TypeError) as exc:
            raise UserError(
                f"message {index} cannot be stored in a session, it would not load back "
                f"({_shown(message)}): {_first_error(exc)}; save valid Message objects"
            ) from None
    return out


def dump_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages as the JSON-mode dicts a session stores (see :func:`plain_messages`)."""
    return [m.model_dump(mode="json") for m in plain_messages(messages)]


def _shown(message: Message) -> str:
    shown = repr(message.model_dump(mode="json", include=_FIELDS, warnings=False))
    return shown if len(shown) <= 200 else shown[:200] + "..."


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError) and exc.errors():
        error = exc.errors()[0]
        return f"{'.'.join(map(str, error['loc'])) or 'message'}: {error['msg']}"
    return str(exc)[:200]


def build_messages(data: Sequence[Any], where: str) -> list[Message]:
    """Stored JSON-mode dicts as messages; bad text is replaced, with a warning."""
    clean = list(data)
    if _dirty(clean):
        log.warning("%s holds text that is not valid UTF-8; it was replaced with U+FFFD", where)
        clean = _scrub(clean)
    try:  # Message has a custom __init__, which pydantic calls: bad data may raise TypeError
        return [Message.model_validate(item) for item in clean]
    except (ValidationError, TypeError) as exc:
        raise RaygentsError(f"{where} holds a message raygents cannot read: {exc}") from exc


def check_input_len(input_len: Any) -> int:
    if type(input_len) is not int or input_len < 0:
        raise UserError(f"input_len must be an int >= 0, got {input_len!r}")
    return input_len


def merge_save(
    current: list[_T], marks: Sequence[int], messages: list[_T], input_len: int | None
) -> tuple[list[_T], list[int]]:
    """The conversation a save leaves, and its marks.

    A mark is the length of a conversation once stored whose messages still begin the stored
    conversation; the history a run loaded is one of them (or empty). A plain save
    (``input_len`` None) replaces the conversation. A run's save (``save_run``) appends the
    run's messages after the history it loaded: the longest mark that begins ``messages``
    within its input. Marks, not the longest common prefix, because another run may have
    begun with the same input (two runs that both asked "continue").
    """
    keep, tail = save_edit(current, marks, messages, input_len)
    return splice(current, marks, keep, tail)


def save_edit(
    current: Sequence[_T], marks: Sequence[int], messages: list[_T], input_len: int | None
) -> tuple[int, list[_T]]:
    """What a save does to the conversation (see :func:`merge_save`), as ``(keep, tail)``:
    keep its first ``keep`` messages and add ``tail`` (for :func:`splice`)."""
    common = common_prefix(current, messages)
    if input_len is None:
        return common, messages[common:]
    limit = min(common, input_len)
    loaded = max(b for b in (0, len(current), *marks) if b <= limit)
    return len(current), messages[loaded:]


def splice(
    current: Sequence[_T], marks: Sequence[int], keep: int, tail: Sequence[_T]
) -> tuple[list[_T], list[int]]:
    """The conversation's first ``keep`` messages followed by ``tail``, and its marks: those
    of the kept part (the whole conversation before the save is one), and its new length."""
    new = [*current[:keep], *tail]
    out = {b for b in (*marks, len(current)) if 0 < b <= keep}
    if new:
        out.add(len(new))
    return new, sorted(out)


def recompact(
    current: Sequence[_T],
    marks: Sequence[int],
    upto: int,
    summary: Sequence[_T],
    tail: Sequence[_T],
) -> tuple[list[_T], list[int]]:
    """The conversation with its first ``upto`` messages replaced by ``summary`` (a
    compaction: what follows them, other runs' messages included, stays), then ``tail``; the
    marks past ``upto`` move with the messages they end at."""
    new = [*summary, *current[upto:], *tail]
    moved = {b - upto + len(summary) for b in (*marks, len(current)) if b >= upto}
    out = {b for b in moved if b > 0}
    if new:
        out.add(len(new))
    return new, sorted(out)


def compacted_edit(
    current: Sequence[_T],
    marks: Sequence[int],
    messages: Sequence[_T],
    compacted: tuple[int, int, int],
) -> tuple[int, list[_T], list[_T]] | None:
    """What a compacted run's save does (see :class:`Session`): ``(upto, summary, tail)``
    for :func:`recompact`, or None when the conversation no longer holds the history the run
    loaded where it was (it was replaced or compacted since): then the run's save appends
    what it adds, its summary included if it stands for the whole history it loaded."""
    loaded, upto, summary_len = check_compacted(compacted, len(messages))
    verbatim = list(messages[summary_len : summary_len + loaded - upto])
    tail = list(messages[summary_len + loaded - upto :])
    holds = loaded <= len(current) and (loaded in (0, len(current)) or loaded in marks)
    if holds and list(current[upto:loaded]) == verbatim:
        return upto, list(messages[:summary_len]), tail
    return None


def merge_compacted(
    current: list[_T], marks: Sequence[int], messages: list[_T], compacted: tuple[int, int, int]
) -> tuple[list[_T], list[int]]:
    """The conversation a compacted run's save leaves, and its marks (see
    :func:`compacted_edit`)."""
    edit = compacted_edit(current, marks, messages, compacted)
    if edit is not None:
        return recompact(current, marks, *edit)
    return splice(current, marks, len(current), fallback_tail(messages, compacted))


def fallback_tail(messages: Sequence[_T], compacted: tuple[int, int, int]) -> list[_T]:
    """What a compacted run's save appends where its compaction no longer applies: its own
    messages, after its summary where that stands for all the history it loaded."""
    loaded, upto, summary_len = compacted
    tail = list(messages[summary_len + loaded - upto :])
    return [*messages[:summary_len], *tail] if upto == loaded else tail


def check_compacted(compacted: Any, length: int) -> tuple[int, int, int]:
    """Check a compacted run's ``(loaded, upto, summary_len)`` against its ``length``
    messages and return it.

    Raises:
        UserError: not three ints with ``0 <= upto <= loaded`` and ``summary_len +
            loaded - upto <= length``.
    """
    ok = (
        isinstance(compacted, tuple)
        and len(compacted) == 3
        and all(type(n) is int and n >= 0 for n in compacted)
    )
    if ok:
        loaded, upto, summary_len = compacted
        ok = upto <= loaded and summary_len + loaded - upto <= length
    if not ok:
        raise UserError(
            "compacted must be (loaded, upto, summary_len): ints >= 0, upto <= loaded, and "
            f"no more than the run's {length} messages in all; got {compacted!r}"
        )
    return compacted  # type: ignore[no-any-return]


def common_prefix(one: Sequence[Any], two: Sequence[Any]) -> int:
    """The length of the longest common prefix of two lists."""
    n = 0
    for a, b in zip(one, two, strict=False):
        if a != b:
            break
        n += 1
    return n
