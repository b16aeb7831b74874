"""The HTTP API (FastAPI): thin routers over ``suanli.control`` services.

``suanli.api.app.create_app(context)`` builds the app; ``suanli.api.server``
wires a database, backends and the control loop into a context and runs it
under uvicorn. Nothing is imported here, so the CLI can use small pieces (error
formatting) without loading the web stack.
"""
