import unittest


def setUpModule():
    raise RuntimeError("the module's setup broke")


class CTest(unittest.TestCase):
    def test_never(self):
        pass
