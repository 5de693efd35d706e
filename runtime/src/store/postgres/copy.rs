//! Batch appends through `COPY ... FROM STDIN` (text format): the bulk path for batches whose
//! events carry no idempotency key. `COPY` skips the per-row executor work of `INSERT`, which
//! cut the database's time for a 100,000-event append from 1.7–2.0 s to about 1.1 s in `psql` (docs/runtime.md, "Batch append").
//!
//! `COPY` cannot skip a row on conflict, so events with an idempotency key take the
//! `INSERT ... ON CONFLICT` path ([`super::sql::APPEND_BATCH`]); and it cannot return the
//! generated `seq`, so the seqs are reserved first ([`super::sql::RESERVE_SEQS`]) and written
//! explicitly to the event and its deliveries. Nor can it write into a table under row-level
//! security: where that applies to the session's writes of deliveries (a role's session: the
//! per-consumer dispatcher scope keeps it on), the deliveries go in one `INSERT` of arrays.

use std::fmt::Write as _;

use futures_util::TryStreamExt;
use sqlx::postgres::PgConnection;
use uuid::Uuid;

use super::{EventRow, PgStore, sql};
use crate::append::{AppendError, AppendReceipt, CheckedEvent, NewEvent};
use crate::store::DispatchError;

/// Bytes of `COPY` data sent per message: large enough that per-message costs vanish, small
/// enough that the server starts on the rows while the rest are encoded.
const SEND_BYTES: usize = 1 << 20;

/// Appends `events` (all without an idempotency key, all checked) with one `COPY` for the
/// events and one for their deliveries, then notifies each consumer that got a delivery once.
pub(super) async fn append(
    connection: &mut PgConnection,
    events: &[NewEvent],
    checked: &[CheckedEvent<'_>],
) -> Result<Vec<AppendReceipt>, AppendError> {
    let count = i64::try_from(events.len()).unwrap_or(i64::MAX);
    let (mut seqs, under_row_security): (Vec<i64>, bool) = sqlx::query_as(sql::RESERVE_SEQS)
        .bind(count)
        .fetch_one(&mut *connection)
        .await?;
    // Increasing already (one call after the other); sorted so the batch order is seq order
    // whatever the plan.
    seqs.sort_unstable();

    let mut receipts = Vec::with_capacity(events.len());
    let mut deliveries = if under_row_security {
        DeliveryRows::Insert(DeliveryColumns::default())
    } else {
        DeliveryRows::Copy(String::new())
    };
    let mut consumers: Vec<&str> = Vec::new();
    let mut copy = connection.copy_in_raw(sql::COPY_EVENTS).await?;
    let mut buffer = String::with_capacity(SEND_BYTES + 4096);
    for ((new, checked), &seq) in events.iter().zip(checked).zip(&seqs) {
        let (event, options) = (&new.event, &new.options);
        let event_id = Uuid::now_v7();
        let row = EventRow::new(event, options, checked, event_id);
        field(&mut buffer, &seq);
        field(&mut buffer, &event_id);
        text(&mut buffer, Some(event.event_type));
        text(&mut buffer, Some(event.version));
        text(&mut buffer, Some(&row.order_key));
        text(&mut buffer, options.tenant_scope.as_deref());
        text(&mut buffer, Some(checked.descriptor.producer_class));
        text(&mut buffer, Some(event.trace.trace_id()));
        text(&mut buffer, Some(event.trace.parent_span_id()));
        text(&mut buffer, Some(&row.trace_flags));
        text(&mut buffer, options.correlation_id.as_deref());
        text(&mut buffer, options.causation_id.as_deref());
        text(&mut buffer, Some(&checked.payload));
        let _ = write!(buffer, "{}", row.payload_bytes);
        buffer.push('\n');

        for (consumer, &ordered) in checked.consumers.iter().zip(checked.ordered) {
            deliveries.push(
                event_id,
                consumer,
                seq,
                options.tenant_scope.as_deref(),
                ordered.then_some(row.order_key.as_str()),
            );
            if !consumers.contains(consumer) {
                consumers.push(consumer);
            }
        }
        receipts.push(AppendReceipt {
            event_id,
            seq,
            created: true,
            deliveries: u32::try_from(checked.consumers.len()).unwrap_or(u32::MAX),
        });
        if buffer.len() >= SEND_BYTES {
            copy.send(buffer.as_bytes()).await?;
            buffer.clear();
        }
    }
    if !buffer.is_empty() {
        copy.send(buffer.as_bytes()).await?;
    }
    copy.finish().await?;

    if !consumers.is_empty() {
        deliveries.write(connection).await?;
        sqlx::query(sql::NOTIFY_CONSUMERS)
            .bind(&consumers)
            .execute(&mut *connection)
            .await?;
    }
    Ok(receipts)
}

/// The delivery rows of a batch append, built for the way they will be written.
enum DeliveryRows<'a> {
    /// `COPY` text.
    Copy(String),
    /// Columns of one `INSERT` ([`sql::INSERT_DELIVERIES`]), where row-level security applies.
    Insert(DeliveryColumns<'a>),
}

/// The columns of [`sql::INSERT_DELIVERIES`].
#[derive(Default)]
struct DeliveryColumns<'a> {
    event_ids: Vec<Uuid>,
    consumers: Vec<&'a str>,
    seqs: Vec<i64>,
    tenants: Vec<Option<&'a str>>,
    order_keys: Vec<Option<String>>,
}

impl<'a> DeliveryRows<'a> {
    fn push(
        &mut self,
        event_id: Uuid,
        consumer: &'a str,
        seq: i64,
        tenant: Option<&'a str>,
        order_key: Option<&str>,
    ) {
        match self {
            Self::Copy(buffer) => {
                field(buffer, &event_id);
                text(buffer, Some(consumer));
                field(buffer, &seq);
                text(buffer, tenant);
                text_last(buffer, order_key);
            }
            Self::Insert(columns) => {
                columns.event_ids.push(event_id);
                columns.consumers.push(consumer);
                columns.seqs.push(seq);
                columns.tenants.push(tenant);
                columns.order_keys.push(order_key.map(str::to_owned));
            }
        }
    }

    async fn write(self, connection: &mut PgConnection) -> Result<(), sqlx::Error> {
        match self {
            Self::Copy(buffer) => {
                copy_in(connection, sql::COPY_DELIVERIES, buffer.as_bytes()).await
            }
            Self::Insert(columns) => {
                sqlx::query(sql::INSERT_DELIVERIES)
                    .bind(columns.event_ids)
                    .bind(columns.consumers)
                    .bind(columns.seqs)
                    .bind(columns.tenants)
                    .bind(columns.order_keys)
                    .execute(connection)
                    .await?;
                Ok(())
            }
        }
    }
}

/// Event and delivery rows as a batch append's two `COPY` commands send them (text format,
/// the same columns), read back from a database with [`PgStore::copy_rows_out`]. Writing them
/// with [`PgStore::copy_rows_in`] is a bare bulk load of what an append wrote: the baseline
/// the outbox benchmark measures the batch append against.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopyRows {
    events: Vec<u8>,
    deliveries: Vec<u8>,
}

impl CopyRows {
    /// Bytes of `COPY` text, events and deliveries together.
    pub fn len(&self) -> usize {
        self.events.len() + self.deliveries.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl PgStore {
    /// Every event and delivery row the store's connections can read (row-level security
    /// applies: a tenant's session reads its tenant's rows), in `seq` order, as [`CopyRows`].
    /// Both tables are read in one snapshot, so no delivery comes without its event.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub async fn copy_rows_out(&self) -> Result<CopyRows, DispatchError> {
        let mut transaction = self.inner.pool.begin().await?;
        sqlx::query(sql::ONE_SNAPSHOT)
            .execute(&mut *transaction)
            .await?;
        let mut tables = [Vec::new(), Vec::new()];
        for (statement, bytes) in [sql::COPY_EVENTS_OUT, sql::COPY_DELIVERIES_OUT]
            .into_iter()
            .zip(&mut tables)
        {
            let mut stream = transaction.copy_out_raw(statement).await?;
            while let Some(chunk) = stream.try_next().await? {
                bytes.extend_from_slice(&chunk);
            }
        }
        transaction.commit().await?;
        let [events, deliveries] = tables;
        Ok(CopyRows { events, deliveries })
    }

    /// Writes `rows` on `connection` (in the caller's transaction, if one is open) with the
    /// batch append's two `COPY` commands and nothing else: no checks, no seqs reserved, no
    /// notification. Rows that break a constraint of the schema fail the copy.
    ///
    /// # Errors
    /// [`DispatchError::Database`].
    pub async fn copy_rows_in(
        connection: &mut PgConnection,
        rows: &CopyRows,
    ) -> Result<(), DispatchError> {
        copy_in(connection, sql::COPY_EVENTS, &rows.events).await?;
        copy_in(connection, sql::COPY_DELIVERIES, &rows.deliveries).await?;
        Ok(())
    }
}

/// Sends `bytes` of `COPY` text through `statement` (a `COPY ... FROM STDIN`) in messages of
/// [`SEND_BYTES`].
async fn copy_in(
    connection: &mut PgConnection,
    statement: &str,
    bytes: &[u8],
) -> Result<(), sqlx::Error> {
    let mut copy = connection.copy_in_raw(statement).await?;
    for chunk in bytes.chunks(SEND_BYTES) {
        copy.send(chunk).await?;
    }
    copy.finish().await?;
    Ok(())
}

/// A value without characters `COPY` escapes (numbers, UUIDs), then the column separator.
fn field(buffer: &mut String, value: &dyn std::fmt::Display) {
    let _ = write!(buffer, "{value}");
    buffer.push('\t');
}

/// A text value (or `\N` for NULL), then the column separator.
fn text(buffer: &mut String, value: Option<&str>) {
    escape(buffer, value);
    buffer.push('\t');
}

/// A text value (or `\N` for NULL) that ends its row.
fn text_last(buffer: &mut String, value: Option<&str>) {
    escape(buffer, value);
    buffer.push('\n');
}

/// `COPY` text format: backslash, tab, newline and carriage return are escaped with a
/// backslash; NULL is `\N`.
fn escape(buffer: &mut String, value: Option<&str>) {
    let Some(value) = value else {
        buffer.push_str("\\N");
        return;
    };
    if !value
        .bytes()
        .any(|b| matches!(b, b'\\' | b'\t' | b'\n' | b'\r'))
    {
        buffer.push_str(value);
        return;
    }
    for c in value.chars() {
        match c {
            '\\' => buffer.push_str("\\\\"),
            '\t' => buffer.push_str("\\t"),
            '\n' => buffer.push_str("\\n"),
            '\r' => buffer.push_str("\\r"),
            c => buffer.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_text_escapes_separators_and_backslashes() {
        let mut buffer = String::new();
        text(&mut buffer, Some("a\tb\nc\rd\\e"));
        text_last(&mut buffer, None);
        assert_eq!(buffer, "a\\tb\\nc\\rd\\\\e\t\\N\n");
    }

    #[test]
    fn json_escapes_survive_copy_escaping() {
        // Canonical JSON escapes control characters itself; its backslashes are doubled once
        // more for COPY, which PostgreSQL undoes before parsing the jsonb.
        let mut buffer = String::new();
        text_last(&mut buffer, Some(r#"{"a":"line\nbreak \"q\""}"#));
        assert_eq!(buffer, "{\"a\":\"line\\\\nbreak \\\\\"q\\\\\"\"}\n");
    }
}
