"""Helpers shared by the tests (no tests live here).

- :mod:`support.driver`: run the driver on plain callables, without Hamilton.
- :mod:`support.campaign`: the fault-injection campaign's scenarios, harness and checker.
- :mod:`support.modules`: real, registered modules made from source text.
"""
