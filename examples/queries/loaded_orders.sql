SELECT count(*) FILTER (WHERE day > COALESCE(NULLIF('${since}', '')::date, '-infinity')) AS new_orders,
       count(*) AS orders,
       max(day)::text AS last_day
FROM orders
