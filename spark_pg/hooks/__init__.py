"""Claude Code hooks: advice before a tool call, outcome signals after it, and a warm server behind both.

``spark-pg hook pre-tool-use`` / ``post-tool-use`` (:mod:`.client`) read one hook event on stdin and print
the hook protocol's answer (:mod:`.protocol`). They ask ``spark-pg serve`` (:mod:`.server`) over a Unix
socket (:mod:`.wire`), or do the work in-process when no server runs (:mod:`.service`). What a
post-tool-use event says about earlier advice is decided in :mod:`.outcomes`.

The client side (this package's ``__init__``, :mod:`.client`, :mod:`.protocol`, :mod:`.wire`) imports only
the standard library: a hook is a new process per tool call, and its start-up is its latency.
"""
