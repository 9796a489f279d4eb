"""Helpers shared by the tests (no tests live here).

- :mod:`support.driver`: run the driver on plain callables, without Hamilton.
- :mod:`support.campaign`: the fault-injection campaign's scenarios, harness and runner.
- :mod:`support.campaign_check`: the campaign's checker, one function per rule.
- :mod:`support.modules`: real, registered modules made from source text.
- :mod:`support.package_walk`: the package's modules and their imports, as the structure
  checks read them (tests/test_import_graph.py, tests/test_class_sizes.py).
"""
