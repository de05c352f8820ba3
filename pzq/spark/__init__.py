"""pzq's archive in Spark 4: a Python Data Source named ``zper``.

    from pzq.spark import session
    spark = session("orders-report")  # or register ZperDataSource with your own session
    df = spark.read.format("zper").option("topics", "orders").load("/var/lib/pzq/archive")

- ``source``: the data source, its batch reader and ``session`` (both named here)
- ``reads``: what one read is (columns, options, partitions), for batch and stream
- ``archives``: which archive directories a read covers (one, several, a cluster's)
- ``plan``: a read's partitions, planned on the driver, cut at index entries
- ``arrow``: a partition's records as Arrow record batches, on the executors
- ``stream``: ``spark.readStream.format("zper")``, offsets per directory and topic
"""

from pzq.spark.source import ZperDataSource, session

__all__ = ["ZperDataSource", "session"]
