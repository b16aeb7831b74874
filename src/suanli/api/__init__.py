"""The HTTP API (FastAPI): thin routers over ``suanli.control`` services.

``create_app(context)`` builds the app; ``suanli.api.server`` wires a database,
backends and the control loop into a context and runs it under uvicorn.
"""

from suanli.api.app import create_app
from suanli.api.context import ServerContext

__all__ = ["ServerContext", "create_app"]
