"""The scripted fake itself: it must catch a wrong command, a wrong order, an extra and a
missing command, and show a diff."""

import time

import pytest

from hbtest.rig.scpi import ScpiLink
from hbtest.rig.scpi.link import open_resource
from hbtest.serve.scripted import Block, ScriptedInstrument, Step


def link(fake):
    return ScpiLink(open_resource(fake.resource_name, "dut", timeout_ms=300), "dut")


def test_a_correct_conversation_passes_and_is_recorded():
    with ScriptedInstrument(["A 1", Step("B?", "42"), Block("C ,")], "x") as fake:
        lk = link(fake)
        lk.write("A 1")
        assert lk.query_float("B?") == 42.0
        lk.write_block("C ,", [1, 2, 3], "h")
    assert fake.transcript() == ["A 1", "B?", "C ,#<block>"]


@pytest.mark.parametrize(
    "sent, problem",
    [
        (["A 1", "C 3"], "step 1: expected 'B 2', received 'C 3'"),  # wrong command
        (["B 2", "A 1"], "step 0: expected 'A 1', received 'B 2'"),  # wrong order
        (["A 1", "B 2", "D 4"], "extra command 'D 4'"),  # extra
        (["A 1"], "missing command"),  # missing
    ],
)
def test_deviations_fail_with_a_diff(sent, problem):
    fake = ScriptedInstrument(["A 1", "B 2"], "x").start()
    lk = link(fake)
    for cmd in sent:
        try:
            lk.write(cmd)
        except Exception:
            break
    fake.wait_done(1.0)
    time.sleep(0.15)
    fake.stop()
    with pytest.raises(AssertionError) as e:
        fake.check()
    assert problem in str(e.value)
    assert "!!" in str(e.value)  # the diff marks the deviating line


def test_bad_block_payload_is_a_deviation():
    def check(payload):
        assert payload == b"\x01\x00", "payload differs"

    fake = ScriptedInstrument([Block("C ,", check)], "x").start()
    link(fake).write_block("C ,", [2], "h")
    fake.wait_done(1.0)
    fake.stop()
    with pytest.raises(AssertionError, match="block payload"):
        fake.check()
