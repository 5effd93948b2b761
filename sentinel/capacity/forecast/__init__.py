"""The operator's forecast: demand (``models.forecast``), risk of losing nodes, and the capacity outlook.

``risk`` turns the store's findings (or a hazard model) into P(failure within H) per node, ``outlook`` assembles
one report from the store, ``render`` prints it as a table and a terminal chart, ``plot`` draws a PNG.
"""
