"""The streaming job's local-mode accelerators, each an optimisation the job is correct without:

* ``accelerators.py``: the one switch: which accelerators apply to a run, and the points where the query's wiring
  calls them; ``tuning.py``: their knobs;
* ``warm.py``: keeping Spark's Python workers alive through quiet periods;
* ``jvm_archive.py``: the archive of Spark's JVM classes that makes a restart cheaper;
* ``memory.py``: the cyclic GC paused during batches and freed heap given back to the OS.
"""
