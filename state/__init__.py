"""elrwatch's domain core: records, the cluster's state and its replay, derived status, audit, gauges, the
controller model, advice, what-if, the simulator. No Spark and no I/O.

The state is split as Kafka splits its metadata image (docs/DESIGN.md): `image/` holds what every store shares
(positions, brokers, topics, configs, features), `partitions/` the partitions behind one interface with two stores:
`partitions/objects.py`, the specification, in plain Python; `partitions/columnar/`, the runtime's, on numpy and
pyarrow (the only modules here that use them). `cluster.ClusterState` puts an image and a store together.
"""
