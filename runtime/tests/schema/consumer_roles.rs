//! The dispatcher role of each consumer (the twenty-first PostgreSQL step): a login granted
//! `evc_dispatcher_<consumer>` claims, renews and settles that consumer's deliveries and no
//! other's, whatever role its connection takes, and still appends events whose deliveries go to
//! every consumer. A login without such a role, or a superuser, works on every consumer; a
//! role this database does not map opens nothing.

use std::time::Duration;

use evc_runtime::{ClaimRequest, DispatchError, FailureClass, PgStore, RetryDecision, Role, Store};
use sqlx::Executor;
use sqlx::postgres::{PgPool, PgPoolOptions};

use crate::roles::{Logins, denied, with_logins};
use crate::support::{self, DISPATCH_REGISTRY, TestResult};

/// The consumer the scoped login is granted.
const MINE: &str = "d.unordered";
/// A consumer it is not granted at first (per key, so each key's delivery is claimed on its
/// own).
const THEIRS: &str = "d.leased";
/// A consumer of the registry this database never mirrored: no role maps it.
const UNMAPPED: &str = "d.tx";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_dispatcher_settles_only_its_consumers_deliveries() -> TestResult {
    with_logins(|admin, logins| async move { scoped(&admin, &logins).await }).await
}

/// Status and lease owner of each delivery of `consumer`, as the admin sees them.
async fn deliveries(admin: &PgPool, consumer: &str) -> Result<Vec<(String, String)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT status, coalesce(lease_owner, '') FROM evc_deliveries \
         WHERE consumer = $1 ORDER BY event_seq",
    )
    .bind(consumer)
    .fetch_all(admin)
    .await
}

async fn scoped(admin: &PgPool, logins: &Logins) -> TestResult {
    let lease = Duration::from_secs(30);
    // Deploying a consumer gives it its role, a member of evc_dispatcher.
    for consumer in [MINE, THEIRS] {
        support::deploy(admin, consumer, "^1").await?;
    }
    let roles: Vec<(String, String, bool)> = sqlx::query_as(
        "SELECT consumer, role_name, pg_has_role(role_name, 'evc_dispatcher', 'MEMBER') \
         FROM evc_consumer_roles WHERE consumer IN ($1, $2) ORDER BY consumer",
    )
    .bind(MINE)
    .bind(THEIRS)
    .fetch_all(admin)
    .await?;
    assert_eq!(
        roles,
        [
            (THEIRS.to_owned(), format!("evc_dispatcher_{THEIRS}"), true),
            (MINE.to_owned(), format!("evc_dispatcher_{MINE}"), true),
        ]
    );
    logins
        .grant_scoped(admin, &format!("evc_dispatcher_{MINE}"))
        .await?;
    let scoped = PgStore::new(
        logins.scoped_pool(admin, Role::Dispatcher).await?,
        DISPATCH_REGISTRY,
    )?;
    let everyone = PgStore::new(
        logins.pool_for(admin, Role::Dispatcher, None).await?,
        DISPATCH_REGISTRY,
    )?;
    let producer = PgStore::new(
        logins.pool_for(admin, Role::Producer, None).await?,
        DISPATCH_REGISTRY,
    )?;
    support::append_notes(&producer, 4, 4).await?;

    // Its own consumer's deliveries: claimed and acked.
    let mine = support::claim(&scoped, MINE, "w/scoped", 10, lease, false).await?;
    assert_eq!(mine.len(), 4);
    let leases: Vec<_> = mine.iter().map(|c| &c.lease).collect();
    assert_eq!(support::ack(&scoped, &leases).await?.acked, 4);

    // Another consumer's: four are due, and none can be claimed, leased or held.
    assert!(
        support::claim(&scoped, THEIRS, "w/scoped", 10, lease, true)
            .await?
            .is_empty()
    );
    let mut tx = scoped.begin().await?;
    let held = scoped
        .claim(&mut tx, &ClaimRequest::held(THEIRS, "w/scoped", 10))
        .await?;
    tx.rollback().await?;
    assert!(held.is_empty(), "{held:?}");

    // Their leases, taken by a dispatcher of every consumer, cannot be renewed, acked or
    // failed by the scoped login.
    let theirs = support::claim(&everyone, THEIRS, "w/all", 10, lease, true).await?;
    assert_eq!(theirs.len(), 4);
    let leases: Vec<_> = theirs.iter().map(|c| &c.lease).collect();
    let mut connection = scoped.pool().acquire().await?;
    let renewed = scoped.renew(&mut connection, &leases, lease).await?;
    drop(connection);
    assert!(renewed.is_empty(), "{renewed:?}");
    let outcome = support::ack(&scoped, &leases[..2]).await?;
    assert_eq!((outcome.acked, outcome.stale.len()), (0, 2), "{outcome:?}");
    let failed = scoped
        .fail(
            leases[2],
            FailureClass::Permanent,
            "boom",
            RetryDecision::Dead,
        )
        .await;
    assert!(
        matches!(failed, Err(DispatchError::StaleToken { .. })),
        "{failed:?}"
    );
    // Nor by hand, under the role its connection took or any other it may take.
    let mut connection = scoped.pool().acquire().await?;
    for role in [
        "evc_dispatcher".to_owned(),
        format!("\"evc_dispatcher_{MINE}\""),
    ] {
        connection
            .execute(sqlx::AssertSqlSafe(format!("SET ROLE {role}")))
            .await?;
        for statement in [
            "UPDATE evc_deliveries SET lease_owner = 'w/scoped' WHERE consumer = 'd.leased'",
            "DELETE FROM evc_deliveries WHERE consumer = 'd.leased'",
            "SELECT 1 FROM evc_deliveries WHERE consumer = 'd.leased' FOR UPDATE",
        ] {
            let touched = connection.execute(statement).await?.rows_affected();
            assert_eq!(touched, 0, "as {role}: {statement}");
        }
    }
    connection.close().await?;
    assert_eq!(
        deliveries(admin, THEIRS).await?,
        vec![("leased".to_owned(), "w/all".to_owned()); 4]
    );

    // Reads and inserts stay open: it sees every consumer's deliveries, and appends an event
    // (a lifecycle event is one) whose deliveries go to every consumer.
    let visible: i64 =
        sqlx::query_scalar("SELECT count(*) FROM evc_deliveries WHERE consumer = $1")
            .bind(THEIRS)
            .fetch_one(scoped.pool())
            .await?;
    assert_eq!(visible, 4);
    support::append_notes(&scoped, 1, 1).await?;
    assert_eq!(deliveries(admin, THEIRS).await?.len(), 5);

    // The dispatcher of every consumer settles their leases.
    let outcome = support::ack(&everyone, &leases).await?;
    assert_eq!(outcome.acked, 4, "{outcome:?}");

    // A second role widens the scope: the login now claims that consumer's new delivery.
    logins
        .grant_scoped(admin, &format!("evc_dispatcher_{THEIRS}"))
        .await?;
    let granted = support::claim(&scoped, THEIRS, "w/scoped", 10, lease, true).await?;
    assert_eq!(granted.len(), 1);

    // Effects it writes only for consumers its roles map (attempts and reconciliations carry
    // the same policy).
    for (consumer, allowed) in [(MINE, true), (THEIRS, true), (UNMAPPED, false)] {
        let written = sqlx::query(
            "INSERT INTO evc_consumer_effects (consumer, effect_key, event_id, outcome_digest)              VALUES ($1, 'k', '01890a5d-ac96-774b-bcce-b302099a8057', 'd')",
        )
        .bind(consumer)
        .execute(scoped.pool())
        .await;
        match written {
            Ok(_) => assert!(allowed, "an effect of {consumer} was written"),
            Err(error) => assert!(!allowed && denied(&error), "{consumer}: {error}"),
        }
    }

    // The scope fails closed: a consumer role this database does not map (here: its row
    // removed) opens nothing, and the login keeps only the consumers mapped here.
    sqlx::query("DELETE FROM evc_consumer_roles WHERE consumer = $1")
        .bind(MINE)
        .execute(admin)
        .await?;
    assert!(
        support::claim(&scoped, MINE, "w/scoped", 10, lease, false)
            .await?
            .is_empty()
    );
    sqlx::query("SELECT evc_ensure_consumer_role($1)")
        .bind(MINE)
        .execute(admin)
        .await?;
    let mine = support::claim(&scoped, MINE, "w/scoped", 10, lease, false).await?;
    assert_eq!(mine.len(), 1);

    // A superuser login that takes the dispatcher role is not scoped: it claims the deliveries
    // of a consumer no role maps.
    let superuser = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(Role::Dispatcher.connect_options((*admin.connect_options()).clone()))
        .await?;
    let superuser = PgStore::new(superuser, DISPATCH_REGISTRY)?;
    let unmapped = support::claim(&superuser, UNMAPPED, "w/root", 10, lease, true).await?;
    assert_eq!(unmapped.len(), 4);
    Ok(())
}
