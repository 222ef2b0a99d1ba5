"""``sattr serve``: the verdict store over HTTP, for operators and users (docs/server.md).

``app`` builds the application; ``api`` is the REST API, ``pages`` the web pages,
``metrics`` the Prometheus metrics, ``auth`` who is asking, ``state`` what routes share and
``upload`` the safe unpacking of uploaded bundles.
"""
