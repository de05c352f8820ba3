"""Helpers the tests and the soak scripts share: real daemons, fault proxies,
partition and power-cut scenarios, damaged archives, small disks."""
