"""How a renter reaches an instance's services: the port proxy's paths, and JupyterLab
started behind it on images that have it.

The paths live here, below the API, because the launcher needs them too: JupyterLab must
be told the path it is served under (``base_url``), and the proxy passes that path through
unchanged for it (the ``absolute`` form), since JupyterLab cannot be served with its
prefix stripped.
"""

from __future__ import annotations

JUPYTER_PORT = 8888


def proxy_path(instance_id: int, port: int, *, absolute: bool = False) -> str:
    """The path prefix of a port, with a trailing slash (JupyterLab's ``base_url``
    when ``absolute``)."""
    return f"/proxy/instances/{instance_id}/absolute/{port}/" if absolute else f"/proxy/instances/{instance_id}/{port}/"


def jupyter_command(instance_id: int) -> str:
    """JupyterLab in the background of an instance's keeper. No token of its own: the
    proxy admits only users who may see the instance."""
    return (
        f"jupyter lab --allow-root --no-browser --ip=0.0.0.0 --port={JUPYTER_PORT} --ServerApp.root_dir=/workspace "
        f"--ServerApp.base_url={proxy_path(instance_id, JUPYTER_PORT, absolute=True)} --ServerApp.token= "
        "--ServerApp.password= --ServerApp.allow_remote_access=True > /var/log/jupyterlab.log 2>&1 &"
    )
