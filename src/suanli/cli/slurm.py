"""``suanli slurm``: look at a Slurm cluster the way Suanli's Slurm backend sees it.

``suanli slurm inventory`` prints the nodes ``sinfo --json`` reports as a Suanli
inventory (typed GPUs, shards per GPU, CPUs, memory), ready for ``suanli nodes add``;
``suanli nodes add --backend slurm`` registers it in one step. The command runs where
the Slurm client tools and ``slurm.conf`` are (``--slurm-conf`` or ``$SLURM_CONF``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
import yaml

app = typer.Typer(help="Slurm clusters as Suanli's Slurm backend sees them.", no_args_is_help=True)


def slurm_inventory(slurm_conf: Path | None = None) -> dict[str, Any]:
    """The cluster's nodes as an inventory document (what ``POST /v1/nodes`` takes)."""
    from suanli.backends.base import BackendError
    from suanli.backends.slurm import SlurmBackend, SlurmClient, SlurmError

    client = SlurmClient(slurm_conf=slurm_conf) if slurm_conf else SlurmClient.from_env()
    if not client.ping():
        conf = slurm_conf or "$SLURM_CONF / the system default"
        raise typer.BadParameter(f"no Slurm controller answers `scontrol ping` (slurm.conf: {conf})", param_hint="--slurm-conf")
    import tempfile

    with tempfile.TemporaryDirectory(prefix="suanli-slurm-") as root:
        try:
            inv = SlurmBackend(client, Path(root)).discover_inventory()
        except (BackendError, SlurmError) as exc:
            raise typer.BadParameter(str(exc), param_hint="--slurm-conf") from None
    return inv.model_dump(mode="json", exclude_defaults=False)


@app.callback()
def slurm() -> None:
    """Slurm clusters as Suanli's Slurm backend sees them."""


@app.command("inventory")
def inventory(
    slurm_conf: Path = typer.Option(
        None, "--slurm-conf", exists=True, dir_okay=False, help="slurm.conf of the cluster [default: $SLURM_CONF]."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of YAML."),
) -> None:
    """Print the cluster's nodes as an inventory for `suanli nodes add`."""
    doc = slurm_inventory(slurm_conf)
    typer.echo(json.dumps(doc, indent=2) if as_json else yaml.safe_dump(doc, sort_keys=False))
