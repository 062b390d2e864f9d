# A stand-in for rdma-core's tests/args_parser.py (the same interface):
# it takes the suite's own arguments and leaves unittest's in sys.argv.
import argparse
import sys


class ArgsParser(object):
    def __init__(self):
        self.args = None

    def parse_args(self):
        p = argparse.ArgumentParser()
        p.add_argument('--dev')
        p.add_argument('--port', type=int, default=1)
        p.add_argument('--gid', type=int)
        ns, args = p.parse_known_args()
        self.args = vars(ns)
        sys.argv[1:] = args


parser = ArgsParser()
