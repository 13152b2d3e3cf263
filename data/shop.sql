-- Seed of the example shop database (connectors/shop_db.yaml). Build it with:
--   python -c "import sqlite3; sqlite3.connect('data/shop.db').executescript(open('data/shop.sql').read())"
DROP TABLE IF EXISTS order_items;
DROP TABLE IF EXISTS orders;
DROP TABLE IF EXISTS customers;
CREATE TABLE customers (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  email TEXT NOT NULL UNIQUE,
  country TEXT NOT NULL
);
CREATE TABLE orders (
  id INTEGER PRIMARY KEY,
  customer_id INTEGER NOT NULL REFERENCES customers(id),
  status TEXT NOT NULL CHECK (status IN ('pending', 'shipped', 'delivered', 'refunded')),
  amount REAL NOT NULL,
  created_at TEXT NOT NULL
);
CREATE TABLE order_items (
  order_id INTEGER NOT NULL REFERENCES orders(id),
  sku TEXT NOT NULL,
  quantity INTEGER NOT NULL,
  unit_price REAL NOT NULL
);
INSERT INTO customers VALUES
  (42, 'Ada Lovelace', 'ada@example.com', 'GB'),
  (43, 'Grace Hopper', 'grace@example.com', 'US'),
  (44, 'Alan Turing', 'alan@example.com', 'GB');
INSERT INTO orders VALUES
  (1001, 42, 'delivered', 129.90, '2026-10-02'),
  (1002, 42, 'shipped', 24.50, '2026-10-20'),
  (1003, 43, 'pending', 310.00, '2026-11-01'),
  (1004, 44, 'refunded', 15.00, '2026-09-14');
INSERT INTO order_items VALUES
  (1001, 'KB-01', 1, 129.90),
  (1002, 'CBL-2M', 2, 12.25),
  (1003, 'MON-27', 1, 310.00),
  (1004, 'MUG-01', 1, 15.00);
