CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, day date NOT NULL, amount int NOT NULL);
