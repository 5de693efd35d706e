//! What the serve tests share: an outbox per test on each store (a fresh PostgreSQL database
//! with the generated migrations, or a fresh SQLite file), seeded through the reference
//! contracts' producers and handler, and a server on a free loopback port.
//!
//! PostgreSQL comes from `DATABASE_URL` (default `postgres://root@localhost/test`); when it
//! cannot be reached a test says so and skips, except under `CI=true`, where that fails.

#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use evc::uuid::Uuid;
use evc::{
    AppendOptions, DeliveryStatus, Dispatcher, DispatcherConfig, PgStore, SqliteStore, Store,
    TraceContext,
};
use evc_generated::consumers::WorkerNotificationIuConsumer;
use evc_generated::payloads::{IuBornV1, IuBornV1GovernanceState};
use evc_generated::producers::emit_iu_born_v1;
use evc_reference::tour::Notifier;
use evc_serve::{Catalog, GatewayConfig, Outbox, Tokens};
use reqwest::StatusCode;
use serde_json::Value;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type TestResult = Result<(), BoxError>;

/// The consumer whose handler dead-letters one of the seeded events.
pub const CONSUMER: &str = "worker.notification.iu";
/// The trace every seeded event carries.
pub const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
/// A reader's, an operator's and an approver's token.
pub const READER: &str = "reader-token-0123456789abcdef";
pub const OPERATOR: &str = "operator-token-0123456789abcdef";
pub const APPROVER: &str = "approver-token-0123456789abcdef";
/// Bob's second token: bob is an approver too.
pub const BOB_APPROVER: &str = "bob-approver-token-0123456789abcdef";
/// Tina reads tenant `acme` only: the realtime gateway and nothing else.
pub const TENANT_READER: &str = "tenant-reader-token-0123456789abcdef";

/// The tokens of ada (reader), bob (operator, and approver with a second token) and eve
/// (approver).
pub fn tokens() -> Tokens {
    Tokens::parse(&format!(
        "reader ada {READER}\noperator bob {OPERATOR}\napprover eve {APPROVER}\n\
         approver bob {BOB_APPROVER}\nreader tina {TENANT_READER} tenant=acme\n"
    ))
    .expect("valid tokens")
}

/// What [`seed`] wrote.
pub struct Seeded {
    /// The event whose delivery to [`CONSUMER`] is dead.
    pub dead: Uuid,
    /// The event [`CONSUMER`] acked.
    pub acked: Uuid,
}

/// Appends two `iu.born` events under [`TRACE`] and dispatches [`CONSUMER`] until nothing of
/// it is open: its handler acks one and dead-letters the other (a permanent failure). The
/// other consumers of `iu.born` keep their deliveries pending.
pub async fn seed<S: Store>(store: &S) -> Result<Seeded, BoxError> {
    let trace = TraceContext::new(TRACE, "00f067aa0ba902b7", 1)?;
    let units = [Uuid::now_v7(), Uuid::now_v7()];
    let mut ids = Vec::new();
    let mut tx = store.begin().await?;
    {
        let mut publisher = store.publisher(&mut tx, AppendOptions::new());
        for unit in units {
            let born = IuBornV1::new(
                unit,
                Uuid::now_v7(),
                IuBornV1GovernanceState::Draft,
                evc::chrono::Utc::now(),
            );
            ids.push(
                emit_iu_born_v1(&mut publisher, &trace, &born)
                    .await?
                    .event_id,
            );
        }
    }
    tx.commit().await?;

    settle(store, Arc::new(Notifier::bouncing_for(units[1]))).await?;
    Ok(Seeded {
        acked: ids[0],
        dead: ids[1],
    })
}

/// Dispatches [`CONSUMER`] with `notifier` until none of its deliveries is pending or leased.
pub async fn settle<S: Store>(store: &S, notifier: Arc<Notifier>) -> Result<(), BoxError> {
    let handle = Dispatcher::new(
        store.clone(),
        DispatcherConfig::default()
            .owner("serve-test")
            .workers(1)
            .poll_interval(Duration::from_millis(20))
            // The tests place the schedules', lag watch's and evidence recording's rounds
            // themselves.
            .schedule_interval(None)
            .lag_watch_interval(None)
            .evidence_interval(None),
    )
    .serve(WorkerNotificationIuConsumer(notifier))?
    .start();
    // A bound on a hang, not a timing assertion.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let open = store
            .count_deliveries(CONSUMER, &[DeliveryStatus::Pending, DeliveryStatus::Leased])
            .await?;
        if open == 0 {
            break;
        }
        if Instant::now() > deadline {
            handle.shutdown().await;
            return Err(format!("{open} deliveries of {CONSUMER} still open").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    handle.shutdown().await;
    Ok(())
}

/// Runs `check` on a [`PgStore`] of the reference registry over a fresh database with the
/// generated migrations, dropped afterwards.
pub async fn with_postgres<F, Fut>(check: F) -> TestResult
where
    F: FnOnce(PgStore) -> Fut + Send + 'static,
    Fut: Future<Output = TestResult> + Send + 'static,
{
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://root@localhost/test".to_owned());
    let mut admin = match PgConnection::connect(&url).await {
        Ok(connection) => connection,
        Err(error) => {
            let ci = std::env::var("CI").is_ok_and(|value| value.eq_ignore_ascii_case("true"));
            assert!(
                !ci,
                "CI=true and PostgreSQL at {url} is unreachable: {error}"
            );
            eprintln!("skipped: PostgreSQL at {url} is unreachable ({error}); set DATABASE_URL");
            return Ok(());
        }
    };
    let database = format!("evc_serve_{}", Uuid::now_v7().simple());
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .execute(&mut admin)
        .await?;
    let options = PgConnectOptions::from_str(&url)?.database(&database);
    // Its own task, so a failed assertion still drops the database.
    let outcome = tokio::spawn(async move {
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await?;
        let migrations = Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/migrations");
        Migrator::new(migrations.as_path())
            .await?
            .run(&pool)
            .await?;
        let store = PgStore::start(pool.clone(), evc_generated::REGISTRY).await?;
        let result = check(store).await;
        pool.close().await;
        result
    })
    .await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {database} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await?;
    admin.close().await?;
    match outcome {
        Ok(result) => result,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(error) => Err(error.into()),
    }
}

/// The outbox of `store`'s database opened on a registry whose digest is `digest`, which the
/// database does not hold: a server started after another deployment migrated the database.
pub fn drifted(store: &PgStore, digest: &'static str) -> Result<Outbox, BoxError> {
    let registry = evc::Registry {
        digest,
        ..evc_generated::REGISTRY
    };
    let other = PgStore::new(store.pool().clone(), registry)?;
    Ok(Outbox::Postgres(Box::new(evc_serve::PgStores::single(
        other,
    ))))
}

/// Runs `check` on a [`SqliteStore`] of the reference registry over a fresh file in a
/// temporary directory.
pub async fn with_sqlite<F, Fut>(check: F) -> TestResult
where
    F: FnOnce(SqliteStore) -> Fut + Send + 'static,
    Fut: Future<Output = TestResult> + Send + 'static,
{
    let dir = tempfile::tempdir()?;
    let store = SqliteStore::open(
        dir.path().join("outbox.db").to_string_lossy(),
        evc_generated::REGISTRY,
    )
    .await?;
    let result = check(store.clone()).await;
    store.close().await;
    result
}

/// A server on a free loopback port, stopped when dropped.
pub struct Server {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Server {
    /// Serves `outbox` to the callers of [`tokens`], with a gateway without topics.
    pub async fn start(outbox: Outbox) -> Result<Self, BoxError> {
        Self::with(outbox, tokens(), GatewayConfig::default()).await
    }

    /// Serves `outbox` to the callers of `tokens`, with the realtime gateway of `gateway`.
    pub async fn with(
        outbox: Outbox,
        tokens: Tokens,
        gateway: GatewayConfig,
    ) -> Result<Self, BoxError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(evc_serve::run(
            listener,
            outbox,
            tokens,
            gateway,
            Catalog::default(),
            async move {
                let _ = stopped.await;
            },
        ));
        Ok(Self {
            base,
            stop: Some(stop),
        })
    }

    /// The URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A client holding `token`, and the server's OpenAPI document.
pub struct Client {
    http: reqwest::Client,
    token: Option<&'static str>,
    pub document: Value,
}

impl Client {
    pub async fn new(server: &Server, token: Option<&'static str>) -> Result<Self, BoxError> {
        let http = reqwest::Client::new();
        let document = http
            .get(server.url("/api/v1/openapi.json"))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        Ok(Self {
            http,
            token,
            document,
        })
    }

    /// GETs `path`, checks the answer against the document's operation `template`, and
    /// returns its status and body.
    pub async fn get(
        &self,
        server: &Server,
        template: &str,
        path: &str,
    ) -> Result<(StatusCode, Value), BoxError> {
        self.send(server, "get", template, path, None).await
    }

    /// POSTs `body` to `path`, checked like [`Client::get`].
    pub async fn post(
        &self,
        server: &Server,
        template: &str,
        path: &str,
        body: &Value,
    ) -> Result<(StatusCode, Value), BoxError> {
        self.send(server, "post", template, path, Some(body)).await
    }

    async fn send(
        &self,
        server: &Server,
        method: &str,
        template: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, Value), BoxError> {
        let mut request = match body {
            Some(body) => self.http.post(server.url(path)).json(body),
            None => self.http.get(server.url(path)),
        };
        if let Some(token) = self.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await?;
        let status = response.status();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body: Value = response.json().await?;
        self.conforms(method, template, status, &content_type, &body)
            .map_err(|why| format!("{method} {path}: {why}"))?;
        Ok((status, body))
    }

    /// Whether `body` is what the document promises for `method` on `template` at `status`.
    pub fn conforms(
        &self,
        method: &str,
        template: &str,
        status: StatusCode,
        content_type: &str,
        body: &Value,
    ) -> Result<(), String> {
        let response = self
            .document
            .pointer(&format!(
                "/paths/{}/{method}/responses/{}",
                template.replace('~', "~0").replace('/', "~1"),
                status.as_u16()
            ))
            .ok_or_else(|| format!("status {status} is not documented for {method} {template}"))?;
        let media = response
            .get("content")
            .and_then(|content| content.get(content_type))
            .ok_or_else(|| format!("content type {content_type:?} is not documented"))?;
        let mut schema = media
            .get("schema")
            .cloned()
            .ok_or("the documented content has no schema")?;
        // The schema's references point into the document's components.
        schema["components"] = self.document["components"].clone();
        let validator = jsonschema::draft202012::new(&schema)
            .map_err(|error| format!("the documented schema does not compile: {error}"))?;
        let errors: Vec<String> = validator
            .iter_errors(body)
            .map(|error| format!("{} at {}", error, error.instance_path()))
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(format!("the body breaks the schema: {}", errors.join("; ")))
        }
    }
}

/// One Server-Sent Events message, or a comment line.
#[derive(Debug, Clone, PartialEq)]
pub struct SseMessage {
    /// `event:` (empty for a comment).
    pub event: String,
    /// `id:`, if any.
    pub id: Option<String>,
    /// `data:` (a comment's text, for a comment).
    pub data: String,
}

impl SseMessage {
    /// The data as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or(Value::Null)
    }
}

/// A client's open event stream.
pub struct SseStream {
    response: reqwest::Response,
    buffer: String,
}

impl SseStream {
    /// Opens `path` with `token` and `last_event_id`; the status when it is not 200.
    pub async fn open(
        server: &Server,
        path: &str,
        token: Option<&str>,
        last_event_id: Option<&str>,
    ) -> Result<Result<Self, (StatusCode, Value)>, BoxError> {
        let mut request = reqwest::Client::new().get(server.url(path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let response = request.send().await?;
        let status = response.status();
        if status != StatusCode::OK {
            return Ok(Err((status, response.json().await?)));
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default();
        assert_eq!(content_type, "text/event-stream");
        Ok(Ok(Self {
            response,
            buffer: String::new(),
        }))
    }

    /// The next message or comment (`None`: the server ended the stream). Waits at most 60 s,
    /// a bound on a hang.
    pub async fn next_any(&mut self) -> Result<Option<SseMessage>, BoxError> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut message = SseMessage {
                    event: String::new(),
                    id: None,
                    data: String::new(),
                };
                for line in block.lines() {
                    if let Some(comment) = line.strip_prefix(':') {
                        message.data = comment.trim().to_owned();
                    } else if let Some((field, value)) = line.split_once(':') {
                        let value = value.strip_prefix(' ').unwrap_or(value).to_owned();
                        match field {
                            "event" => message.event = value,
                            "id" => message.id = Some(value),
                            "data" => message.data = value,
                            _ => {}
                        }
                    }
                }
                return Ok(Some(message));
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk())
                .await
                .map_err(|_| "no message within 60 s")??;
            match chunk {
                Some(bytes) => self.buffer.push_str(std::str::from_utf8(&bytes)?),
                None => return Ok(None),
            }
        }
    }

    /// The next message, comments skipped.
    pub async fn next(&mut self) -> Result<Option<SseMessage>, BoxError> {
        loop {
            match self.next_any().await? {
                Some(message) if message.event.is_empty() => continue,
                other => return Ok(other),
            }
        }
    }
}
