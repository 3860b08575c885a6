"""Session-wide fixtures. Real servers live in ``tests/services/``, one module each."""

pytest_plugins: list[str] = [
    "tests.services.zookeeper",
    "tests.services.postgres",
    "tests.services.mariadb",
    "tests.services.consul",
    "tests.services.dynamodb",
    "tests.services.spark",
]
