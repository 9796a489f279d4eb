"""Hamilton translation: the only code that touches Hamilton internals.

A ``Driver`` (``driver.py``) discovers the declarations of the supplied modules
(``discovery.py``), checks them (``signatures.py``), expands each one with Hamilton's own
decorator lifecycle (``resolve_nodes``) on a private clone (``snapshot.py``: nothing the
user can change later is referenced), checking every bound value on the way
(``bindings.py``), while interceptors record which
generated nodes call which declaration, which only project, validate or pipe a value, and
which are synthetic I/O adapters (``interceptors.py``, ``provenance.py``), then indexes the
generated nodes (``nodes.py``), places ``execution`` policies and ``shutdown`` releases on
them (``placement.py``), refuses what Spark's lazy evaluation breaks (``spark.py``) and
hands planning a table of ``NodeSpec``. Only admitted
decorators, by exact class, are translated (``admitted.py``), and only under the tested
Hamilton series (``version.py``). ``translator.py`` runs the steps in order.

Decisions where the contract is silent:

* every generated node is kept in the node table, including nodes whose name is a config
  key: planning treats such config keys as replacements. Hamilton's edge check
  (``update_dependencies``) runs on the nodes that config does not replace.
* A declaration whose function config disables (or that resolves to no node at all) is
  still checked but places nothing; a release whose owner resolves to no node is
  therefore harmless.
* A Hamilton ``OPTIONAL`` dependency without a recorded default (for example an optional
  ``load_from`` argument mapped to ``source(...)``) is an ordinary input without a default.
* A function without any Hamilton decorator is not put through ``resolve_nodes``; its node
  is built directly (``signatures.plain_node``) from the signature and type hints the
  declaration checks computed, equal field by field to what Hamilton's default lifecycle
  makes (``tests/test_hamilton_plain_nodes.py``).
"""

from __future__ import annotations
