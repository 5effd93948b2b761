"""Cluster load and what it means for capacity: the load bins (``bins``) and their tables (``bins_store``,
``jobs_store``), the recorder that fills them (``load``), the forecast (``forecast``) and the goodput advice
(``goodput``). The models they fit live in ``sentinel_models``."""
