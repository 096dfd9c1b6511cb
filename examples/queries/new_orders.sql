SELECT id, day, amount FROM raw_orders
WHERE day > COALESCE(NULLIF('${since}', '')::date, '-infinity')
