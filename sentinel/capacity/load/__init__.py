"""Cluster load at bin resolution: what the scheduler queue and the telemetry show, recorded for forecasting.

``bins`` holds the record and the recorder, ``squeue`` reads Slurm's queue. Forecasting itself lives in
``models.forecast``; the operator view in ``sentinel.capacity.forecast``.
"""
