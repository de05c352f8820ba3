"""The benchmark behind ``pzq-bench``: real nodes on loopback, driven by load generators
in their own processes, each figure measured against a store-nothing ceiling in the
same run (``scenarios``), with the generators (``load``), the ceiling (``ceiling``),
one measurement (``measure``), nodes to measure (``nodes``) and the report (``report``).
"""
