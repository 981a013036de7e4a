"""Names the redis-py under test in the report header: the suite runs whatever
`pip install -U redis` gave (.ci/run upgrades it), never a pinned one."""

import redis


def pytest_report_header(config):
    return f"redis-py {redis.__version__} ({redis.__file__})"
