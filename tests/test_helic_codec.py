"""The HELIC-DAQ v3 codec against every known-answer vector of the specification
(HELIC-DAQ docs/protocol.md, "Known-answer vectors"; docs/helic.md), byte for byte, plus
round trips of what the vectors do not cover (hypothesis)."""

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hbtest.rig.helic import codec as c


def hx(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


def test_crc_vectors():
    assert c.crc16(b"123456789") == 0x29B1
    assert c.crc16(b"") == 0xFFFF
    assert c.crc16(b"\x00") == 0xE1F0


def test_get_params_request_vector():
    frame = c.encode_frame(c.MsgType.GET_PARAMS, 1, struct.pack("<H", 0))
    assert frame == hx("48 4C 01 01 02 00 00 00 89 0C")
    assert c.decode_frame(frame) == (1, 1, b"\0\0")


def test_get_sources_request_vector():
    assert c.encode_frame(c.MsgType.GET_SOURCES, 1) == hx("48 4C 02 01 00 00 98 5E")


def test_param_entry_vector():
    entry = hx("66 72 65 71 00 66 01 00 01")
    assert c.encode_param_def(c.ParamDef("freq", "f", 1, True)) == entry
    assert c.decode_param_defs(entry) == [c.ParamDef("freq", "f", 1, True)]


def test_source_entries_vector():
    entries = hx("61 64 63 30 00 56 00 6C 61 73 65 72 00 6D 6D 00")
    assert c.encode_sources([("adc0", "V"), ("laser", "mm")]) == entries
    assert c.decode_sources(entries) == [("adc0", "V"), ("laser", "mm")]


def test_set_block_request_vector():
    payload = struct.pack("<HI", 12, 0x01020304) + hx("AA BB")
    assert c.encode_frame(c.MsgType.SET_BLOCK, 2, payload) == hx("48 4C 05 02 08 00 0C 00 04 03 02 01 AA BB 39 A7")


def test_commit_request_vector():
    payload = struct.pack("<HI", 12, 0x01020304)
    assert c.encode_frame(c.MsgType.COMMIT, 3, payload) == hx("48 4C 06 03 06 00 0C 00 04 03 02 01 08 D1")


def test_status_response_vector():
    st_ = c.Status(3, 17, 13, 8000.0, 42000)
    frame = hx("48 4C 0A 01 0C 00 03 11 00 0D 00 00 FA 45 10 A4 00 00 76 0A")
    assert c.encode_frame(c.MsgType.STATUS, 1, st_.encode()) == frame
    t, seq, payload = c.decode_frame(frame)
    assert (t, seq) == (10, 1) and c.Status.decode(payload) == st_


def test_broker_info_vector():
    info = c.BrokerInfo(1, 0x1F, 0x000F, 10000, 42, 4, 0, 2, (0, 8, 12))
    payload = hx("01 1F 0F 00 10 27 00 00 2A 00 00 00 04 00 00 00 00 00 02 00 03 00 08 0C")
    assert info.encode() == payload and c.BrokerInfo.decode(payload) == info


def test_beacon_vectors():
    assert c.beacon_request() == hx("48 4C 01")
    b = c.Beacon(3, 2350, hx("02 48 4c 00 00 01"), "pico2w-rig", "helic-daq sim")
    data = hx("48 4C 02 03 2E 09 02 48 4C 00 00 01 70 69 63 6F 32 77 2D 72 69 67 00 00 00 00 00 00"
              " 68 65 6C 69 63 2D 64 61 71 20 73 69 6D 00 00 00")
    assert c.encode_beacon(b) == data and c.decode_beacon(data) == b


def test_bad_frames_are_refused():
    good = c.encode_frame(c.MsgType.STATUS, 7)
    with pytest.raises(c.CodecError):
        c.decode_frame(good[:-1] + bytes([good[-1] ^ 1]))  # CRC
    with pytest.raises(c.CodecError):
        c.decode_frame(b"\x00" + good[1:])  # magic
    r = c.FrameReader()
    r.feed(b"XX" + good[2:])
    with pytest.raises(c.CodecError):
        r.next()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=5), st.integers(0, 255))
def test_frames_survive_any_split_of_the_byte_stream(payloads, seq):
    data = b"".join(c.encode_frame(4, seq, p) for p in payloads)
    r = c.FrameReader()
    got = []
    for i in range(0, len(data), 3):
        r.feed(data[i:i + 3])
        while (f := r.next()) is not None:
            got.append(f)
    assert got == [(4, seq, p) for p in payloads]


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 8), st.integers(1, 60), st.integers(0, 2**32 - 1), st.integers(1, 100))
def test_stream_packet_round_trip(m, n, first, dec):
    rng = np.random.default_rng(m * 1000 + n)
    n = min(n, c.records_per_packet(m))
    v = rng.standard_normal((n, m)).astype(np.float32)
    p = c.decode_packet(c.encode_packet(c.StreamPacket(5, first, 3, dec, v)))
    assert (p.seq, p.first_index, p.dropped, p.decimation) == (5, first, 3, dec)
    np.testing.assert_array_equal(p.values, v)
    assert len(c.encode_packet(c.StreamPacket(0, 0, 0, 1, np.zeros((c.records_per_packet(m), m))))) <= c.MAX_DATAGRAM


def test_param_pages_never_split_a_definition():
    defs = [c.ParamDef(f"p{i:02d}_" + "x" * 18, "f", 33, True) for i in range(80)]
    start, got = 0, []
    while start < len(defs):
        s, nxt, page = c.decode_param_page(c.encode_param_page(defs, start))
        assert s == start and nxt == start + len(page) and nxt > start
        got += page
        start = nxt
    assert got == defs and c.decode_param_page(c.encode_param_page(defs, len(defs)))[2] == []
    values = np.arange(33, dtype=float)
    np.testing.assert_array_equal(c.unpack_value(defs[0], c.pack_value(defs[0], values)), values)
    text = c.ParamDef("experiment", "c", 16, False)
    assert c.unpack_value(text, c.pack_value(text, "twin")) == "twin"


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 8), st.integers(1, 12), st.integers(0, 10), st.booleans(), st.integers(0, 2**31))
def test_a_coalesced_receive_decodes_as_its_datagrams_one_by_one(m, whole, junk_at, short_last, first):
    """decode_packets (one receive of consecutive datagrams of one size, the last shorter) gives
    the headers and values that decode_packet gives datagram by datagram, without the junk."""
    rng = np.random.default_rng(m * 100 + whole)
    per = c.records_per_packet(m)
    packets = [c.StreamPacket(s, first + per * s, 7, 1, rng.standard_normal((per, m)).astype(np.float32))
               for s in range(whole)]
    if short_last:
        packets.append(c.StreamPacket(whole, first + per * whole, 7, 1, np.ones((max(1, per // 3), m), np.float32)))
    datagrams = [c.encode_packet(p) for p in packets]
    size = len(datagrams[0])
    if junk_at < whole:  # a foreign datagram of the same size (bad magic) among them
        datagrams.insert(junk_at, b"\x00" * size)
    heads, values = c.decode_packets(b"".join(datagrams), size, m)
    want = [c.decode_packet(d) for d in datagrams if d[:2] != b"\x00\x00"]
    assert heads["seq"].tolist() == [p.seq for p in want] and heads["first"].tolist() == [p.first_index for p in want]
    assert set(heads["dropped"].tolist()) <= {7} and heads["n"].tolist() == [len(p.values) for p in want]
    np.testing.assert_array_equal(values, np.concatenate([p.values for p in want]))
    assert c.decode_packets(b"".join(datagrams), size, m + 1)[0].size == 0  # another stream's layout


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 8), st.integers(1, 400), st.integers(1, 3), st.integers(0, 2**32 + 5))
def test_the_served_twins_packet_runs_are_the_datagrams_encoded_one_by_one(m, n, dec, first):
    from hbtest.serve.helic import _whole_packets

    values = np.random.default_rng(n).standard_normal((n, m)).astype(np.float32)
    idx = first + dec * np.arange(n, dtype=np.int64)
    per = c.records_per_packet(m)
    want = [c.encode_packet(c.StreamPacket(s, int(idx[i]) & 0xFFFFFFFF, 3, dec, values[i:i + per]))
            for s, i in enumerate(range(0, n, per))]
    runs = list(_whole_packets(values, idx, dec, 3))
    assert all(len({len(row) for row in run}) == 1 for run in runs)
    assert [row.tobytes() for run in runs for row in run] == want
