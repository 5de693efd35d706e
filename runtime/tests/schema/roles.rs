//! The group roles of the tenth PostgreSQL step, each through a login of its own: every job
//! works through the store with only its role's grants, and everything outside the job is
//! refused by the database (a producer cannot claim, a dispatcher cannot replay, an operator
//! cannot approve, an approver cannot propose, a reader sees no payload and changes nothing).

use std::time::Duration;

use evc_runtime::{
    AppendOptions, Console, DispatchError, FailureClass, Observe, Operate, PgStore, PurgeError,
    ReplayApproval, ReplayError, ReplaySelection, RetryDecision, Role, Store, TenantScope,
};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Executor};

use crate::support::{self, DISPATCH_REGISTRY, TRACE_ID, TestResult, with_database};

const CONSUMER: &str = "d.unordered";

/// [`DISPATCH_REGISTRY`] whose notes and every table expire after a millisecond.
static RETAINED: evc_runtime::Registry = evc_runtime::Registry {
    retention: evc_runtime::RetentionDescriptor {
        events: &[evc_runtime::EventRetention {
            event_type: "test.note",
            ms: 1,
        }],
        attempts_ms: Some(1),
        reconciliations_ms: Some(1),
        rejects_ms: Some(1),
        effects_ms: Some(1),
    },
    ..DISPATCH_REGISTRY
};

/// [`DISPATCH_REGISTRY`] where `d.unordered` is off: it gets no delivery until an inventory
/// gives it the events it missed.
static INVENTORIED: evc_runtime::Registry = evc_runtime::Registry {
    consumers: &[
        DISPATCH_REGISTRY.consumers[0],
        DISPATCH_REGISTRY.consumers[1],
        DISPATCH_REGISTRY.consumers[2],
        evc_runtime::ConsumerDescriptor {
            mode: evc_runtime::ConsumerMode::Off,
            ..DISPATCH_REGISTRY.consumers[3]
        },
    ],
    ..DISPATCH_REGISTRY
};

/// [`INVENTORIED`] where `d.unordered` accepts only `test.note` 2, which is not registered:
/// every note is quarantined by its inventory.
static QUARANTINING: evc_runtime::Registry = evc_runtime::Registry {
    consumers: &[
        DISPATCH_REGISTRY.consumers[0],
        DISPATCH_REGISTRY.consumers[1],
        DISPATCH_REGISTRY.consumers[2],
        evc_runtime::ConsumerDescriptor {
            mode: evc_runtime::ConsumerMode::Off,
            subscriptions: &[evc_runtime::SubscriptionDescriptor {
                event: "test.note",
                requirement: "^2",
                versions: &[],
            }],
            ..DISPATCH_REGISTRY.consumers[3]
        },
    ],
    ..DISPATCH_REGISTRY
};

/// A login per role for this test's database, named `<database>_<role>`: roles belong to the
/// cluster, so the database's unique name keeps concurrent tests apart. The logins have no
/// privileges of their own (`NOINHERIT`): they act only through the role their pools take at
/// connect ([`Role::connect_options`]). One more login, `<database>_scoped`, starts with no
/// role at all: a test grants it the roles it needs ([`Logins::grant_scoped`]).
#[derive(Clone)]
pub(crate) struct Logins {
    database: String,
}

impl Logins {
    pub(crate) async fn create(admin: &PgPool) -> Result<Self, sqlx::Error> {
        let database: String = sqlx::query_scalar("SELECT current_database()::text")
            .fetch_one(admin)
            .await?;
        let logins = Self { database };
        for role in Role::ALL {
            admin
                .execute(AssertSqlSafe(format!(
                    "CREATE ROLE {} LOGIN NOINHERIT IN ROLE {role}",
                    logins.name(role)
                )))
                .await?;
        }
        admin
            .execute(AssertSqlSafe(format!(
                "CREATE ROLE {} LOGIN NOINHERIT",
                logins.scoped_name()
            )))
            .await?;
        Ok(logins)
    }

    fn name(&self, role: Role) -> String {
        format!("{}_{role}", self.database)
    }

    fn scoped_name(&self) -> String {
        format!("{}_scoped", self.database)
    }

    /// Makes the `<database>_scoped` login a member of `role` (a role's name, quoted here).
    pub(crate) async fn grant_scoped(&self, admin: &PgPool, role: &str) -> Result<(), sqlx::Error> {
        admin
            .execute(AssertSqlSafe(format!(
                "GRANT \"{}\" TO {}",
                role.replace('"', "\"\""),
                self.scoped_name()
            )))
            .await?;
        Ok(())
    }

    /// A pool connected as the `<database>_scoped` login, taking `role`.
    pub(crate) async fn scoped_pool(
        &self,
        admin: &PgPool,
        role: Role,
    ) -> Result<PgPool, sqlx::Error> {
        let options = (*admin.connect_options())
            .clone()
            .username(&self.scoped_name());
        PgPoolOptions::new()
            .max_connections(2)
            .connect_with(role.connect_options(options))
            .await
    }

    /// A pool connected as the login of `role`, taking the role.
    async fn pool(&self, admin: &PgPool, role: Role) -> Result<PgPool, sqlx::Error> {
        self.pool_for(admin, role, None).await
    }

    /// A pool connected as the login of `role`, taking the role, working on the rows of
    /// `scope` (`None`: no `evc.tenant` setting at all).
    pub(crate) async fn pool_for(
        &self,
        admin: &PgPool,
        role: Role,
        scope: Option<TenantScope>,
    ) -> Result<PgPool, sqlx::Error> {
        PgPoolOptions::new()
            .max_connections(2)
            .connect_with(self.options_for(admin, role, scope))
            .await
    }

    /// The connect options of [`Self::pool_for`]: the login of `role`, taking the role, on the
    /// rows of `scope`.
    pub(crate) fn options_for(
        &self,
        admin: &PgPool,
        role: Role,
        scope: Option<TenantScope>,
    ) -> PgConnectOptions {
        let options = (*admin.connect_options())
            .clone()
            .username(&self.name(role));
        let options = match scope {
            Some(scope) => scope.connect_options(options),
            None => options,
        };
        role.connect_options(options)
    }

    pub(crate) async fn drop(self, admin: &PgPool) -> Result<(), sqlx::Error> {
        for role in Role::ALL {
            admin
                .execute(AssertSqlSafe(format!(
                    "DROP ROLE IF EXISTS {}",
                    self.name(role)
                )))
                .await?;
        }
        admin
            .execute(AssertSqlSafe(format!(
                "DROP ROLE IF EXISTS {}",
                self.scoped_name()
            )))
            .await?;
        Ok(())
    }
}

/// Runs `work` on a fresh database with a login per role, then drops the logins, also after a
/// failed assertion: the work runs in its own task, and roles outlive the test's database.
pub(crate) async fn with_logins<F, Fut>(work: F) -> TestResult
where
    F: FnOnce(PgPool, Logins) -> Fut + Send + 'static,
    Fut: Future<Output = TestResult> + Send + 'static,
{
    with_database(|admin| async move {
        let logins = Logins::create(&admin).await?;
        let outcome = tokio::spawn(work(admin.clone(), logins.clone())).await;
        logins.drop(&admin).await?;
        match outcome {
            Ok(result) => result,
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            Err(error) => Err(error.into()),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_does_its_job_and_is_refused_the_rest() -> TestResult {
    with_logins(|admin, logins| async move { jobs(&admin, &logins).await }).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_proposes_an_inventory_and_only_an_approver_applies_it() -> TestResult {
    with_logins(|admin, logins| async move {
        let producer = PgStore::new(logins.pool(&admin, Role::Producer).await?, INVENTORIED)?;
        support::append_notes(&producer, 2, 2).await?;

        // The operator reads the inventory (payloads, to validate them) and proposes it.
        let operator = PgStore::new(logins.pool(&admin, Role::Operator).await?, INVENTORIED)?;
        let report = operator
            .inventory(CONSUMER, std::time::SystemTime::now(), 100)
            .await?;
        assert_eq!(report.counts.safe, 2, "{report:?}");
        let proposed = operator.propose_inventory(CONSUMER, 100, "alice").await?;
        let approval =
            ReplayApproval::new(&proposed.plan.digest, "backfill", "CHG-1", "i-1", "bob");
        assert!(replay_denied(
            operator.apply_inventory(CONSUMER, 100, &approval).await
        ));

        // Neither the dispatcher nor the reader may apply or propose one.
        let dispatcher = PgStore::new(logins.pool(&admin, Role::Dispatcher).await?, INVENTORIED)?;
        assert!(replay_denied(
            dispatcher.apply_inventory(CONSUMER, 100, &approval).await
        ));
        let reader = PgStore::new(logins.pool(&admin, Role::Reader).await?, INVENTORIED)?;
        assert!(replay_denied(
            reader.propose_inventory(CONSUMER, 100, "dave").await
        ));

        // The approver applies it: two deliveries, recorded.
        let approver = PgStore::new(logins.pool(&admin, Role::Approver).await?, INVENTORIED)?;
        assert!(replay_denied(
            approver.propose_inventory(CONSUMER, 100, "bob").await
        ));
        let applied = approver.apply_inventory(CONSUMER, 100, &approval).await?;
        assert_eq!((applied.delivered, applied.repeated), (2, false));
        let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM evc_inventory_items")
            .fetch_one(&admin)
            .await?;
        assert_eq!(recorded, 2);

        // No login writes a decision outside an apply: an approver's item by hand, say an
        // expiry that would hide an event from every later inventory, is refused.
        let forged = sqlx::query(
            "INSERT INTO evc_inventory_items (inventory_id, event_id, consumer, class, \
                 payload_digest) \
             SELECT inventory_id, gen_random_uuid(), consumer, 'expire', 'x' \
             FROM evc_inventory_items LIMIT 1",
        )
        .execute(approver.pool())
        .await;
        assert!(
            forged.as_ref().is_err_and(|error| error
                .as_database_error()
                .and_then(|e| e.code())
                .as_deref()
                == Some("23514")),
            "{forged:?}"
        );
        // Readers see the decisions, not the payload digests.
        let reader_pool = logins.pool(&admin, Role::Reader).await?;
        assert!(
            raw_denied(
                &reader_pool,
                "SELECT payload_digest FROM evc_inventory_items"
            )
            .await
        );
        let classes: i64 = sqlx::query_scalar("SELECT count(class) FROM evc_inventory_items")
            .fetch_one(&reader_pool)
            .await?;
        assert_eq!(classes, 2);
        Ok(())
    })
    .await
}

/// [`DISPATCH_REGISTRY`] recording usage evidence once a day.
static RECORDING: evc_runtime::Registry = evc_runtime::Registry {
    evidence_recording: Some(evc_runtime::EvidenceRecordingDescriptor {
        every_ms: 86_400_000,
        keep_ms: 30 * 86_400_000,
        window_ms: 86_400_000,
        correlation_ms: 60_000,
        min_count: 1,
    }),
    ..DISPATCH_REGISTRY
};

/// Dispatchers record evidence snapshots and remove old ones; every other job reads them and
/// writes none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_dispatcher_records_evidence_and_every_job_reads_it() -> TestResult {
    with_logins(|admin, logins| async move {
        let producer = PgStore::new(logins.pool(&admin, Role::Producer).await?, RECORDING)?;
        support::append_notes(&producer, 2, 2).await?;
        assert!(dispatch_denied(producer.record_evidence().await));
        for role in [Role::Operator, Role::Approver, Role::Reader] {
            let store = PgStore::new(logins.pool(&admin, role).await?, RECORDING)?;
            assert!(dispatch_denied(store.record_evidence().await), "{role:?}");
        }
        let dispatcher = PgStore::new(logins.pool(&admin, Role::Dispatcher).await?, RECORDING)?;
        let round = dispatcher.record_evidence().await?;
        assert!(round.leader && round.recorded.is_some(), "{round:?}");
        for role in [Role::Operator, Role::Approver, Role::Reader] {
            let pool = logins.pool(&admin, role).await?;
            assert!(
                raw_denied(&pool, "DELETE FROM evc_evidence_snapshots").await,
                "{role:?}"
            );
            assert!(
                raw_denied(
                    &pool,
                    "INSERT INTO evc_evidence_snapshots (slot_ms, report) VALUES (1, '{}')"
                )
                .await,
                "{role:?}"
            );
            let store = PgStore::new(pool, RECORDING)?;
            let snapshots = store.evidence_snapshots(10).await?;
            assert_eq!(snapshots.len(), 1, "{role:?}");
            assert_eq!(snapshots[0].report.window_s, 86_400.0);
        }
        Ok(())
    })
    .await
}

/// An approver login that also holds another consumer's dispatcher role is kept by that
/// role's row policy from quarantining `d.unordered`'s deliveries: the apply sees its writes
/// fall short of the inventory and is refused whole, instead of leaving the notes pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_whose_writes_a_row_policy_hides_is_refused_whole() -> TestResult {
    with_logins(|admin, logins| async move {
        let producer = PgStore::new(logins.pool(&admin, Role::Producer).await?, INVENTORIED)?;
        support::append_notes(&producer, 2, 2).await?;
        let operator = PgStore::new(logins.pool(&admin, Role::Operator).await?, QUARANTINING)?;
        let proposed = operator.propose_inventory(CONSUMER, 100, "alice").await?;
        assert_eq!(proposed.plan.counts.quarantine, 2, "{:?}", proposed.plan);

        support::deploy(&admin, "d.leased", "^1").await?;
        logins
            .grant_scoped(&admin, "evc_dispatcher_d.leased")
            .await?;
        logins.grant_scoped(&admin, "evc_approver").await?;
        let scoped = PgStore::new(
            logins.scoped_pool(&admin, Role::Approver).await?,
            QUARANTINING,
        )?;
        let approval =
            ReplayApproval::new(&proposed.plan.digest, "backfill", "CHG-1", "i-1", "bob");
        let refused = scoped.apply_inventory(CONSUMER, 100, &approval).await;
        assert!(
            matches!(refused, Err(ReplayError::InventoryChanged(_))),
            "{refused:?}"
        );
        let written: i64 = sqlx::query_scalar(
            "SELECT (SELECT count(*) FROM evc_deliveries WHERE consumer = $1) \
                 + (SELECT count(*) FROM evc_inventories)",
        )
        .bind(CONSUMER)
        .fetch_one(&admin)
        .await?;
        assert_eq!(written, 0, "nothing was written");

        // The approver's own login applies it: two quarantined deliveries.
        let approver = PgStore::new(logins.pool(&admin, Role::Approver).await?, QUARANTINING)?;
        let applied = approver.apply_inventory(CONSUMER, 100, &approval).await?;
        assert_eq!((applied.delivered, applied.quarantined), (0, 2));
        Ok(())
    })
    .await
}

/// Whether `error` is the database's refusal of a privilege or of a row-level security
/// policy (SQLSTATE 42501).
pub(crate) fn denied(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(error) = source {
        if let Some(sqlx::Error::Database(database)) = error.downcast_ref::<sqlx::Error>() {
            return database.code().as_deref() == Some("42501");
        }
        source = error.source();
    }
    false
}

fn dispatch_denied<T: std::fmt::Debug>(result: Result<T, DispatchError>) -> bool {
    matches!(&result, Err(DispatchError::Database(error)) if denied(error))
}

fn replay_denied<T: std::fmt::Debug>(result: Result<T, ReplayError>) -> bool {
    matches!(&result, Err(ReplayError::Database(error)) if denied(error))
}

async fn raw_denied(pool: &PgPool, statement: &'static str) -> bool {
    matches!(sqlx::raw_sql(statement).execute(pool).await, Err(error) if denied(&error))
}

async fn jobs(admin: &PgPool, logins: &Logins) -> TestResult {
    let lease = Duration::from_secs(30);

    // The producer appends, one event (twice under one key) and a batch, and can neither
    // claim nor read payloads or the audit.
    let producer = PgStore::new(logins.pool(admin, Role::Producer).await?, DISPATCH_REGISTRY)?;
    let keyed = || support::event("test.note", "1.0.0", support::note(&support::note_key(99)));
    for created in [true, false] {
        let mut tx = producer.begin().await?;
        let receipt = producer
            .append(
                &mut tx,
                keyed(),
                AppendOptions::new().idempotency_key("n-99"),
            )
            .await?;
        tx.commit().await?;
        assert_eq!(receipt.created, created);
    }
    // The legacy path records its outcome in the producer's transaction, once per event.
    for recorded in [true, false] {
        let mut tx = producer.begin().await?;
        let receipt = producer
            .append(
                &mut tx,
                keyed(),
                AppendOptions::new().idempotency_key("n-99"),
            )
            .await?;
        let outcome = [evc_runtime::Intent::new("mail:99", "01")];
        assert_eq!(
            producer
                .record_legacy_outcome(&mut tx, CONSUMER, receipt.event_id, &outcome)
                .await?,
            recorded
        );
        tx.commit().await?;
    }
    support::append_notes(&producer, 4, 4).await?;
    assert!(raw_denied(producer.pool(), "SELECT payload FROM evc_events").await);
    assert!(dispatch_denied(
        support::claim(&producer, CONSUMER, "w/p", 4, lease, false).await
    ));
    assert!(
        raw_denied(
            producer.pool(),
            "SELECT count(*) FROM evc_delivery_attempts"
        )
        .await
    );
    assert!(raw_denied(producer.pool(), "SELECT count(*) FROM evc_acked_batches").await);
    assert!(
        raw_denied(
            producer.pool(),
            "INSERT INTO evc_acked_batches (consumer, owner, seq_bucket, finished_at, \
                 event_ids, generations, attempts, fencing_tokens, started_at) \
             VALUES ('c', 'w', 0, now(), '{01890a5d-ac96-774b-bcce-000000000001}', '{0}', \
                 '{1}', '{1}', ARRAY[now()])"
        )
        .await
    );

    // The dispatcher claims and settles: two dead, one quarantined, one acked.
    let dispatcher = PgStore::new(
        logins.pool(admin, Role::Dispatcher).await?,
        DISPATCH_REGISTRY,
    )?;
    let claimed = support::claim(&dispatcher, CONSUMER, "w/1", 4, lease, false).await?;
    assert_eq!(claimed.len(), 4);
    for (claimed, (class, code, decision)) in claimed.iter().zip([
        (FailureClass::Permanent, "boom", RetryDecision::Dead),
        (FailureClass::Poison, "crash", RetryDecision::Dead),
        (FailureClass::Schema, "bad_shape", RetryDecision::Quarantine),
    ]) {
        dispatcher
            .fail(&claimed.lease, class, code, decision)
            .await?;
    }
    support::ack_current(&dispatcher, &claimed[3].lease).await?;

    support::deploy(admin, CONSUMER, "^1").await?;
    let all = ReplaySelection::consumer(CONSUMER);

    // The operator pauses, resumes and proposes; it cannot apply.
    let operator = Console::connect(logins.pool(admin, Role::Operator).await?).await?;
    assert!(
        operator
            .pause(CONSUMER, &crate::support::change())
            .await?
            .paused
    );
    assert!(
        !operator
            .resume(CONSUMER, &crate::support::change())
            .await?
            .paused
    );
    let proposed = operator.propose_replay(&all, "alice").await?;
    assert_eq!(proposed.plan.deliveries.len(), 3);
    let approval = |key: &str, by: &str| {
        ReplayApproval::new(&proposed.plan.digest, "fixed in 1.4.2", "CHG-7", key, by)
    };
    assert!(replay_denied(
        operator.replay(&all, &approval("r-1", "bob")).await
    ));

    // Neither can the dispatcher, the producer's peer in the data path.
    let as_dispatcher = Console::connect(dispatcher.pool().clone()).await?;
    assert!(replay_denied(
        as_dispatcher.replay(&all, &approval("r-1", "bob")).await
    ));
    assert!(replay_denied(
        as_dispatcher.propose_replay(&all, "carol").await
    ));
    assert!(dispatch_denied(
        as_dispatcher
            .pause(CONSUMER, &crate::support::change())
            .await
    ));

    // The approver applies what another person proposed; it cannot propose, pause, claim or
    // write a delivery's lease.
    let approver_pool = logins.pool(admin, Role::Approver).await?;
    let as_approver = PgStore::new(approver_pool.clone(), DISPATCH_REGISTRY)?;
    assert!(dispatch_denied(
        support::claim(&as_approver, CONSUMER, "w/a", 4, lease, false).await
    ));
    assert!(
        raw_denied(
            &approver_pool,
            "UPDATE evc_deliveries SET lease_owner = 'w/a'"
        )
        .await
    );
    let approver = Console::connect(approver_pool).await?;
    assert!(replay_denied(approver.propose_replay(&all, "bob").await));
    assert!(dispatch_denied(
        approver.pause(CONSUMER, &crate::support::change()).await
    ));
    let applied = approver.replay(&all, &approval("r-1", "bob")).await?;
    assert_eq!((applied.deliveries, applied.repeated), (3, false));

    // The reader reads status, dead letters, timeline and audit, without payloads, and
    // changes nothing.
    let reader = Console::connect(logins.pool(admin, Role::Reader).await?).await?;
    let status = reader.status(Duration::from_secs(3600)).await?;
    assert!(status.consumers.iter().any(|c| c.consumer == CONSUMER));
    assert!(reader.dead_letters(&all).await?.is_empty());
    assert!(!reader.timeline(TRACE_ID).await?.is_empty());
    assert_eq!(reader.discards(10).await?.len(), 0);
    assert!(replay_denied(reader.replay_plan(&all).await));
    assert!(replay_denied(reader.propose_replay(&all, "dave").await));
    assert!(dispatch_denied(
        reader.pause(CONSUMER, &crate::support::change()).await
    ));
    let pool = logins.pool(admin, Role::Reader).await?;
    let envelopes: i64 = sqlx::query_scalar("SELECT count(event_id) FROM evc_events")
        .fetch_one(&pool)
        .await?;
    assert_eq!(envelopes, 5);
    assert!(raw_denied(&pool, "SELECT payload FROM evc_events").await);
    assert!(raw_denied(&pool, "SELECT intended FROM evc_reconciliations").await);
    assert!(raw_denied(&pool, "UPDATE evc_deliveries SET status = 'pending'").await);
    assert!(raw_denied(&pool, "DELETE FROM evc_heartbeats").await);

    // The retention role purges what retention expires and nothing else; no other role may
    // purge. A day on, the acked delivery's attempt is past its period; every event still has
    // a delivery open (the other consumers claimed nothing; the replayed ones wait again), so
    // every event stays, and so do the attempts of the replayed deliveries.
    let a_day_on = std::time::SystemTime::now() + Duration::from_secs(86_400);
    let retention_pool = logins.pool(admin, Role::Retention).await?;
    for role in [
        Role::Operator,
        Role::Approver,
        Role::Dispatcher,
        Role::Reader,
    ] {
        let store = PgStore::new(logins.pool(admin, role).await?, RETAINED)?;
        let purge = store
            .purge_expired(a_day_on, "retention", "ops", true)
            .await;
        assert!(
            matches!(&purge, Err(PurgeError::Database(error)) if denied(error)),
            "{role} purged: {purge:?}"
        );
    }
    let purger = PgStore::new(retention_pool.clone(), RETAINED)?;
    // The role is held to the periods the database deploys, whatever its caller asks: with
    // none deployed, it removes nothing.
    let held = purger
        .purge_expired(a_day_on, "retention", "ops", false)
        .await?;
    assert_eq!(held.total(), 0, "{held:?}");
    PgStore::new(admin.clone(), RETAINED)?
        .install_settings()
        .await?;
    let purged = purger
        .purge_expired(a_day_on, "retention", "ops", true)
        .await?;
    assert_eq!((purged.events, purged.attempts), (0, 1), "{purged:?}");
    let audit: (String, String, String) =
        sqlx::query_as("SELECT ledger, actor, db_role FROM evc_purges WHERE id = $1")
            .bind(purged.purge_id.ok_or("no audit row")?)
            .fetch_one(admin)
            .await?;
    assert_eq!((audit.0.as_str(), audit.1.as_str()), ("retention", "ops"));
    assert_eq!(audit.2, logins.name(Role::Retention));
    assert!(raw_denied(&retention_pool, "SELECT payload FROM evc_events").await);
    assert!(raw_denied(&retention_pool, "SELECT intended FROM evc_reconciliations").await);
    assert!(
        raw_denied(
            &retention_pool,
            "UPDATE evc_deliveries SET status = 'pending'"
        )
        .await
    );
    assert!(raw_denied(&retention_pool, "DELETE FROM evc_heartbeats").await);
    assert!(raw_denied(&retention_pool, "DELETE FROM evc_replays").await);
    // It deletes only through the purge: by hand, not even an expired row.
    assert!(raw_denied(&retention_pool, "DELETE FROM evc_events").await);
    assert!(raw_denied(&retention_pool, "DELETE FROM evc_delivery_attempts").await);
    assert!(raw_denied(&retention_pool, "DELETE FROM evc_acked_batches").await);
    assert!(raw_denied(&retention_pool, "DELETE FROM evc_consumer_effects").await);
    assert!(
        raw_denied(
            &retention_pool,
            "INSERT INTO evc_purges (ledger, cutoff, reason, actor, tables, counts) \
             VALUES ('retention', now(), 'r', 'a', ARRAY['evc_events'], '{}')"
        )
        .await
    );
    assert!(dispatch_denied(
        support::claim(&purger, CONSUMER, "w/r", 4, lease, false).await
    ));

    // What the roles refused left nothing behind: the one replay, by bob.
    let replays = Operate::replays(&dispatcher, 10).await?;
    assert_eq!(replays.len(), 1);
    assert_eq!(replays[0].approved_by.as_deref(), Some("bob"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_cannot_change_a_consumer_by_hand_without_a_record() -> TestResult {
    with_logins(|admin, logins| async move { state_by_hand(&admin, &logins).await }).await
}

/// Whether `result` is the database's refusal of a change whose record is missing.
fn unrecorded<T: std::fmt::Debug>(result: &Result<T, sqlx::Error>) -> bool {
    matches!(result, Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some("23514"))
}

/// A login holding `evc_operator` may write the state tables, but a change commits only with
/// its record of who and why: by hand without one it is refused and nothing changes.
async fn state_by_hand(admin: &PgPool, logins: &Logins) -> TestResult {
    support::deploy(admin, CONSUMER, "^1").await?;
    let pool = logins.pool(admin, Role::Operator).await?;
    let operator = Console::connect(pool.clone()).await?;
    assert!(
        operator
            .pause(CONSUMER, &crate::support::change())
            .await?
            .paused
    );
    let by_hand = sqlx::raw_sql(
        "UPDATE evc_consumer_state SET paused = false, revision = revision + 1 \
         WHERE consumer = 'd.unordered'",
    )
    .execute(&pool)
    .await;
    assert!(unrecorded(&by_hand), "{by_hand:?}");
    let by_hand = sqlx::raw_sql(
        "INSERT INTO evc_tenant_pauses (consumer, tenant_scope) VALUES ('d.unordered', 'acme')",
    )
    .execute(&pool)
    .await;
    assert!(unrecorded(&by_hand), "{by_hand:?}");
    assert!(operator.consumer_state(CONSUMER).await?.paused);
    assert_eq!(operator.state_changes(CONSUMER, 10).await?.len(), 1);

    // With its record in the same transaction, a change by hand commits, and says who and why.
    sqlx::raw_sql(
        "BEGIN; \
         INSERT INTO evc_state_changes (consumer, change, changed_by, reason) \
         VALUES ('d.unordered', 'resume', 'dba', 'resumed by hand'); \
         UPDATE evc_consumer_state SET paused = false, revision = revision + 1 \
         WHERE consumer = 'd.unordered'; \
         COMMIT",
    )
    .execute(&pool)
    .await?;
    assert!(!operator.consumer_state(CONSUMER).await?.paused);
    let newest = &operator.state_changes(CONSUMER, 1).await?[0];
    assert_eq!(
        (newest.by.as_str(), newest.reason.as_str()),
        ("dba", "resumed by hand")
    );
    pool.close().await;
    Ok(())
}
