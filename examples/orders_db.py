"""The example orders database behind the tools ``db.query_orders`` and ``db.mark_shipped``.

The gateway calls ``seed(url)`` when the connection ``orders`` of ``toolgate.yaml`` names this
file as its ``seed`` and the database file does not exist yet, so ``make run`` starts with it.
To (re)create it by hand::

    .venv/bin/python examples/orders_db.py [PATH]      # default: var/examples/orders.db

The data is deterministic: order ``n`` has the same customer, status and total on every run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import sqlalchemy as sa

SCHEMA = (
    """
    CREATE TABLE orders (
        id          INTEGER PRIMARY KEY,
        customer    VARCHAR(100) NOT NULL,
        status      VARCHAR(20)  NOT NULL
                    CHECK (status IN ('pending', 'paid', 'shipped', 'cancelled')),
        total_cents INTEGER      NOT NULL CHECK (total_cents >= 0),
        carrier     VARCHAR(20),
        tracking    VARCHAR(40),
        shipped_by  VARCHAR(100),
        version     INTEGER      NOT NULL DEFAULT 1,
        created_at  VARCHAR(32)  NOT NULL,
        updated_at  VARCHAR(32)  NOT NULL
    )
    """,
    "CREATE INDEX orders_status ON orders (status)",
    "CREATE INDEX orders_customer ON orders (customer)",
)
CUSTOMERS = ("acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "wonka")
STATUSES = ("paid", "pending", "paid", "shipped", "paid", "cancelled", "shipped", "paid")
CARRIERS = ("dhl", "ups", "fedex")
ORDER_COUNT = 40
DEFAULT_PATH = Path(__file__).resolve().parent.parent / "var" / "examples" / "orders.db"


def orders() -> list[dict[str, object]]:
    """The seeded rows: ORDER_COUNT orders, half of them paid and ready to ship."""
    rows = []
    for n in range(1, ORDER_COUNT + 1):
        status = STATUSES[n % len(STATUSES)]
        shipped = status == "shipped"
        stamp = f"2026-01-{1 + n % 28:02d}T{8 + n % 10:02d}:00:00Z"
        rows.append(
            {
                "id": n,
                "customer": CUSTOMERS[n % len(CUSTOMERS)],
                "status": status,
                "total_cents": 1000 + (n * 737) % 25000,
                "carrier": CARRIERS[n % len(CARRIERS)] if shipped else None,
                "tracking": f"TRK-{n:05d}" if shipped else None,
                "shipped_by": "seed" if shipped else None,
                "created_at": stamp,
                "updated_at": stamp,
            }
        )
    return rows


def seed(url: str) -> None:
    """Create the schema and the example orders in the (empty) database at ``url``."""
    engine = sa.create_engine(url)
    try:
        if engine.dialect.name == "sqlite":
            with engine.connect() as conn:  # WAL: readers and the writer do not block
                conn.exec_driver_sql("PRAGMA journal_mode = WAL")
        with engine.begin() as conn:
            for ddl in SCHEMA:
                conn.exec_driver_sql(ddl)
            conn.execute(
                sa.text(
                    "INSERT INTO orders (id, customer, status, total_cents, carrier, tracking,"
                    " shipped_by, created_at, updated_at) VALUES (:id, :customer, :status,"
                    " :total_cents, :carrier, :tracking, :shipped_by, :created_at, :updated_at)"
                ),
                orders(),
            )
    finally:
        engine.dispose()


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else DEFAULT_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        stale.unlink(missing_ok=True)
    seed(f"sqlite:///{path}")
    print(f"created {path} with {ORDER_COUNT} orders")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
