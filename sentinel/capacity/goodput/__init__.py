"""Goodput: what interruptions cost a training job, and the checkpoint interval that minimises it.

``analytic`` holds the closed forms (Young, Daly, the availability-optimal interval, Kokolis et al.'s expected
ETTR), ``params`` the cited parameters (a scenario's ``[goodput]`` section), ``timeline`` the event-level job
simulation the benchmark runs for each system.
"""
