//! Start-up registry parity against the generated migrations, and the generated producer
//! functions appending through the PostgreSQL store.

use crate::support;

use crate::support::{TestResult, count, with_database};
use evc_generated::REGISTRY;
use evc_generated::payloads::CutCompletedV1;
use evc_generated::producers::emit_cut_completed_v1;
use evc_runtime::{Drift, PgStore, RegistryObject, StoreError};
use serde_json::json;

#[tokio::test]
async fn matching_registry_starts_and_drift_is_named() -> TestResult {
    with_database(|pool| async move {
        let store = PgStore::start(pool.clone(), REGISTRY).await?;

        // A tampered schema digest.
        let tampered = "ab".repeat(32);
        sqlx::query(
            "UPDATE evc_event_versions SET schema_digest = $1 \
             WHERE event_type = 'iu.born' AND version = '2.0.0'",
        )
        .bind(&tampered)
        .execute(&pool)
        .await?;
        let Err(StoreError::Drift(drift)) = store.verify_registry().await else {
            panic!("a tampered schema digest must fail the parity check");
        };
        let compiled = REGISTRY
            .version("iu.born", "2.0.0")
            .map(|v| v.schema_digest)
            .unwrap_or_default();
        assert_eq!(
            drift.differences,
            [Drift::Field {
                object: RegistryObject::EventVersion("iu.born".into(), "2.0.0".into()),
                field: "schema digest",
                database: tampered.clone(),
                compiled: compiled.to_owned(),
            }]
        );
        let message = drift.to_string();
        assert!(
            message.contains(&format!(
                "event version iu.born 2.0.0: schema digest in database {tampered}, compiled {compiled}"
            )),
            "{message}"
        );
        assert!(
            PgStore::start(pool.clone(), REGISTRY)
                .await
                .is_err(),
            "refuses to start"
        );

        // More drift: a consumer's mode, a missing subscription, a foreign digest.
        sqlx::query("UPDATE evc_consumers SET mode = 'off' WHERE name = 'audit'")
            .execute(&pool)
            .await?;
        sqlx::query(
            "DELETE FROM evc_subscriptions \
             WHERE consumer = 'worker.dot.iu_axis' AND event_type = 'iu.linked'",
        )
        .execute(&pool)
        .await?;
        sqlx::query("UPDATE evc_registry_state SET digest = $1")
            .bind("cd".repeat(32))
            .execute(&pool)
            .await?;
        let Err(StoreError::Drift(drift)) = store.verify_registry().await else {
            panic!("drift expected");
        };
        let messages: Vec<String> = drift.differences.iter().map(ToString::to_string).collect();
        assert_eq!(messages.len(), 4, "{messages:?}");
        assert!(messages[0].starts_with("registry digest in database cdcd"));
        assert!(messages.contains(
            &"consumer audit: mode in database off, compiled live".to_owned()
        ));
        assert!(messages.contains(
            &"subscription of worker.dot.iu_axis to iu.linked missing from database".to_owned()
        ));
        Ok(())
    })
    .await
}

#[tokio::test]
async fn missing_registry_rows_are_named() -> TestResult {
    with_database(|pool| async move {
        sqlx::query("DELETE FROM evc_registry_state")
            .execute(&pool)
            .await?;
        sqlx::query("DELETE FROM evc_subscriptions WHERE consumer = 'audit'")
            .execute(&pool)
            .await?;
        sqlx::query("DELETE FROM evc_consumers WHERE name = 'audit'")
            .execute(&pool)
            .await?;
        let Err(StoreError::Drift(drift)) = PgStore::start(pool.clone(), REGISTRY).await else {
            panic!("drift expected");
        };
        let message = drift.to_string();
        assert!(
            message.contains("registry state missing from database"),
            "{message}"
        );
        assert!(
            message.contains("consumer audit missing from database"),
            "{message}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn generated_producers_append_through_the_store() -> TestResult {
    with_database(|pool| async move {
        let store = PgStore::start(pool.clone(), REGISTRY).await?;
        let payload: CutCompletedV1 = serde_json::from_value(json!({
            "cut_id": "01890a5d-ac96-774b-bcce-b302099a8057",
            "unit_count": 3,
            "mark_count": 2,
            "completed_at": "2024-05-01T12:30:00Z",
        }))?;
        let trace = support::trace();
        let mut tx = pool.begin().await?;
        let receipt =
            emit_cut_completed_v1(&mut store.publisher(&mut tx), &trace, &payload).await?;
        tx.commit().await?;
        let subscribers = REGISTRY
            .subscribers(CutCompletedV1::EVENT_TYPE, CutCompletedV1::VERSION)
            .count();
        assert!(subscribers > 0);
        assert_eq!(usize::try_from(receipt.deliveries)?, subscribers);
        assert_eq!(count(&pool, "evc_events").await?, 1);
        assert_eq!(
            count(&pool, "evc_deliveries").await?,
            i64::try_from(subscribers)?
        );
        let (producer_class, order_key): (String, String) =
            sqlx::query_as("SELECT producer_class, order_key FROM evc_events")
                .fetch_one(&pool)
                .await?;
        let descriptor = REGISTRY.event("cut.completed").map(|e| e.producer_class);
        assert_eq!(Some(producer_class.as_str()), descriptor);
        assert_eq!(order_key, "01890a5d-ac96-774b-bcce-b302099a8057");
        Ok(())
    })
    .await
}

/// A settings row in force whose schedules, lag thresholds or cut-over gates the runtime
/// cannot read stops `deployed_registry` with an error that names the table and what is wrong
/// with the column, never its content; it neither panics nor runs without them.
#[tokio::test]
async fn unreadable_deployed_settings_are_refused_by_column() -> TestResult {
    with_database(|pool| async move {
        let deployed = evc_runtime::deployed_registry(&pool).await?;
        // The contracts set all three, so each column broken below is one the registry reads.
        assert!(!deployed.schedules.is_empty(), "the contracts' schedules");
        assert!(!deployed.lag_thresholds.is_empty(), "the contracts' thresholds");
        assert!(!deployed.cutover_gates.is_empty(), "the contracts' gates");
        for (column, value, says) in [
            (
                "schedules",
                r#"[{"name": "secret-name", "cron": "0 3 * * *", "event": "e", "missed": "later", "catch_up_limit": 1, "tenant_scope": null}]"#,
                "evc_settings: a schedule's `missed` is neither `skip` nor `catch_up`",
            ),
            (
                "lag_thresholds",
                r#"{"secret-name": 1}"#,
                "evc_settings: the lag thresholds are not a list of thresholds",
            ),
            (
                "cutover_gates",
                r#"[{"secret-name": true}]"#,
                "evc_settings: the cut-over gates are not a list of gates",
            ),
        ] {
            let set = |value: String| {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "UPDATE evc_settings SET {column} = $1::jsonb WHERE id"
                )))
                .bind(value)
            };
            let kept: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT {column}::text FROM evc_settings WHERE id"
            )))
            .fetch_one(&pool)
            .await?;
            set(value.to_owned()).execute(&pool).await?;
            let Err(error) = evc_runtime::deployed_registry(&pool).await else {
                panic!("{column}: an unreadable column must refuse the registry");
            };
            set(kept).execute(&pool).await?;
            evc_runtime::deployed_registry(&pool).await?;
            let message = error.to_string();
            assert!(message.contains(says), "{column}: {message}");
            assert!(!message.contains("secret-name"), "{column}: {message}");
        }
        Ok(())
    })
    .await
}

/// A database without the thirty-first runtime step: every ack would fail, so the store
/// refuses to start and names the step.
#[tokio::test]
async fn a_database_without_the_acked_batches_step_refuses_to_start() -> TestResult {
    with_database(|pool| async move {
        sqlx::query("ALTER TABLE evc_acked_batches RENAME TO evc_acked_batches_elsewhere")
            .execute(&pool)
            .await?;
        let refused = PgStore::start(pool.clone(), REGISTRY).await;
        let Err(StoreError::MissingStep { step, what }) = refused else {
            panic!("started without evc_acked_batches: {refused:?}");
        };
        assert_eq!(step, "NNNN_evc_runtime_v31.sql");
        assert_eq!(what, "the table evc_acked_batches");
        sqlx::query("ALTER TABLE evc_acked_batches_elsewhere RENAME TO evc_acked_batches")
            .execute(&pool)
            .await?;
        PgStore::start(pool.clone(), REGISTRY).await?;
        Ok(())
    })
    .await
}
