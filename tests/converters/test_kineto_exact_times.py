"""Kineto ``ts`` / ``dur`` become nanoseconds exactly from their decimal text (issue 13): absolute
Unix microseconds with three decimals lost up to ±125 ns through float64. Both readers (the C
decoder and the msgspec reader, its oracle) give the exact value, rounded to the nearest ns with
ties to even beyond three decimals, and keep the strictness checks."""

from __future__ import annotations

import random
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest

from charllm_trace.converters import jsonframe, kineto_native, kineto_stream
from charllm_trace.converters.kineto import read_kineto
from charllm_trace.converters.kineto_times import plain_us_to_ns
from charllm_trace.core.errors import InputError


def _read(path: Path, native: bool, monkeypatch: pytest.MonkeyPatch) -> pl.DataFrame:
    jsonframe.reset()
    with monkeypatch.context() as m:
        if not native:
            m.setattr(kineto_native, "decoder", lambda: None)
        elif kineto_native.decoder() is None:
            pytest.skip("the native module is not built here")
        return read_kineto(path).events


def _write(tmp_path: Path, events: list[tuple[str, str]], head: str = "") -> Path:
    body = ",\n".join(
        f'{{"ph":"X","cat":"kernel","name":"k{i}","pid":0,"tid":7,"ts":{ts},"dur":{dur},'
        f'"args":{{"stream":7,"correlation":{i}}}}}'
        for i, (ts, dur) in enumerate(events)
    )
    p = tmp_path / "t.json"
    p.write_text("{" + head + '"traceEvents":[' + body + "]}")
    return p


def _want(text: str) -> int:
    return round(Fraction(text) * 1000)


@pytest.mark.parametrize("native", [True, False], ids=["C", "msgspec"])
def test_absolute_microseconds_with_three_decimals_are_exact(
    native: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the shape of the profile: 4,350 kernels at absolute-µs times with three decimals
    rng = random.Random(13)
    t = 1712195495519689047
    evs = []
    for _ in range(4350):
        t += rng.randrange(1, 40_000)
        evs.append((f"{t // 1000}.{t % 1000:03d}", f"{rng.randrange(1, 9_000_000) / 1000:.3f}"))
    got = _read(_write(tmp_path, evs), native, monkeypatch)
    assert got.height == 4350
    want_ts = [_want(ts) for ts, _ in evs]
    want_dur = [_want(d) for _, d in evs]
    assert got["start_ns"].to_list() == want_ts
    assert got["dur_ns"].to_list() == want_dur
    assert got["start_ns"][0] == int(evs[0][0].replace(".", ""))


# text -> exact ns (nearest, ties to even); each also read by C and msgspec alike
ODD = {
    "1712195495519689.047": 1712195495519689047,
    "1712195495519689": 1712195495519689000,
    "1694128201435418.123456789": 1694128201435418123,
    "0.0005": 0,  # 0.5 ns: a tie, to even
    "0.0015": 2,  # 1.5 ns: a tie, to even
    "0.00150001": 2,
    "0.0025": 2,  # 2.5 ns: to even
    "0.00250001": 3,
    "2.0015": 2002,
    "1.5e3": 1500000,
    "1712195495519.689047E3": 1712195495519689047,
    "17121954955196890470e-4": 1712195495519689047,
    "1e-10": 0,
    "-0.0": 0,
    "-2.5": -2500,
    "-0.0015": -2,
    "8999999999999999.999": 8999999999999999999,
    "8999999999999999.9996": 9000000000000000000,  # below 9e15 µs; rounds up to 9e18 ns
    "0.000000000000000000000000000000001": 0,
    "123456.78949999999999999999999": 123456789,
}


@pytest.mark.parametrize("native", [True, False], ids=["C", "msgspec"])
def test_odd_number_texts_read_exactly(native: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    texts = list(ODD)
    got = _read(_write(tmp_path, [(t, "1") for t in texts]), native, monkeypatch)
    assert got["start_ns"].to_list() == [ODD[t] for t in texts]
    assert [_want(t) for t in texts] == [ODD[t] for t in texts]  # the table is right
    got = _read(_write(tmp_path, [("1", t) for t in texts if not t.startswith("-")]), native, monkeypatch)
    assert got["dur_ns"].to_list() == [ODD[t] for t in texts if not t.startswith("-")]


@pytest.mark.parametrize("native", [True, False], ids=["C", "msgspec"])
def test_relative_times_with_a_base_stay_exact(
    native: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    evs = [("4458676522690.655", "18.404"), ("4458676522709.059", "0.001"), ("12.5", "3")]
    p = _write(tmp_path, evs, head='"baseTimeNanoseconds":1711964646000000000,')
    got = _read(p, native, monkeypatch)
    base = 1711964646000000000
    assert got["start_ns"].to_list() == [base + 4458676522690655, base + 4458676522709059, base + 12500]
    assert got["dur_ns"].to_list() == [18404, 1, 3000]


@pytest.mark.parametrize(
    ("ts", "dur", "msg"),
    [
        ("9000000000000000", "1", "ts is 9000000000000000, expected a number of microseconds below 9e15"),
        ("-9000000000000000.0", "1", "ts is -9000000000000000.0, expected"),
        ("1e16", "1", "ts is 1e+16, expected"),
        ("1", "-0.0004", "dur is -0.0004, expected a number of microseconds >= 0 below 9e15"),
        ("1", "-1e-9", "dur is -1e-09, expected"),
        ("1", "true", "dur is True, expected"),
        ('"12.5"', "1", "ts is '12.5', expected"),
        ("null", "1", "ts is missing, expected"),
    ],
)
@pytest.mark.parametrize("native", [True, False], ids=["C", "msgspec"])
def test_times_out_of_range_or_negative_are_one_line_errors(
    ts: str, dur: str, msg: str, native: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = _write(tmp_path, [("1", "1"), (ts, dur), ("2", "1")])
    with pytest.raises(InputError) as exc:
        _read(p, native, monkeypatch)
    assert "Kineto complete event 'k1': " + msg in str(exc.value)
    assert "\n" not in str(exc.value)


def test_c_and_msgspec_agree_on_random_number_texts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)

    def text() -> str:
        ip = str(rng.randrange(0, 10 ** rng.randrange(1, 17)))
        s = ("-" if rng.random() < 0.2 else "") + ip
        if rng.random() < 0.8:
            s += "." + "".join(rng.choice("0123456789") for _ in range(rng.randrange(1, 12)))
        if rng.random() < 0.15:
            s += rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randrange(0, 6))
        return s

    texts = [text() for _ in range(3000)]
    texts = [t for t in texts if abs(Fraction(t)) < 9 * 10**15]
    monkeypatch.setattr(kineto_stream, "BATCH", 256)
    p = _write(tmp_path, [(t, "1") for t in texts])
    c = _read(p, True, monkeypatch)["start_ns"].to_list()
    m = _read(p, False, monkeypatch)["start_ns"].to_list()
    want = [_want(t) for t in texts]
    assert c == want
    assert m == want


def test_plain_path_matches_fractions() -> None:
    texts = ["0.5", "-0.0005", "12.3455", "12.34550001", "-8999999999999999.9995", "9000000000000000.5"]
    out = plain_us_to_ns(pl.Series(texts + ["x", "1e3", ""]))
    assert out["ns"].to_list() == [_want(t) for t in texts[:5]] + [None] * 4  # None: the per-value path
    assert out["ns"].to_list()[:4] == [500, 0, 12346, 12346]
    assert out["negative"].to_list() == [False, True, False, False, True, False, False, False, False]
