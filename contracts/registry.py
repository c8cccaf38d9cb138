"""event_type -> payload model and version; ``decode`` and ``encode`` of whole records.

``decode(data)`` order of checks (the first failing one is the reason):

1. ``too_large``: more than :data:`MAX_RECORD_BYTES` bytes (before parsing);
2. ``not_json`` / ``not_an_object``: one parse of the UTF-8 JSON text;
3. ``invalid_envelope``: ``event_type`` missing or not a string;
4. ``unknown_event_type``: no payload model registered for it;
5. ``invalid_envelope`` / ``invalid_payload``: pydantic validation of the envelope with its typed
   payload (an envelope error wins when both are present; a payload that is missing or not an
   object is an envelope error);
6. U+0000 in any string or member name: ``invalid_payload`` inside the payload,
   ``invalid_envelope`` outside it;
7. the type's wire checks on the payload object as parsed: for failure clusters a non-integer
   number or nesting deeper than 64 levels is ``invalid_payload`` and a wrong ``snapshot_hash``
   is ``hash_mismatch``;
8. ``key_mismatch``: ``idempotency_key`` differs from the key the type derives from its payload.

``check_record_key(envelope, key)`` is the last step, over the Kafka record key:
9. ``record_key_mismatch``: the key is null, empty, or not the UTF-8 bytes of the key the type
   derives from its payload. ``decode_record(value, key)`` runs all nine (the consumer engine's
   decode step), taking the expected key from the payload as written where the type says how;
   a null value (a tombstone) is ``not_json`` there.

``decode`` raises nothing but :class:`DecodeError` for any input (fuzz-tested), so a poison
record can always be dead-lettered.

``encode(envelope)`` writes the envelope as JSON (UTF-8, timestamps and UUIDs in their wire form,
unknown fields kept) and by default decodes the result before returning it, raising the same
:class:`DecodeError` a consumer would: no producer can publish a record consumers refuse.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final, NoReturn, TypeVar, cast
from uuid import UUID

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from contracts.envelope import EventEnvelope
from contracts.errors import DecodeError, DecodeReason, location, validation_errors
from contracts.spec import EventSpec
from contracts.wire import MAX_RECORD_BYTES, find_nul, parse_json_object

P = TypeVar("P", bound=BaseModel)

TOMBSTONE_DETAIL: Final = "the record has no value (null: a tombstone); no event is in it"
_MAX_ERRORS_SHOWN: Final = 3
_MAX_ECHO_CHARS: Final = 200

Reading = tuple[Any, str, "str | UUID", str, "EventEnvelope[Any] | None"]
"""What :meth:`EventRegistry.read_record` returns: ``(payload, idempotency_key, event_id,
event_type, envelope)`` (a plain tuple: it is built for every record a consumer reads)."""

ViewReader = Callable[[bytes, "bytes | None"], "tuple[Any, str, str] | None"]
"""An ``EventSpec.read_view``: the fast path from a record's value and key to its view."""


class EventRegistry:
    """An immutable set of event specs, with decode and encode over them."""

    __slots__ = ("_readers", "_readers_of", "_specs")

    def __init__(self, specs: Iterable[EventSpec[Any]]) -> None:
        table: dict[str, EventSpec[Any]] = {}
        for spec in specs:
            if spec.event_type in table:
                raise ValueError(f"event type {spec.event_type!r} registered twice")
            table[spec.event_type] = spec
        self._specs = table
        self._readers: tuple[tuple[str, ViewReader], ...] = tuple(
            (name, spec.read_view) for name, spec in table.items() if spec.read_view is not None
        )
        """The fast paths of the types that offer views (``EventSpec.read_view``)."""
        self._readers_of: dict[str, tuple[tuple[str, ViewReader], ...]] = {
            name: ((name, read),) for name, read in self._readers
        }

    def event_types(self) -> tuple[str, ...]:
        """Registered event types, sorted."""
        return tuple(sorted(self._specs))

    def specs(self) -> tuple[EventSpec[Any], ...]:
        """Registered specs, sorted by event type."""
        return tuple(self._specs[name] for name in sorted(self._specs))

    def spec(self, event_type: str) -> EventSpec[Any]:
        """The spec of ``event_type``; KeyError when it is not registered."""
        return self._specs[event_type]

    def decode(self, data: bytes) -> EventEnvelope[Any]:
        """Bytes of one record value -> a validated envelope, or DecodeError with the reason."""
        return self._decode(data)[0]

    def _decode(self, data: bytes) -> tuple[EventEnvelope[Any], EventSpec[Any], dict[str, Any]]:
        """``decode``, also returning the spec and the raw payload object (for the record key)."""
        return self._decode_parsed(data, parse_json_object(data))

    def _decode_parsed(
        self, data: bytes, obj: dict[str, Any]
    ) -> tuple[EventEnvelope[Any], EventSpec[Any], dict[str, Any]]:
        """``_decode`` of ``data`` parsed as ``obj`` (by :func:`parse_json_object`)."""
        event_type = obj.get("event_type")
        if type(event_type) is not str:
            raise DecodeError(DecodeReason.INVALID_ENVELOPE, "event_type: missing or not a string")
        spec = self._specs.get(event_type)
        if spec is None:
            raise DecodeError(
                DecodeReason.UNKNOWN_EVENT_TYPE,
                f"no payload model is registered for {_echo(event_type)}",
            )
        try:  # model_validate minus its Python frame and keyword defaults (~0.3 us a record)
            validator = spec.envelope_model.__pydantic_validator__
            envelope: EventEnvelope[Any] = validator.validate_python(obj)
        except ValidationError as exc:
            failure = _validation_failure(exc, event_type)
            if failure.reason is DecodeReason.INVALID_PAYLOAD:
                _refuse_nul_outside_payload(data, obj, event_type)  # an envelope error wins
            raise failure from None
        nul = find_nul(data, obj)
        if nul is not None:
            if _in_payload(nul):
                _refuse_nul_outside_payload(data, obj, event_type)  # an envelope error wins
            raise _nul_failure(nul, event_type)
        raw = obj["payload"]
        if spec.verify_wire is not None:
            spec.verify_wire(raw, envelope.payload)
        if spec.wire_idempotency_key is not None:
            expected = spec.wire_idempotency_key(raw, envelope.payload)
        else:
            expected = spec.idempotency_key(envelope.payload)
        if envelope.idempotency_key != expected:
            raise DecodeError(
                DecodeReason.KEY_MISMATCH,
                f"idempotency_key is {_echo(envelope.idempotency_key)}, "
                f"{event_type} derives {expected!r}",
                event_type=event_type,
            )
        return envelope, spec, raw

    def check_record_key(self, envelope: EventEnvelope[Any], key: bytes | None) -> None:
        """DecodeError ``record_key_mismatch`` unless ``key`` is the record key of ``envelope``."""
        expected = self.record_key(envelope)
        if key != expected:
            _refuse_record_key(envelope, key, expected)

    def decode_record(self, value: bytes | None, key: bytes | None) -> EventEnvelope[Any]:
        """A whole Kafka record as a consumer reads it: ``decode`` the value, then check the key
        (from the payload as written when the type says how: no UUID is turned back into text).
        A null value (a tombstone) is ``not_json``: the topics are not compacted, and a record
        without a value carries no event.
        """
        if value is None:
            raise DecodeError(DecodeReason.NOT_JSON, TOMBSTONE_DETAIL)
        envelope, spec, raw = self._decode(value)
        self._check_wire_key(envelope, spec, raw, key)
        return envelope

    def view_reader(self, event_type: str) -> ViewReader | None:
        """The fast path of ``event_type`` (its spec's ``read_view``), or None when the type
        offers no view (or is not registered). A caller that knows the type of its records
        (a consumer knows it from the topic) may try it first and call :meth:`read_record`
        with ``fast=False`` when it returns None: together they are :meth:`read_record`."""
        spec = self._specs.get(event_type)
        return None if spec is None else spec.read_view

    def read_record(
        self,
        value: bytes | None,
        key: bytes | None,
        event_type: str | None = None,
        *,
        fast: bool = True,
    ) -> Reading:
        """``decode_record``'s verdict on a whole Kafka record (the same refusals, raised as the
        same :class:`DecodeError`), read as a consumer's handlers want it: ``(payload,
        idempotency_key, event_id, event_type, envelope)``.

        ``payload`` is the type's view when its spec offers one (``EventSpec.read_view``), else
        the pydantic payload. A record in the form spectral writes is checked and read straight
        from its bytes without building the envelope model (``envelope`` is None then:
        :meth:`decode` of the same bytes gives it to whoever asks); anything else takes the full
        decode, which also words every refusal. ``event_id`` is the wire text on the fast path,
        a UUID otherwise. ``event_type``: the type the record is expected to be (a consumer
        knows it from the topic): only that type's fast path is tried (every type's when None).
        ``fast=False``: no fast path is tried (the caller tried :meth:`view_reader`'s).
        """
        if value is None:
            raise DecodeError(DecodeReason.NOT_JSON, TOMBSTONE_DETAIL)
        if not fast:
            readers: tuple[tuple[str, ViewReader], ...] = ()
        elif event_type is None:
            readers = self._readers
        else:
            readers = self._readers_of.get(event_type, ())
        for name, read_view in readers:
            found = read_view(value, key)
            if found is not None:
                view, idempotency_key, event_id = found
                return view, idempotency_key, event_id, name, None
        envelope, spec, raw = self._decode(value)
        self._check_wire_key(envelope, spec, raw, key)
        payload = envelope.payload if spec.view_of is None else spec.view_of(envelope, raw)
        return payload, envelope.idempotency_key, envelope.event_id, spec.event_type, envelope

    def _check_wire_key(
        self,
        envelope: EventEnvelope[Any],
        spec: EventSpec[Any],
        raw: dict[str, Any],
        key: bytes | None,
    ) -> None:
        """``record_key_mismatch`` unless ``key`` is the record key of the decoded record
        (taken from the payload as written when the type says how)."""
        if spec.wire_record_key is not None:
            expected = spec.wire_record_key(raw, envelope.payload).encode()
        else:
            expected = spec.record_key(envelope.payload).encode()
        if key != expected:
            _refuse_record_key(envelope, key, expected)

    def decode_as(self, data: bytes, payload_type: type[P]) -> EventEnvelope[P]:
        """``decode``, then ``unknown_event_type`` unless the payload is a ``payload_type``."""
        envelope = self.decode(data)
        if not isinstance(envelope.payload, payload_type):
            raise DecodeError(
                DecodeReason.UNKNOWN_EVENT_TYPE,
                f"expected a {payload_type.__name__} event, got {envelope.event_type}",
                event_type=envelope.event_type,
            )
        return cast("EventEnvelope[P]", envelope)

    def encode(self, envelope: EventEnvelope[Any], *, verify: bool = True) -> bytes:
        """The record value of ``envelope`` (UTF-8 JSON); checked by decoding unless ``verify``
        is false (then the caller vouches for it, e.g. a benchmark re-encoding decoded events).
        """
        spec = self._specs.get(envelope.event_type)
        if spec is None:
            raise DecodeError(
                DecodeReason.UNKNOWN_EVENT_TYPE,
                f"no payload model is registered for {_echo(envelope.event_type)}",
            )
        if not isinstance(envelope.payload, spec.payload_model):
            raise DecodeError(
                DecodeReason.INVALID_PAYLOAD,
                f"{envelope.event_type} carries {spec.payload_model.__name__}, "
                f"not {type(envelope.payload).__name__}",
                event_type=envelope.event_type,
            )
        # The spec's parametrized envelope model serializes the payload with its own field
        # serializers (serialize_as_any would fall back to pydantic's default datetime form,
        # which drops a zero fraction and so changes the hashed bytes).
        try:
            data = spec.envelope_model.__pydantic_serializer__.to_json(envelope)
        except PydanticSerializationError as exc:  # e.g. unknown fields nested absurdly deep
            raise DecodeError(
                DecodeReason.INVALID_ENVELOPE,
                f"cannot be written as JSON: {exc}",
                event_type=envelope.event_type,
            ) from None
        if verify:
            self.decode(data)
        return data

    def record_key(self, envelope: EventEnvelope[Any]) -> bytes:
        """The Kafka record key: the entity the event is about (cluster_id, lock scope, ...).

        KeyError when the event type is not registered.
        """
        return self._specs[envelope.event_type].record_key(envelope.payload).encode()


def envelope_headers(envelope: EventEnvelope[Any]) -> list[tuple[str, bytes]]:
    """Kafka headers repeating ``event_type`` and ``idempotency_key`` (UTF-8)."""
    return [
        ("event_type", envelope.event_type.encode()),
        ("idempotency_key", envelope.idempotency_key.encode()),
    ]


def _refuse_record_key(
    envelope: EventEnvelope[Any], key: bytes | None, expected: bytes
) -> NoReturn:
    if key is None:
        problem = "the record has no key (null)"
    elif not key:
        problem = "the record key is empty"
    else:
        problem = f"the record key is {_echo_bytes(key)}"
    raise DecodeError(
        DecodeReason.RECORD_KEY_MISMATCH,
        f"{problem}; {envelope.event_type} records are keyed {expected.decode()!r}",
        event_type=envelope.event_type,
    )


def _validation_failure(exc: ValidationError, event_type: str) -> DecodeError:
    errors = validation_errors(exc)
    envelope_errors = [e for e in errors if not _is_payload_error(e["loc"], e["type"])]
    chosen = envelope_errors or errors
    reason = DecodeReason.INVALID_ENVELOPE if envelope_errors else DecodeReason.INVALID_PAYLOAD
    shown = "; ".join(f"{location(e['loc'])}: {e['msg']}" for e in chosen[:_MAX_ERRORS_SHOWN])
    more = len(chosen) - _MAX_ERRORS_SHOWN
    detail = f"{shown} (and {more} more)" if more > 0 else shown
    return DecodeError(reason, detail, event_type=event_type)


def _nul_failure(path: str, event_type: str) -> DecodeError:
    return DecodeError(
        DecodeReason.INVALID_PAYLOAD if _in_payload(path) else DecodeReason.INVALID_ENVELOPE,
        f"{path.replace('$.', '', 1)}: a string holds U+0000, which the contract refuses",
        event_type=event_type,
    )


def _refuse_nul_outside_payload(data: bytes, obj: dict[str, Any], event_type: str) -> None:
    """``invalid_envelope`` when a string outside the payload holds U+0000 (only called once a
    payload error was found: the spec ranks every envelope error above every payload error)."""
    nul = find_nul(data, {name: value for name, value in obj.items() if name != "payload"})
    if nul is not None:
        raise _nul_failure(nul, event_type)


_PAYLOAD_ITSELF: Final = frozenset({"missing", "model_type"})
"""Error types at ``payload`` itself that are the envelope's: the member is missing or its value
is not an object (null, an array, a string, a number). The envelope's rule for ``payload`` is
"an object"; the payload model's rules apply to what is inside it (a model-level rule such as
first <= last is reported at ``payload`` too, and stays a payload error)."""


def _is_payload_error(loc: tuple[int | str, ...], kind: str) -> bool:
    return bool(loc) and loc[0] == "payload" and not (len(loc) == 1 and kind in _PAYLOAD_ITSELF)


def _in_payload(path: str) -> bool:
    return path.startswith("$.payload") and path[len("$.payload") : len("$.payload") + 1] in (
        "",
        ".",
        "[",
        " ",
    )


def _echo_bytes(data: bytes) -> str:
    """Untrusted bytes shown as text when they are UTF-8, cut short."""
    try:
        return _echo(data.decode())
    except UnicodeDecodeError:
        return repr(data[:_MAX_ECHO_CHARS])


def _echo(text: str) -> str:
    """Untrusted text quoted and cut short for error details."""
    return repr(text if len(text) <= _MAX_ECHO_CHARS else text[:_MAX_ECHO_CHARS] + "...")


__all__ = [
    "MAX_RECORD_BYTES",
    "EventRegistry",
    "envelope_headers",
]
