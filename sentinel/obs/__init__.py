"""What a process tells its operator about itself: Prometheus metrics (``metrics``), the exporter's TLS and basic
auth (``web``), systemd readiness and watchdog (``sdnotify``) and returning freed heap to the system
(``heap_trim``). Imports only the floor (errors, events, topics)."""
