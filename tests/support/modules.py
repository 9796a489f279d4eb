"""Real modules from source text: declarations must live in loaded modules, so test graphs
are real, registered modules (docs/contract.md#discovery)."""

from __future__ import annotations

import sys
import textwrap
import types
from typing import Any

_module_counter = 0


def load_module(source: str, name: str | None = None) -> Any:
    """Create, execute and register (``sys.modules``) a module from source text.

    The source is dedented; each call gets a fresh unique name unless one is given.
    """
    global _module_counter
    _module_counter += 1
    module_name = name or f"sdax_test_graph_{_module_counter}"
    module = types.ModuleType(module_name)
    sys.modules[module_name] = module
    code = compile(textwrap.dedent(source), f"<{module_name}>", "exec", dont_inherit=True)
    exec(code, module.__dict__)
    return module
