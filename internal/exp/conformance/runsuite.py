#!/usr/bin/env python3
# npfnic's runner of rdma-core's test suite (package
# internal/exp/conformance copies it into the guest). It does what the
# suite's run_tests.py does: the same tests package (tests/__init__.py,
# which loads every test_*.py), the same arguments (--dev, --port, --gid,
# and unittest's own, -k among them), but unittest's verbose report goes
# to a file of its own (--report FILE), where nothing a test prints can
# land, and names every test by its id: "name (tests.module.Class.name)"
# on one line, never a docstring in its place. Its first line announces
# how many tests will run.
import os
import sys
import unittest
from importlib.machinery import SourceFileLoader


# The process that runs the suite; a test's forked child that returns
# into unittest instead of exiting is not it.
OWNER = os.getpid()


class OwnedStream:
    """The report's stream, written by the owner only."""

    def __init__(self, f):
        self.f = f

    def write(self, s):
        if os.getpid() == OWNER:
            self.f.write(s)

    def flush(self):
        if os.getpid() == OWNER:
            self.f.flush()


class Result(unittest.TextTestResult):
    def stopTest(self, test):
        if os.getpid() != OWNER:
            # A forked child came back from its test: it ends here
            # rather than run the rest of the suite beside its parent.
            os._exit(0)
        super().stopTest(test)

    # Python 3.11 leaves the line open after these two, and the status of
    # a class's or module's fixture that comes next loses its name.
    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._newline = True

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._newline = True


class Runner(unittest.TextTestRunner):
    resultclass = Result

    def run(self, test):
        self.stream.writeln('conformance: %d tests' % test.countTestCases())
        self.stream.flush()
        return super().run(test)


def main():
    tests_dir = '/usr/share/doc/rdma-core/tests'
    report = None
    args = []
    argv = sys.argv[1:]
    while argv:
        a = argv.pop(0)
        if a in ('--tests-dir', '--report') and argv:
            if a == '--report':
                report = argv.pop(0)
            else:
                tests_dir = argv.pop(0)
        else:
            args.append(a)
    sys.path.insert(0, tests_dir)
    sys.argv[1:] = args
    from args_parser import parser
    tests = SourceFileLoader('tests', os.path.join(tests_dir, '__init__.py')).load_module()
    parser.parse_args()
    stream = OwnedStream(open(report, 'w', buffering=1) if report else sys.stderr)
    unittest.main(module=tests, testRunner=Runner(stream=stream, descriptions=False, verbosity=2))


if __name__ == '__main__':
    main()
