"""A sink's dataset on any file system Spark writes to: moving a staged batch's files into it,
and reading it back deduplicated by message id."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

# the field holding the spout's message id, which every bolt keeps and the sink stores
DEFAULT_ID_FIELD = "msg_id"


def move_files(spark: SparkSession, src: str, dest: str) -> int:
    """Rename every data file under `src` to the same relative path under `dest` (Hadoop
    FileSystem, so any URI Spark writes to), then delete `src`. Returns the files moved."""
    jvm: Any = spark._jvm
    hconf = spark._jsc.hadoopConfiguration()
    Path = jvm.org.apache.hadoop.fs.Path
    src_path = Path(src)
    fs = src_path.getFileSystem(hconf)
    src_root = fs.makeQualified(src_path).toUri().getPath().rstrip("/")
    dest_path = fs.makeQualified(Path(dest))
    files = fs.listFiles(src_path, True)
    moved = 0
    while files.hasNext():
        p = files.next().getPath()
        if p.getName().startswith(("_", ".")):
            continue
        rel = p.toUri().getPath()[len(src_root) + 1:]
        target = Path(dest_path, rel)
        fs.mkdirs(target.getParent())
        if not fs.rename(p, target):
            raise OSError(f"could not move {p.toString()} to {target.toString()}")
        moved += 1
    fs.delete(src_path, True)
    return moved


def read_dataset(spark: SparkSession, path: str, fmt: str = "parquet", id_field: str = DEFAULT_ID_FIELD,
                 dedup: bool = True, keys: Sequence[str] = ()) -> DataFrame:
    """A sink's dataset, deduplicated by message id (plus `keys` when one message makes several
    rows): a batch that was written and then replayed appears once."""
    df = spark.read.format(fmt).load(path)
    return df.dropDuplicates([id_field, *keys]) if dedup else df
