"""The ``sentinel`` command: ``main`` parses and dispatches, ``verbs/`` holds one module per area, ``demo`` and
``install`` are the two verbs with a body of their own. The top of the graph: nothing in the product imports it."""
