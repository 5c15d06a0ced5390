"""The payloads of llmload's own master/worker messages (``llmload.edge.messages``): typed, same bytes as before."""

from __future__ import annotations

import msgpack
import pytest

from llmload.edge.messages import DONE, FINAL, FLUSH, LIVE, SHARE, DoneMessage, FlushMessage


def _frame(msg_type: str, data: object, node_id: str) -> bytes:
    """A message as Locust's RPC puts it on the connection (``locust.rpc.protocol.Message.serialize``)."""
    return msgpack.dumps((msg_type, data, node_id))


@pytest.mark.parametrize(
    ("msg_type", "message"), [(DONE, DoneMessage("3f2a9c01b7de")), (FLUSH, FlushMessage("3f2a9c01b7de"))]
)
def test_typed_message_bytes_equal_the_plain_dict_earlier_versions_sent(msg_type: str, message: object) -> None:
    assert isinstance(message, DoneMessage | FlushMessage)
    assert _frame(msg_type, message.to_wire(), "worker-0") == _frame(msg_type, {"run_id": "3f2a9c01b7de"}, "worker-0")


def test_done_message_round_trips_through_msgpack() -> None:
    raw = msgpack.loads(msgpack.dumps(DoneMessage("run-1").to_wire()))
    assert DoneMessage.from_wire(raw) == DoneMessage("run-1")


@pytest.mark.parametrize("payload", [None, "run-1", {}, {"run_id": 7}, {"run_id": None}, ["run-1"]])
def test_done_message_without_a_run_id_reads_as_none(payload: object) -> None:
    assert DoneMessage.from_wire(payload) is None


def test_message_names_are_distinct_and_prefixed() -> None:
    names = [SHARE, LIVE, DONE, FLUSH, FINAL]
    assert len(set(names)) == len(names)
    assert all(name.startswith("llmload_") for name in names)
