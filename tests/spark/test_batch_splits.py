"""The scan with no shuffle (``spark_adapter.batch_splits``): when the input's partitions are
arrival ranges, each is decided where it was read, and the answer is still the engine's
(TS §5.1); when they are not, the range plan runs instead, with the same answer."""

from __future__ import annotations

import sys

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from engine.errors import InputError
from engine.times import Nanoseconds
from operators.policies import GoldilocksPolicy
from spark_support import ROW_SCHEMA, canonical_events, canonical_late, engine_replay_bytes
from test_batch_replay import _plan
from test_batch_scan import _DATA, ORDER, _split_log, write_split_log

pytestmark = pytest.mark.spark

_NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


def _scan(frame, **options):
    from spark_adapter import replay

    events, late = replay(frame, strategy="scan", **options)
    shuffled = "Exchange" in _plan(events)
    return (canonical_events(events.orderBy(*ORDER).collect()),
            canonical_late(late.orderBy(*ORDER).collect())), shuffled


@settings(phases=_NO_SHRINK, max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(files=_split_log(), delay=st.sampled_from([0, 4, 25]).map(Nanoseconds),
       on_late=st.sampled_from(["drop", "adjust"]))
def test_files_in_arrival_order_are_decided_where_read(spark, tmp_path_factory, files, delay,
                                                       on_late):
    """Files that are consecutive pieces of the log (some of one line, some without a CTI):
    one task per file, no exchange, the engine's bytes."""
    from spark_adapter import read_event_log

    tmp = tmp_path_factory.mktemp("splits")
    paths = write_split_log(tmp, files)
    want = engine_replay_bytes(paths, tmp, delay=delay, on_late=on_late)
    got, shuffled = _scan(read_event_log(spark, paths), delay=delay, on_late=on_late)
    assert got == want
    assert not shuffled  # the split plan ran: files in arrival order never need the shuffle


@pytest.mark.parametrize("which,split", [("fleet.jsonl", True), ("devices", False)])
def test_bundled_logs_equal_the_engine_with_or_without_the_shuffle(spark, tmp_path, which,
                                                                    split):
    """One file: the split plan. One file per device, their arrivals interleaved: segments
    overlap, so the range plan runs."""
    from spark_adapter import read_event_log

    paths = ([_DATA / which] if which.endswith(".jsonl")
             else sorted((_DATA / which).glob("*.jsonl")))
    for on_late in ("drop", "adjust"):
        want = engine_replay_bytes(paths, tmp_path, delay="90s", on_late=on_late)
        assert want[1]  # late events present: the comparison can fail
        got, shuffled = _scan(read_event_log(spark, paths), delay="90s", on_late=on_late)
        assert got == want
        assert shuffled is not split


def _rows(n):
    """A log as rows of ``ROW_SCHEMA`` (one group): a CTI every 5th row, times up to 40
    behind the arrival, so some inserts are late (about 5 % under delay 3)."""
    out = []
    for i in range(n):
        kind = "cti" if i % 5 == 4 else "insert"
        start = 10 * i - (i * i * 7) % 41
        out.append((0, i, f"d{i % 3}", kind, start, None, None, None, i, 0, i + 1))
    return out


def _reference(frame, **options):
    from spark_adapter import replay

    return [[tuple(r) for r in part.orderBy(*ORDER).collect()]
            for part in replay(frame, strategy="global", **options)]


def test_parquet_files_split_into_blocks_and_packed(spark, tmp_path):
    """Spark's own Parquet reader: files cut into several splits (small row groups, small
    maxPartitionBytes) and small files packed into one partition in size order, not arrival
    order: segments end at every split, and the answer is the reference plan's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = _rows(6000)
    names = [f.split()[0].strip("`") for f in ROW_SCHEMA.split(", ")]
    cuts = [0, 2500, 2501, 2600, 6000]  # a big file, a file of one row, two more
    for i, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:])):
        table = pa.Table.from_pylist([dict(zip(names, r)) for r in rows[lo:hi]])
        pq.write_table(table, tmp_path / f"part-{i}.parquet", row_group_size=300)
    old = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "8k")
    try:
        frame = spark.read.parquet(str(tmp_path)).drop("g")
        assert frame.rdd.getNumPartitions() > 4  # several splits per file
        from spark_adapter import replay

        for on_late in ("drop", "adjust"):
            events, late = replay(frame, delay=Nanoseconds(3), on_late=on_late, strategy="scan")
            assert "Exchange" not in _plan(events)  # decided where read
            got = [[tuple(r) for r in part.orderBy(*ORDER).collect()] for part in (events, late)]
            assert got == _reference(frame, delay=Nanoseconds(3), on_late=on_late)
            assert got[1]  # late rows: the comparison can fail
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", old)


_RANGE_PLAN = "shufflepartitionidpassthrough"  # the range plan's exchange, in a plan's text


def test_partitions_that_interleave_fall_back_to_the_ranges(spark):
    """Partitions by device: each in arrival order, but their spans overlap, so they are not
    ranges of the log; the range plan decides, and gives the reference's rows."""
    rows = _rows(400)
    frame = spark.createDataFrame(rows, ROW_SCHEMA).drop("g").repartition(3, "source")
    from spark_adapter import replay

    events, late = replay(frame, delay=Nanoseconds(3), strategy="scan")
    assert _RANGE_PLAN in _plan(events)
    got = [[tuple(r) for r in part.orderBy(*ORDER).collect()] for part in (events, late)]
    assert got == _reference(frame, delay=Nanoseconds(3))
    assert got[1]


@pytest.mark.parametrize("options", [pytest.param({"group_col": "g"}, id="groups"),
                                     pytest.param({}, id="no-groups")])
@pytest.mark.parametrize("strategy", ["scan", "ranges", "bucketed", "global"])
def test_a_null_order_key_is_refused(spark, options, strategy):
    """A row with no order key (a user's frame, not ``read_event_log``'s) has no place in
    arrival order: every plan refuses the frame, with and without clock groups, where the
    range plan once left it out of the events and the SQL plans sorted it first, on time.
    The scan plans count such rows on the driver; the SQL plans fail the job naming one."""
    from spark_adapter import replay

    rows = _rows(50)
    rows[10] = (*rows[10][:8], None, 0, 11)  # no order_key
    frame = spark.createDataFrame(rows, ROW_SCHEMA).drop(*([] if options else ["g"]))
    if strategy in ("scan", "ranges"):
        refused = pytest.raises(InputError, match=r"1 row\(s\) have a null order column")
    else:
        refused = pytest.raises(Exception, match=r"a row has a null order column "
                                r"\(order_key=null, file_index=0, line=11\)")
    with refused:
        events, late = replay(frame, delay=Nanoseconds(3), strategy=strategy, **options)
        events.count()
        late.count()


def test_an_input_that_changes_between_the_reads_is_refused(spark, tmp_path):
    """The split plan reads the log twice; a file rewritten in between (other rows) fails
    the job with a message naming the partition, instead of deciding from a stale summary."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from spark_adapter import replay

    names = [f.split()[0].strip("`") for f in ROW_SCHEMA.split(", ")]
    path = tmp_path / "log.parquet"

    def write(rows):
        pq.write_table(pa.Table.from_pylist([dict(zip(names, r)) for r in rows]), path)

    write(_rows(200))
    frame = spark.read.parquet(str(path)).drop("g")
    events, _ = replay(frame, delay=Nanoseconds(3), strategy="scan")
    shifted = [(*r[:8], r[8] + 1000, *r[9:]) for r in _rows(200)]
    write(shifted)
    with pytest.raises(Exception, match=r"input partition 0 changed between the two reads"):
        events.collect()


def test_write_replay_writes_what_replay_returns(spark, tmp_path):
    """Both outputs from one decision of every row: the files hold replay's two frames."""
    from spark_adapter import replay, write_replay

    frame = spark.createDataFrame(_rows(300), ROW_SCHEMA).drop("g")
    for strategy in ("scan", "bucketed"):
        out, late = tmp_path / f"{strategy}-events", tmp_path / f"{strategy}-late"
        write_replay(frame, str(out), str(late), delay=Nanoseconds(3), on_late="adjust",
                     strategy=strategy)
        got = [[tuple(r) for r in spark.read.parquet(str(p)).orderBy(*ORDER).collect()]
               for p in (out, late)]
        want = [[tuple(r) for r in part.orderBy(*ORDER).collect()]
                for part in replay(frame, delay=Nanoseconds(3), on_late="adjust",
                                   strategy="global")]
        assert got == want
        assert got[1]
    assert not spark.sparkContext._jsc.getPersistentRDDs()  # released after the writes


class _Counting(GoldilocksPolicy):
    """goldilocks that adds the rows its kernel decides to a Spark accumulator."""

    def __init__(self, delay, counter):
        super().__init__("goldilocks", delay, "drop")
        self.counter = counter

    def run_columns(self, is_cti, start, end, state=None):
        self.counter.add(len(start))
        return super().run_columns(is_cti, start, end, state)


def test_write_replay_decides_every_row_once(spark, tmp_path):
    """Writing replay's two frames runs the kernel over the log twice; write_replay, once."""
    from pyspark import cloudpickle

    from spark_adapter import replay, write_replay

    frame = spark.createDataFrame(_rows(300), ROW_SCHEMA).drop("g")
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # _Counting, to the workers
    try:
        twice = spark.sparkContext.accumulator(0)
        for part in replay(frame, policy=_Counting(3, twice)):
            part.write.format("noop").mode("overwrite").save()
        once = spark.sparkContext.accumulator(0)
        write_replay(frame, str(tmp_path / "e"), str(tmp_path / "l"),
                     policy=_Counting(3, once))
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert twice.value == 600
    assert once.value == 300


@pytest.mark.parametrize("strategy", ["scan", "ranges"])
def test_a_users_frame_ordered_by_one_column(spark, strategy):
    """A user's frame with one arrival-order column (``order_by=["seq"]``): the default plan
    and the range plan decide it as the single global window does (the check for rows
    without an order key once needed two order columns)."""
    from spark_adapter import replay

    frame = spark.createDataFrame(
        [(0, "A", "insert", 5, None, None), (1, "B", "cti", 9, None, None),
         (2, "A", "insert", 3, None, None), (3, "A", "cti", 12, None, None),
         (4, "B", "insert", 4, None, None)],
        "seq long, source string, kind string, start long, end long, payload string")
    got = [sorted(tuple(r) for r in part.collect())
           for part in replay(frame, delay=Nanoseconds(2), strategy=strategy, order_by=["seq"])]
    want = [sorted(tuple(r) for r in part.collect())
            for part in replay(frame, delay=Nanoseconds(2), strategy="global", order_by=["seq"])]
    assert got == want
    assert got[1]  # the insert at 4 after the CTI at 10 is late
