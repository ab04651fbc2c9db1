"""Signals: the loop's inputs (log lines, scheduler snapshots) read from the outside world.

``tailer`` follows job output files, ``discovery`` turns scheduler listings into new /
changed / finished / gone jobs. Detectors (``detect/``) consume what these produce.
"""
