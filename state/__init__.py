"""elrwatch's domain core: records, cluster state, replay, derived status, controller model, advice, audit.

No Spark: nothing here imports pyspark.
"""
