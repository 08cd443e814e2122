"""`elrwatch bridge`: publish a live Kafka cluster's metadata to elrwatch's event topic.

* ``metadata_log``: the pure decoder of ``__cluster_metadata`` files (record batches → metadata record JSON);
* ``logtail``: follows a node's metadata log directory (snapshot, segments, appends, divergence);
* ``admin``: polls a cluster through the admin API and derives records from what changed;
* ``runner``: publishing, restart state, error counters and the loop the CLI runs.
"""
