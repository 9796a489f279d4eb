"""docs/contract.md#acquisition: the ``Acquisition[T]`` record a release receives."""

from __future__ import annotations

import dataclasses
from typing import Any, Generic, Optional, TypedDict, get_args, get_origin

import pytest

from sdax_hamilton._declarations import Acquisition


class Connection:
    def __init__(self, secret: str = "") -> None:
        self.secret = secret

    def __repr__(self) -> str:
        return f"Connection({self.secret})"


class Row(TypedDict):
    id: int


# --------------------------------------------------------------------------------------------
# The three observable cases
# --------------------------------------------------------------------------------------------


def test_empty_record_no_value() -> None:
    empty: Acquisition[Connection] = Acquisition()
    assert empty.has_value is False
    assert empty.is_valid is False
    with pytest.raises(ValueError, match="no value"):
        _ = empty.raw_value
    with pytest.raises(TypeError, match="inspect raw_value"):
        _ = empty.value


def test_empty_record_with_declared_type_has_no_value() -> None:
    empty: Acquisition[Connection] = Acquisition()
    assert repr(empty) == "Acquisition[Any](no value)"


def test_returned_object_failing_its_annotation() -> None:
    wrong = object()
    record: Acquisition[Connection] = Acquisition(wrong, Connection)
    assert record.has_value is True
    assert record.is_valid is False
    assert record.raw_value is wrong
    with pytest.raises(TypeError, match="inspect raw_value") as info:
        _ = record.value
    assert "Connection" in str(info.value)


def test_returned_valid_object() -> None:
    connection = Connection()
    record: Acquisition[Connection] = Acquisition(connection, Connection)
    assert record.has_value is True
    assert record.is_valid is True
    assert record.raw_value is connection
    assert record.value is connection


def test_returned_none_counts_as_a_value() -> None:
    valid: Acquisition[None] = Acquisition(None, None)
    assert valid.has_value is True
    assert valid.is_valid is True
    assert valid.raw_value is None
    assert valid.value is None

    invalid: Acquisition[Connection] = Acquisition(None, Connection)
    assert invalid.has_value is True
    assert invalid.is_valid is False
    assert invalid.raw_value is None
    with pytest.raises(TypeError, match="inspect raw_value"):
        _ = invalid.value

    optional: Acquisition[Connection | None] = Acquisition(None, Optional[Connection])  # noqa: UP045
    assert optional.is_valid is True
    assert optional.value is None


def test_declared_type_defaults_to_any() -> None:
    payload = object()
    record: Acquisition[Any] = Acquisition(payload)
    assert record.is_valid is True
    assert record.value is payload


@pytest.mark.parametrize(
    ("value", "declared", "valid"),
    [
        (1, float, True),  # PEP 484 promotion, as everywhere else
        (True, int, True),
        ("1", int, False),
        ([1, 2], list[int], True),
        ([1, "2"], list[int], False),
        ({"id": 1}, Row, True),
        ({"id": "1"}, Row, False),
        ({}, Row, False),
        ((1, "a"), tuple[int, str], True),
        (b"x", object, True),
    ],
    ids=repr,
)
def test_is_valid_uses_the_runtime_type_check(value: Any, declared: Any, valid: bool) -> None:
    record: Acquisition[Any] = Acquisition(value, declared)
    assert record.is_valid is valid
    if valid:
        assert record.value is value
    else:
        with pytest.raises(TypeError, match="inspect raw_value"):
            _ = record.value
    assert record.raw_value is value


def test_is_valid_is_computed_on_every_access() -> None:
    rows: list[Any] = [1, 2]
    record: Acquisition[list[int]] = Acquisition(rows, list[int])
    assert record.is_valid is True
    rows.append("three")
    assert record.is_valid is False
    with pytest.raises(TypeError, match="inspect raw_value"):
        _ = record.value
    rows.pop()
    assert record.is_valid is True
    assert record.value is rows


# --------------------------------------------------------------------------------------------
# Generic, frozen, slotted dataclass with two private fields
# --------------------------------------------------------------------------------------------


def test_generic_alias_origin_and_args() -> None:
    assert get_origin(Acquisition[Connection]) is Acquisition
    assert get_args(Acquisition[Connection]) == (Connection,)
    assert get_args(Acquisition[list[int]]) == (list[int],)
    assert issubclass(Acquisition, Generic)


def test_is_a_frozen_slotted_dataclass_with_two_private_fields() -> None:
    assert dataclasses.is_dataclass(Acquisition)
    fields = dataclasses.fields(Acquisition)
    assert len(fields) == 2
    assert all(field.name.startswith("_") for field in fields)
    record: Acquisition[Connection] = Acquisition(Connection(), Connection)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record._raw = 1  # type: ignore[misc]
    with pytest.raises(AttributeError):
        record.extra = 1  # type: ignore[attr-defined]
    assert not hasattr(record, "__dict__")


def test_positional_construction_is_what_the_driver_uses() -> None:
    connection = Connection()
    record: Acquisition[Connection] = Acquisition(connection, Connection)
    assert record.raw_value is connection
    assert Acquisition().has_value is False


def test_properties_are_read_only() -> None:
    record: Acquisition[int] = Acquisition(1, int)
    for name in ("has_value", "raw_value", "is_valid", "value"):
        with pytest.raises(AttributeError):
            setattr(record, name, 2)


# --------------------------------------------------------------------------------------------
# repr never shows the value (it may be a secret)
# --------------------------------------------------------------------------------------------


def test_repr_shows_type_and_state_but_never_the_value() -> None:
    secret = "hunter2-password"
    valid: Acquisition[Connection] = Acquisition(Connection(secret), Connection)
    invalid: Acquisition[Connection] = Acquisition(secret, Connection)
    empty: Acquisition[Connection] = Acquisition()
    assert repr(valid) == "Acquisition[Connection](valid)"
    assert repr(invalid) == "Acquisition[Connection](invalid)"
    assert repr(empty) == "Acquisition[Any](no value)"
    assert repr(Acquisition[list[int]]([1], list[int])) == "Acquisition[list[int]](valid)"
    for record in (valid, invalid):
        assert secret not in repr(record)
        assert secret not in str(record)


def test_value_errors_never_show_the_value() -> None:
    secret = "hunter2-password"
    invalid: Acquisition[Connection] = Acquisition(secret, Connection)
    with pytest.raises(TypeError) as info:
        _ = invalid.value
    assert secret not in str(info.value)
