"""Node inventories: the YAML an operator registers with ``suanli nodes add``.

``demo.yaml`` ships as package data and seeds an empty embedded server that has
no real GPUs. Declared GPUs on a ``local`` node are virtual: they exist for
placement and accounting and are labelled ``virtual`` in every listing.
"""

from suanli.inventory.schema import Inventory, NodeDecl, demo_inventory, load_inventory

__all__ = ["Inventory", "NodeDecl", "demo_inventory", "load_inventory"]
