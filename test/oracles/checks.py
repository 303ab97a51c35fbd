# checks.py: the failure counter of the Python end-to-end tests (test_bench_outputs.py,
# test_train_outputs.py): check(cond, msg) records and prints a failure without stopping the test;
# finish(name) prints the verdict and exits 1 if any check failed.
import sys

fails = 0


def check(cond, msg):
    global fails
    if not cond:
        fails += 1
        print("FAIL:", msg)


def finish(name):
    print(f"{name}:", "OK" if fails == 0 else f"{fails} failures")
    sys.exit(1 if fails else 0)
