-- The session's three orders arrive (again, harmlessly, when a session runs twice).
CREATE TABLE IF NOT EXISTS raw_orders (id bigint PRIMARY KEY, day date NOT NULL, amount int NOT NULL);
INSERT INTO raw_orders (id, day, amount)
SELECT ${session_date_compact}00 + n, DATE '${session_date}', 10 * n FROM generate_series(1, 3) AS n
ON CONFLICT (id) DO NOTHING;
