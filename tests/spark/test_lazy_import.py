"""``import spark_adapter`` needs no pyspark: only the names that use Spark import it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.spark

_BLOCKED = textwrap.dedent("""
    import sys

    class Block:  # behave as if pyspark were not installed
        def find_spec(self, name, path=None, target=None):
            if name == "pyspark" or name.startswith("pyspark."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    sys.meta_path.insert(0, Block())
    import spark_adapter
    from spark_adapter import EVENT_LOG_SCHEMA, cti_to_watermark_ms
    assert cti_to_watermark_ms(2_000_000) == 1 and "order_key" in EVENT_LOG_SCHEMA
    assert not [m for m in sys.modules if m.split(".")[0] == "pyspark"], "pyspark imported"
    try:
        spark_adapter.replay
    except ModuleNotFoundError as err:
        print("replay needs", err.name.split(".")[0])
""")


def test_import_spark_adapter_works_without_pyspark():
    done = subprocess.run([sys.executable, "-c", _BLOCKED], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "replay needs pyspark"


def test_the_package_surface_resolves_lazily():
    import spark_adapter

    assert set(spark_adapter.__all__) <= set(dir(spark_adapter))
    with pytest.raises(AttributeError):
        spark_adapter.no_such_name  # noqa: B018
