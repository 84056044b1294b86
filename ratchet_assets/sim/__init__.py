"""``ratchet sim``: the whole loop (traffic, routing, nights, certificates, releases) offline in one process.

``engine.run_sim(SimConfig(...), home)`` runs it; ``student`` holds the in-process students; ``cli.sim`` is the
command.
"""
