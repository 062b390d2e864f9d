# A stand-in for rdma-core's tests/__init__.py: it loads every test_*.py
# of its folder and hands them to unittest through load_tests.
import importlib
import os


def _load_tests():
    res = []
    for fn in sorted(os.listdir(os.path.dirname(__file__))):
        if fn.endswith(".py") and fn.startswith("test_"):
            res.append(importlib.import_module("." + fn[:-3], __name__))
    return res


__test_modules__ = _load_tests()


def load_tests(loader, standard_tests, pattern):
    for mod in __test_modules__:
        standard_tests.addTests(loader.loadTestsFromModule(mod, pattern))
    return standard_tests
