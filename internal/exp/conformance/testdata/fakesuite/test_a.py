# Every status unittest reports, for runsuite.py's test.
import os
import sys
import unittest

from args_parser import parser


class ATest(unittest.TestCase):
    def test_ok(self):
        """A docstring ... which run_tests.py -v would print"""
        print("printed by a test")
        print("printed by a test on stderr", file=sys.stderr)

    def test_dev(self):
        self.assertEqual(parser.args['dev'], 'fake0')
        self.assertEqual(parser.args['gid'], 3)

    def test_skip(self):
        raise unittest.SkipTest("It's \"quoted\"\nover two lines")

    def test_fail(self):
        self.assertEqual(1, 2, "one is not two")

    def test_error(self):
        try:
            raise KeyError("inner")
        except KeyError:
            raise RuntimeError("outer\nsecond line")

    @unittest.expectedFailure
    def test_xfail(self):
        self.assertTrue(False)

    @unittest.expectedFailure
    def test_xpass(self):
        pass

    def test_fork(self):
        """A child that returns into unittest instead of exiting."""
        pid = os.fork()
        if pid == 0:
            sys.exit(0)
        os.waitpid(pid, 0)


class BTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        raise unittest.SkipTest("not this class")

    def test_never(self):
        pass
