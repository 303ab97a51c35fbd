# checks.py: the check counter of the Python oracle and end-to-end tests: check(cond, msg) counts a
# check, records and prints a failure without stopping the test, and returns cond; counts() gives
# (checks, failures) for a test's own summary; finish(name) prints the verdict and exits 1 if any failed.
import sys

fails = 0
checks = 0


def check(cond, msg):
    global fails, checks
    checks += 1
    if not cond:
        fails += 1
        print("FAIL:", msg)
    return cond


def counts():
    return checks, fails


def finish(name):
    print(f"{name}:", "OK" if fails == 0 else f"{fails} failures")
    sys.exit(1 if fails else 0)
