-- Inserts a few hundred thousand rows and queries them.
PRAGMA journal_mode = OFF;
PRAGMA synchronous = OFF;
CREATE TABLE t(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, val REAL);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300000)
INSERT INTO t SELECT i, (i * 7919) % 1000, 'name-' || ((i * 104729) % 300007), (i % 1013) / 7.0 FROM n;
CREATE INDEX t_grp ON t(grp);
CREATE INDEX t_name ON t(name);
SELECT count(*), sum(grp), round(sum(val), 3) FROM t;
SELECT grp, count(*), round(avg(val), 4), min(name), max(name) FROM t GROUP BY grp ORDER BY grp LIMIT 20;
SELECT name, id FROM t ORDER BY name DESC, id LIMIT 10;
SELECT count(DISTINCT name) FROM t;
SELECT grp, count(*) FROM t WHERE name IN (SELECT name FROM t WHERE grp = 7) GROUP BY grp ORDER BY 2 DESC, 1 LIMIT 5;
UPDATE t SET name = upper(name) WHERE grp < 100;
DELETE FROM t WHERE id % 3 = 0;
SELECT count(*), count(DISTINCT upper(name)) FROM t;
SELECT group_concat(name, ',') FROM (SELECT name FROM t WHERE grp = 42 ORDER BY id LIMIT 50);
