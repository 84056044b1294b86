"""``ratchet sim``: the whole loop (traffic, routing, nights, certificates, releases) offline in one process.

``engine.run_sim(SimConfig(...), home)`` runs it (the rules it compares are listed in ``engine``'s docstring);
``config`` holds its arguments and the task policy they sign; ``student`` the in-process students; ``receipts``
seals each day's receipt with the night's code; ``compare`` runs one seed under each release rule; ``cli.sim`` is
the command.
"""
