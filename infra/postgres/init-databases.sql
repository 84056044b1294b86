-- Run once by the postgres image on first start (docker-entrypoint-initdb.d), as POSTGRES_USER in POSTGRES_DB.
-- Ratchet's control DB is POSTGRES_DB (`ratchet`); Dagster's run/event/schedule storage gets its own database,
-- because Dagster migrates its own tables (infra/dagster/dagster.yaml, DAGSTER_PG_DB).
CREATE DATABASE dagster;
