-- Lag breaches in the embedded SQLite store, as PostgreSQL's twenty-fourth runtime step has
-- them (docs/runtime.md, "Lag breaches"): at most one open breach per consumer and producer
-- class, opened with its `event_lag.breach` and closed when the lag is back under the
-- threshold. Times are epoch seconds. Never edited once released.

CREATE TABLE evc_lag_breaches (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    consumer TEXT NOT NULL,
    producer_class TEXT NOT NULL,
    threshold_ms INTEGER NOT NULL CHECK (threshold_ms > 0),
    lag_ms INTEGER NOT NULL CHECK (lag_ms >= 0),
    oldest_event_id TEXT,
    opened_at REAL NOT NULL,
    closed_at REAL CHECK (closed_at IS NULL OR closed_at >= opened_at)
);
CREATE UNIQUE INDEX evc_lag_breaches_open_idx
    ON evc_lag_breaches (consumer, producer_class) WHERE closed_at IS NULL;
